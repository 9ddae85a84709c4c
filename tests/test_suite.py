"""Caffe's own test suite as `engine.install --test-suite` runs it: googletest's summary read, the
thread counts, and the refusal a failing suite gives (nothing installed)."""

from __future__ import annotations

import subprocess
import sys

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
