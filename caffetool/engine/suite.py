"""Caffe's own test suite (``test.testbin``, googletest) on a freshly built engine, before it is installed.

BVLC Caffe ships about 1,160 CPU tests: every layer's gradients checked numerically, the solvers'
updates against closed forms, im2col, the data layers, the net and solver machinery. They are the
reference for any change to the engine's arithmetic, caffetool's own patches included, so
``engine.install --test-suite`` builds them in the staging build tree and runs them from the
source root (they read ``src/caffe/test/test_data``), once on one thread and once on several (the
parallel layers take other paths with more threads). A failing test stops the install: nothing is
moved into place, and the error names the tests and the log. Each run gets a temporary folder of
its own as ``TMPDIR``, removed after it: about 800 of Caffe's tests make a temporary folder there
and none removes it.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from caffetool import fsio
from caffetool.engine import cmake, cpu_threads
from caffetool.errors import BuildError

TARGET = "test.testbin"
# The CPU tests of a CPU-only build (which has no GPU tests but those named so).
CPU_FILTER = "--gtest_filter=-*GPU*"
# A CUDA build's CPU half, where no GPU is: its typed tests run CPU float and double as /0 and /1
# and the GPU ones as /2 and /3 (TestDtypesAndDevices); the cuDNN layers, the im2col kernels
# and PlatformTest (the device's properties) are GPU tests whose names do not say so;
# CommonTest.TestBrewMode leaves the process in GPU mode, where the tests after it would pin host
# memory through the driver.
CUDA_BUILD_CPU_FILTER = ("--gtest_filter=-*GPU*:*/2.*:*/3.*:CuDNN*:Im2colKernelTest*:PlatformTest.*:"
                         "CommonTest.TestBrewMode")
RAN = re.compile(r"^\[==========\] (\d+) tests? from \d+ test cases? ran")
PASSED = re.compile(r"^\[  PASSED  \] (\d+) tests?")
FAILED = re.compile(r"^\[  FAILED  \] (\S+)")


@dataclass
class SuiteRun:
    threads: int
    tests: int
    passed: int
    failed: list[str]
    seconds: float


def thread_counts(cores: int) -> tuple[int, ...]:
    """One thread (BVLC's serial paths) and several (the parallel ones), at least two even on one core."""
    return (1, max(2, cores))


@dataclass(frozen=True)
class SuitePlan:
    """Which tests run, and on how many threads."""

    test_filter: str
    threads: tuple[int, ...]


def plan(cuda: bool, openmp: bool, gpu_visible: bool) -> SuitePlan:
    """A CPU build: its CPU tests, on one thread and on several where its layers are parallel. A CUDA
    build (serial CPU layers): every test where a GPU is visible, its CPU half where none is."""
    counts = thread_counts(cpu_threads.available()) if openmp else (1,)
    if not cuda:
        return SuitePlan(CPU_FILTER, counts)
    return SuitePlan("" if gpu_visible else CUDA_BUILD_CPU_FILTER, (1,))


def run(tree: Path, build_dir: Path, jobs: int, log: Path, env: dict[str, str],
        how: SuitePlan | None = None) -> list[SuiteRun]:
    """Build the suite in ``build_dir`` and run it from ``tree`` as ``how`` says (default: a CPU
    build's tests on one thread and on several)."""
    how = how or plan(cuda=False, openmp=True, gpu_visible=False)
    cmake.run_step(cmake.build_command(build_dir, jobs, TARGET), build_dir, log, "the build of Caffe's test suite")
    binary = build_dir / "test" / TARGET
    runs = []
    for threads in how.threads:
        lines: list[str] = []
        started = time.monotonic()
        suite_env = dict(env)
        cpu_threads.apply(threads, suite_env)
        try:
            with tempfile.TemporaryDirectory(prefix="caffe-suite-") as scratch:
                suite_env["TMPDIR"] = scratch  # the folders Caffe's tests make (MakeTempDir) and never remove
                cmake.run_step([str(binary), *filter(None, [how.test_filter])], tree, log,
                               f"Caffe's test suite on {threads} thread(s)", on_line=lines.append, env=suite_env)
        except BuildError:
            if not any(RAN.match(line) for line in lines):
                running = [line.split("]", 1)[1].strip() for line in lines if line.startswith("[ RUN      ]")]
                raise BuildError(
                    f"Caffe's test suite stopped on {threads} thread(s) before its end, in "
                    f"{running[-1] if running else 'its set-up'} (the test aborted the binary); the engine was not "
                    f"installed. Full log: {log}") from None
            done = summarise(lines, threads, time.monotonic() - started)
            if not done.failed:
                raise
            raise BuildError(
                f"Caffe's test suite failed on {threads} thread(s): {len(done.failed)} of {done.tests} tests "
                f"({', '.join(done.failed[:10])}{' ...' if len(done.failed) > 10 else ''}); the engine was not "
                f"installed. Full log: {log}"
            ) from None
        runs.append(summarise(lines, threads, time.monotonic() - started))
    return runs


def summarise(lines: list[str], threads: int, seconds: float) -> SuiteRun:
    """The counts googletest prints at the end of a run."""
    tests = passed = 0
    failed: list[str] = []
    for line in lines:
        if m := RAN.match(line):
            tests = int(m.group(1))
        elif m := PASSED.match(line):
            passed = int(m.group(1))
        elif (m := FAILED.match(line)) and not m.group(1)[0].isdigit():
            name = m.group(1).rstrip(",")  # typed tests: "Layer/0.TestGradient, where TypeParam = float"
            if name not in failed:
                failed.append(name)
    if tests == 0:
        raise BuildError("Caffe's test suite ran no tests (no googletest summary line)")
    return SuiteRun(threads, tests, passed, failed, round(seconds, 1))


def keep(tree: Path, build_dir: Path, dest: Path) -> Path:
    """The built suite, kept beside an engine for a machine with a GPU (``benchmarks/gpu_proof.py``):
    ``bin/`` the test binary and the ``libcaffe`` it was linked with, ``src/caffe/test/test_data``,
    and ``source.txt``, the source root whose absolute path the binary reads its test data from."""
    with fsio.staged_dir(dest) as tmp:
        (tmp / "bin").mkdir()
        for built in (build_dir / "test" / TARGET, build_dir / "lib" / "libcaffe.so.1.0.0"):
            shutil.copy2(built, tmp / "bin" / built.name)
        shutil.copytree(tree / "src" / "caffe" / "test" / "test_data", tmp / "src" / "caffe" / "test" / "test_data")
        (tmp / "source.txt").write_text(f"{tree}\n")
    return dest
