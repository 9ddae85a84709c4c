"""How many CPU threads the engine uses, set where its libraries read it: the environment.

caffetool's engine runs its CPU layers on OpenMP threads and its BLAS (OpenBLAS's OpenMP build, or
MKL) on the same threads, so one number governs both; the variables are set for every library a
build may use. A sweep sets them per trial (its ``--cpus-per-trial``) before a trial trains, and an
explicit ``--threads`` wins over both.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def available() -> int:
    """The cores this process may run on (its CPU affinity: a container's or taskset's limit)."""
    return len(os.sched_getaffinity(0))


def apply(requested: int | None, environ: MutableMapping[str, str] = os.environ) -> int:
    """Set the thread variables for the engines this process starts, and return the count.

    ``requested`` (``--threads``) wins; else an OMP_NUM_THREADS already set (a sweep's trial, the
    user's shell) is kept; else every core this process may use.
    """
    threads = requested or _from_environment(environ) or available()
    for name in VARIABLES:
        environ[name] = str(threads)
    return threads


def of_engine(options: dict, requested: int | None = None, environ: MutableMapping[str, str] = os.environ) -> int:
    """The CPU threads an engine built with ``options`` (its manifest's) runs its layers on.

    A stock engine's layers are serial (1); a tuned one uses what ``apply`` would set, without
    setting it.
    """
    if not options.get("openmp"):
        return 1
    return requested or _from_environment(environ) or available()


def _from_environment(environ: MutableMapping[str, str]) -> int | None:
    value = environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(value) if value.isdigit() and int(value) > 0 else None
