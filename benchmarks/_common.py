"""Helpers shared by the benchmarks: timing child processes with their peak memory."""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from dataclasses import dataclass


@dataclass
class Run:
    seconds: float
    peak_rss_mb: float


def timed(argv: list[str], env: dict | None = None) -> Run:
    """Wall time and peak RSS (from wait4's rusage) of one child process."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{argv[0]} failed: {process.stderr.read().decode()[-500:]}")
    return Run(seconds, usage.ru_maxrss / 1024)


def median(values: list[float]) -> float:
    return statistics.median(values)
