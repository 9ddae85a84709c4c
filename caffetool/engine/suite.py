"""Caffe's own test suite (``test.testbin``, googletest) on a freshly built engine, before it is installed.

BVLC Caffe ships about 1,160 CPU tests: every layer's gradients checked numerically, the solvers'
updates against closed forms, im2col, the data layers, the net and solver machinery. They are the
reference for any change to the engine's arithmetic, caffetool's own patches included, so
``engine.install --test-suite`` builds them in the staging build tree and runs them from the
source root (they read ``src/caffe/test/test_data``), once on one thread and once on several (the
parallel layers take other paths with more threads). A failing test stops the install: nothing is
moved into place, and the error names the tests and the log.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

from caffetool.engine import build, threads as engine_threads
from caffetool.errors import BuildError

TARGET = "test.testbin"
# The CPU tests; a CUDA build compiles GPU tests too, which need a GPU.
CPU_FILTER = "--gtest_filter=-*GPU*"
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


def run(tree: Path, build_dir: Path, jobs: int, log: Path, env: dict[str, str]) -> list[SuiteRun]:
    """Build the suite in ``build_dir`` and run it from ``tree`` on each of ``thread_counts``."""
    build.run_step(["make", f"-j{jobs}", TARGET], build_dir, log, "the build of Caffe's test suite")
    binary = build_dir / "test" / TARGET
    runs = []
    for threads in thread_counts(engine_threads.available()):
        lines: list[str] = []
        started = time.monotonic()
        suite_env = dict(env)
        engine_threads.apply(threads, suite_env)
        try:
            build.run_step([str(binary), CPU_FILTER], tree, log, f"Caffe's test suite on {threads} thread(s)",
                           on_line=lines.append, env=suite_env)
        except BuildError:
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
