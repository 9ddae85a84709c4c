"""How many CPU threads the engine uses, set where its libraries read it: the environment.

caffetool's engine runs its CPU layers on OpenMP threads and its BLAS (OpenBLAS's OpenMP build, or
MKL) on the same threads, so one number governs both; the variables are set for every library a
build may use. A sweep sets them per trial (its ``--cpus-per-trial``) before a trial trains, and an
explicit ``--threads`` wins over both.

Where the threads run (:func:`placement`): GNU OpenMP threads spin a while before they sleep at
each barrier, which is fast on a quiet machine and slow on a busy one, where a spinning thread takes
the core from the one it waits for. Measured on LeNet (benchmarks/RESULTS.md, "A busy machine"),
binding one thread to each core (``OMP_PROC_BIND=true``, ``OMP_PLACES=cores``) keeps the spin where
it does no harm: with one core kept busy by another program, twice the default's speed, and the
same speed on a quiet machine; a passive or shorter wait costs 10 to 30% on a quiet one. It is set
only for a Caffe that uses every core this process may run on (a sweep's 1-CPU trials would all
be bound to the first core), never for pycaffe inside caffetool (a bound initial thread would
confine the whole process), and never over a user's own placement or wait settings. A server's
pycaffe spins shorter instead (:func:`for_serving`).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
PLACEMENT = {"OMP_PROC_BIND": "true", "OMP_PLACES": "cores"}
# A server's forward passes are short and come one after another with the event loop's work between
# them: threads that spin GNU OpenMP's default 300,000 rounds at each barrier take the core that work
# needs. Measured with pycaffe on 2 cores (benchmarks/RESULTS.md, "The demo server"): LeNet, one image,
# 6.1 ms per forward pass by default, 0.46 ms at 3,000 rounds (16 images: 0.88 and 0.94 ms).
SERVING_WAIT = {"GOMP_SPINCOUNT": "3000"}
# A user's own say on where threads run or how they wait: any of these leaves placement to them.
USER_PLACEMENT = ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "KMP_AFFINITY", "OMP_WAIT_POLICY",
                  "GOMP_SPINCOUNT")


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


def placement(environ: MutableMapping[str, str] | dict[str, str] = os.environ) -> dict[str, str]:
    """:data:`PLACEMENT` for a Caffe child whose threads fill every core this process may use, unless
    ``environ`` already says where threads run or how they wait."""
    if any(name in environ for name in USER_PLACEMENT):
        return {}
    threads = _from_environment(environ) or available()
    return dict(PLACEMENT) if threads == available() else {}


def for_serving(environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """Set :data:`SERVING_WAIT` for a server's pycaffe (before it is imported: libgomp reads it once),
    unless ``environ`` already says how threads wait or where they run; returns what was set."""
    if any(name in environ for name in USER_PLACEMENT):
        return {}
    environ.update(SERVING_WAIT)
    return dict(SERVING_WAIT)


def _from_environment(environ: MutableMapping[str, str]) -> int | None:
    value = environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(value) if value.isdigit() and int(value) > 0 else None
