"""Caffe's own test suite as `engine.install --test-suite` runs it: googletest's summary read, the
thread counts, and the refusal a failing suite gives (nothing installed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from caffetool.engine import suite
from caffetool.errors import BuildError

from .conftest import PROJECT

# googletest 1.7's end of run (the copy in Caffe's src/gtest), two typed tests failing
FAILING_RUN = """\
[==========] Running 1162 tests from 200 test cases.
[ RUN      ] PoolingLayerTest/0.TestForwardMax
[  FAILED  ] PoolingLayerTest/0.TestForwardMax, where TypeParam = caffe::CPUDevice<float> (0 ms)
[==========] 1162 tests from 200 test cases ran. (17812 ms total)
[  PASSED  ] 1160 tests.
[  FAILED  ] 2 tests, listed below:
[  FAILED  ] PoolingLayerTest/0.TestForwardMax, where TypeParam = caffe::CPUDevice<float>
[  FAILED  ] SGDSolverTest/1.TestLeastSquaresUpdate, where TypeParam = caffe::CPUDevice<double>

 2 FAILED TESTS
"""


def test_a_run_is_read_from_googletests_summary():
    run = suite.summarise(FAILING_RUN.splitlines(), 2, 17.9)
    assert (run.tests, run.passed, run.threads) == (1162, 1160, 2)
    assert run.failed == ["PoolingLayerTest/0.TestForwardMax", "SGDSolverTest/1.TestLeastSquaresUpdate"]
    passing = [line for line in FAILING_RUN.splitlines()[:4] if "FAILED" not in line] + ["[  PASSED  ] 1162 tests."]
    assert suite.summarise(passing, 1, 1.0).failed == []


def test_a_test_that_aborts_the_binary_is_named(tmp_path):
    """A stand-in for test.testbin (a script, built by real make) that dies in its second test, as a
    GPU test does on a machine without a driver (glog's CHECK aborts the process)."""
    build_dir = tmp_path / "build"
    build_dir.mkdir()
    (tmp_path / "run.out").write_text("[==========] Running 2 tests from 1 test case.\n[ RUN      ] A.One\n"
                                      "[       OK ] A.One (0 ms)\n[ RUN      ] PlatformTest.TestInitialization\n"
                                      "F1125 test_platform.cpp:42] Check failed: error == cudaSuccess (35 vs. 0)\n")
    (build_dir / "Makefile").write_text(
        f"{suite.TARGET}:\n\tmkdir -p test && printf '#!/bin/sh\\ncat {tmp_path / 'run.out'}; exit 134\\n' "
        f"> test/{suite.TARGET} && chmod +x test/{suite.TARGET}\n")
    with pytest.raises(BuildError) as failed:
        suite.run(tmp_path, build_dir, 1, tmp_path / "log", {}, suite.plan(cuda=True, openmp=False, gpu_visible=False))
    assert str(failed.value) == ("Caffe's test suite stopped on 1 thread(s) before its end, in "
                                 "PlatformTest.TestInitialization (the test aborted the binary); the engine was not "
                                 f"installed. Full log: {tmp_path / 'log'}")


def test_output_without_a_summary_is_an_error_not_a_pass():
    with pytest.raises(BuildError, match="ran no tests"):
        suite.summarise(["Segmentation fault"], 1, 0.1)


def test_the_suite_runs_serial_and_parallel_paths_even_on_one_core():
    assert suite.thread_counts(1) == (1, 2)
    assert suite.thread_counts(16) == (1, 16)


def test_a_failing_suite_names_its_tests_and_stops_the_install(tmp_path):
    """A stand-in for test.testbin (a script printing googletest's end of a failing run), built by
    real make from a Makefile, run as suite.run runs Caffe's."""
    build_dir = tmp_path / "build"
    build_dir.mkdir()
    (tmp_path / "run.out").write_text(FAILING_RUN)
    (build_dir / "Makefile").write_text(
        f"{suite.TARGET}:\n\tmkdir -p test && printf '#!/bin/sh\\ncat {tmp_path / 'run.out'}; exit 1\\n' "
        f"> test/{suite.TARGET} && chmod +x test/{suite.TARGET}\n")
    log = tmp_path / "build.log"
    with pytest.raises(BuildError) as failed:
        suite.run(tmp_path, build_dir, 1, log, {})
    assert str(failed.value) == (
        "Caffe's test suite failed on 1 thread(s): 2 of 1162 tests (PoolingLayerTest/0.TestForwardMax, "
        f"SGDSolverTest/1.TestLeastSquaresUpdate); the engine was not installed. Full log: {log}")
    assert "[  PASSED  ] 1160 tests." in log.read_text()


def test_asking_for_the_suite_on_an_installed_engine_says_how_to_run_it(engine):
    done = subprocess.run([sys.executable, "-m", "invoke", "engine.install", "--test-suite"], cwd=PROJECT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "no build ran Caffe's test suite: add --force" in done.stdout
    assert f"already installed at {engine.prefix}" in done.stdout


def test_what_the_suite_leaves_in_its_temporary_folder_is_removed(tmp_path):
    """The stand-in test.testbin makes a folder where Caffe's MakeTempDir makes them (boost's
    temp_directory_path: $TMPDIR) and, like Caffe's tests, leaves it."""
    build_dir = tmp_path / "build"
    build_dir.mkdir()
    passing = "[==========] 1 test from 1 test case ran. (1 ms total)\n[  PASSED  ] 1 test.\n"
    (tmp_path / "run.out").write_text(passing)
    (build_dir / "Makefile").write_text(
        f"{suite.TARGET}:\n\tmkdir -p test && printf '#!/bin/sh\\nmktemp -d \"$$TMPDIR/caffe_test.XXXX\" "
        f"> {tmp_path / 'made'}; cat {tmp_path / 'run.out'}\\n' > test/{suite.TARGET} && chmod +x test/{suite.TARGET}\n")
    suite.run(tmp_path, build_dir, 1, tmp_path / "log", {}, suite.plan(cuda=True, openmp=False, gpu_visible=False))
    made = Path((tmp_path / "made").read_text().strip())
    assert made.name.startswith("caffe_test.") and made.parent.name.startswith("caffe-suite-")
    assert not made.parent.exists()


def test_which_tests_run_follows_the_build_and_the_machine():
    """A CPU build: its CPU tests on one thread and several. A CUDA build: all of them where a GPU is,
    its CPU half where none is (typed GPU tests are /2 and /3; cuDNN and im2col-kernel tests are
    GPU tests whose names do not say so; the brew-mode test leaves the process in GPU mode)."""
    cpu = suite.plan(cuda=False, openmp=True, gpu_visible=False)
    assert cpu.test_filter == "--gtest_filter=-*GPU*" and cpu.threads[0] == 1 and len(cpu.threads) == 2
    assert suite.plan(cuda=False, openmp=False, gpu_visible=False).threads == (1,)
    assert suite.plan(cuda=True, openmp=False, gpu_visible=True) == suite.SuitePlan("", (1,))
    half = suite.plan(cuda=True, openmp=False, gpu_visible=False).test_filter
    assert half == ("--gtest_filter=-*GPU*:*/2.*:*/3.*:CuDNN*:Im2colKernelTest*:PlatformTest.*:"
                    "CommonTest.TestBrewMode")


def test_a_plan_reaches_the_test_binary(tmp_path):
    """The stand-in test.testbin (a script, built by real make) records the arguments it is given."""
    build_dir = tmp_path / "build"
    build_dir.mkdir()
    passing = FAILING_RUN.splitlines()[0] + "\n[==========] 3 tests from 1 test case ran. (1 ms total)\n[  PASSED  ] 3 tests.\n"
    (tmp_path / "run.out").write_text(passing)
    (build_dir / "Makefile").write_text(
        f"{suite.TARGET}:\n\tmkdir -p test && printf '#!/bin/sh\\necho \"$$@\" > {tmp_path / 'args'}; "
        f"cat {tmp_path / 'run.out'}\\n' > test/{suite.TARGET} && chmod +x test/{suite.TARGET}\n")
    runs = suite.run(tmp_path, build_dir, 1, tmp_path / "log", {}, suite.plan(cuda=True, openmp=False, gpu_visible=False))
    assert [(r.threads, r.passed) for r in runs] == [(1, 3)]
    assert (tmp_path / "args").read_text().strip() == suite.CUDA_BUILD_CPU_FILTER
    suite.run(tmp_path, build_dir, 1, tmp_path / "log", {}, suite.plan(cuda=True, openmp=False, gpu_visible=True))
    assert (tmp_path / "args").read_text().strip() == ""  # every test


def test_the_built_suite_is_kept_with_its_library_and_data(tmp_path):
    tree, build_dir = tmp_path / "src-tree", tmp_path / "build"
    (tree / "src" / "caffe" / "test" / "test_data").mkdir(parents=True)
    (tree / "src" / "caffe" / "test" / "test_data" / "sample_data.h5").write_bytes(b"hdf5")
    (build_dir / "test").mkdir(parents=True)
    (build_dir / "lib").mkdir()
    (build_dir / "test" / suite.TARGET).write_bytes(b"\x7fELF test")
    (build_dir / "lib" / "libcaffe.so.1.0.0").write_bytes(b"\x7fELF lib")
    kept = suite.keep(tree, build_dir, tmp_path / "kept")
    assert (kept / "bin" / suite.TARGET).read_bytes() == b"\x7fELF test"
    assert (kept / "bin" / "libcaffe.so.1.0.0").read_bytes() == b"\x7fELF lib"
    assert (kept / "src" / "caffe" / "test" / "test_data" / "sample_data.h5").read_bytes() == b"hdf5"
    assert (kept / "source.txt").read_text() == f"{tree}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build", "kept", "src-tree"]  # no staging left
