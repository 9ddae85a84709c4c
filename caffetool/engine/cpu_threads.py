"""How many CPU threads the engine uses, set where its libraries read it: the environment.

caffetool's engine runs its CPU layers on OpenMP threads and its BLAS (OpenBLAS's OpenMP build, or
MKL) on the same threads, so one number governs both; the variables are set for every library a
build may use.

By default the count follows the CPU the training actually gets (:func:`apply`): the engine
(patch 0009, ``CAFFE_ADAPT_THREADS``) re-sizes its team as it runs, to the cores this process may
use (its affinity, a container's CPU quota) less the cores other programs keep busy — a team of
threads that meet at barriers is only as fast as its slowest thread, and a thread whose core another
program takes holds up the rest. ``--threads``, an ``OMP_NUM_THREADS`` of the user's or a sweep
trial's ``--cpus-per-trial`` fix the count instead, and ``CAFFE_ADAPT_THREADS=0`` fixes it at the budget.

Every count is bounded by the cores this process may use (:func:`available`): threads past them only
wait for each other at the barriers, and thousands of them make a training run many times slower.
``--threads`` past them is refused; a value in the environment past them is capped, and one
that is no count at all is ignored, each with a warning (:func:`settle`, as caffetool starts).

Where the threads run (:func:`placement`): a fixed team that fills every core this process may run
on is bound one thread to a core (``OMP_PROC_BIND=true``, ``OMP_PLACES=cores``), which keeps GNU
OpenMP's spin at its barriers where it does no harm (benchmarks/RESULTS.md, "A busy machine"). An
adaptive team is never bound: as it shrinks, its threads must be free to leave a busy core. Never
for pycaffe inside caffetool (a bound initial thread would confine the whole process), and never
over a user's own placement or wait settings. A server's pycaffe spins shorter instead
(:func:`for_serving`).
"""

from __future__ import annotations

import math
import os
from collections.abc import MutableMapping
from pathlib import Path

from caffetool.errors import ConfigError

VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
ADAPT = "CAFFE_ADAPT_THREADS"  # the engine's switch (patch 0009): 1 follows the CPU, 0 keeps the count
CGROUP_ROOT = Path("/sys/fs/cgroup")
PLACEMENT = {"OMP_PROC_BIND": "true", "OMP_PLACES": "cores"}
# A server's forward passes are short and come one after another with the event loop's work between
# them: threads that spin GNU OpenMP's default 300,000 rounds at each barrier take the core that work
# needs. Measured with pycaffe on 2 cores (benchmarks/RESULTS.md, "The demo server"): LeNet, one image,
# 6.1 ms per forward pass by default, 0.46 ms at 3,000 rounds (16 images: 0.88 and 0.94 ms).
SERVING_WAIT = {"GOMP_SPINCOUNT": "3000"}
# A user's own say on where threads run or how they wait: any of these leaves placement to them.
USER_PLACEMENT = ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "KMP_AFFINITY", "OMP_WAIT_POLICY",
                  "GOMP_SPINCOUNT")
ADAPT_VALUES = ("0", "1")
MAX_DIGITS = 9  # a thread count written with more digits is no count any machine can run


def available() -> int:
    """The cores this process may run on (its CPU affinity: a container's or taskset's limit)."""
    return len(os.sched_getaffinity(0))


def quota_cores(root: Path = CGROUP_ROOT, own: Path = Path("/proc/self/cgroup")) -> float | None:
    """The tightest CPU quota on this process's cgroup and its parents, in cores (``docker run
    --cpus 1.5``: 1.5), or None without one — the engine's own rule (patch 0009): the cgroup named in
    ``/proc/self/cgroup`` (v2 ``0::/path``; v1 the line naming the ``cpu`` controller), looked up under
    ``root`` (v1: its ``cpu`` or ``cpu,cpuacct`` mount) down to the mount's root, which is a
    container's own cgroup where it has a cgroup namespace; ``cpu.max``, else ``cpu.cfs_quota_us``
    over ``cpu.cfs_period_us``."""
    try:
        lines = own.read_text().splitlines()
    except OSError:
        lines = []
    quotas = []
    for line in lines or ["0::/"]:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            mounts = [root]
        elif "cpu" in controllers.split(","):
            mounts = [root / controllers, root / "cpu,cpuacct", root / "cpu"]
        else:
            continue
        for mount in mounts:
            level = Path(path)
            while True:
                if (quota := _quota_in(mount / str(level).lstrip("/"))) is not None:
                    quotas.append(quota)
                if level == level.parent:
                    break
                level = level.parent
    return min(quotas, default=None)


def _quota_in(folder: Path) -> float | None:
    try:
        if (folder / "cpu.max").is_file():
            quota, period = (folder / "cpu.max").read_text().split()[:2]
            return None if quota == "max" else int(quota) / int(period)
        if (folder / "cpu.cfs_quota_us").is_file():
            quota = int((folder / "cpu.cfs_quota_us").read_text())
            return quota / int((folder / "cpu.cfs_period_us").read_text()) if quota > 0 else None
    except (OSError, ValueError, ZeroDivisionError):
        return None
    return None


def budget(root: Path = CGROUP_ROOT, own: Path = Path("/proc/self/cgroup")) -> int:
    """The most threads this process can keep busy: its cores, at most a quota's whole cores."""
    quota = quota_cores(root, own)
    cores = available()
    return cores if quota is None else max(1, min(cores, math.floor(quota + 1e-6)))


def apply(requested: int | None, environ: MutableMapping[str, str] = os.environ) -> int:
    """Set the thread variables for the engines this process starts, and return the count.

    ``requested`` (``--threads``) wins, fixed; else an OMP_NUM_THREADS already set (a sweep's trial,
    the user's shell) is kept, fixed, at most :func:`available`; else the :func:`budget`, which the
    engine then adapts to what the CPU gives (``CAFFE_ADAPT_THREADS=1``) unless the user's
    ``CAFFE_ADAPT_THREADS=0`` keeps it fixed.
    """
    fixed = checked(requested) or _fixed_in(environ)
    threads = fixed or budget()
    for name in VARIABLES:
        environ[name] = str(threads)
    if fixed and environ.get(ADAPT) != "1":
        environ[ADAPT] = "0"
    elif not fixed and environ.get(ADAPT) != "0":
        environ[ADAPT] = "1"
    return threads


def checked(requested: int | None, flag: str = "--threads") -> int | None:
    """``requested`` (a flag's count, already read as a whole number), refused past the cores this
    process may use: more threads than cores only wait for each other."""
    cores = available()
    if requested is not None and not 1 <= requested <= cores:
        raise ConfigError(f"{flag} must be from 1 to {cores} (the cores this process may use; more threads than "
                          f"cores only wait for each other), got {requested}")
    return requested


def settle(environ: MutableMapping[str, str] = os.environ) -> list[str]:
    """Bring the thread settings in ``environ`` within what this machine allows, before anything
    reads them, and return one warning for each value changed.

    A count past the cores this process may use is capped at them; one that is not a count (``abc``,
    ``0``, ``-1``) is removed, so the default applies, as the OpenMP runtime would do with a warning
    of its own only in the engine's log; a ``CAFFE_ADAPT_THREADS`` other than 0 or 1 is removed too.
    """
    cores = available()
    warnings = []
    for name in VARIABLES:
        text = environ.get(name, "").strip()
        if not text:
            continue
        counts = [n for part in text.split(",") if (n := _count(part)) is not None]
        if len(counts) < text.count(",") + 1:
            del environ[name]
            warnings.append(f"Warning: {name}={text} is ignored: it must be a number of threads from 1 to {cores} "
                            "(the cores this process may use); the default applies")
        elif max(counts) > cores:
            environ[name] = ",".join(str(min(n, cores)) for n in counts)
            warnings.append(f"Warning: {name}={text} is capped at {environ[name]}: this process may use {cores} "
                            "core(s), and more threads than cores only wait for each other")
    adapt = environ.get(ADAPT, "")
    if adapt and adapt not in ADAPT_VALUES:
        del environ[ADAPT]
        warnings.append(f"Warning: {ADAPT}={adapt} is ignored: it must be 1 (the thread count follows the CPU) "
                        "or 0 (it stays fixed)")
    return warnings


def adaptive(environ: MutableMapping[str, str] | dict[str, str] = os.environ) -> bool:
    """Whether the engine started with ``environ`` sizes its team as it runs (patch 0009's rule)."""
    if environ.get(ADAPT):
        return environ[ADAPT].startswith("1")
    return "OMP_NUM_THREADS" not in environ


def of_engine(options: dict, requested: int | None = None, environ: MutableMapping[str, str] = os.environ) -> int:
    """The CPU threads an engine built with ``options`` (its manifest's) runs its layers on.

    A stock engine's layers are serial (1); a tuned one uses what ``apply`` would set, without
    setting it; ``requested`` past the cores this process may use is refused.
    """
    if not options.get("openmp"):
        return 1
    return checked(requested) or _fixed_in(environ) or available()


def placement(environ: MutableMapping[str, str] | dict[str, str] = os.environ) -> dict[str, str]:
    """:data:`PLACEMENT` for a Caffe child whose fixed team fills every core this process may use,
    unless ``environ`` already says where threads run or how they wait."""
    if any(name in environ for name in USER_PLACEMENT) or adaptive(environ):
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
    """OMP_NUM_THREADS's count as written (its first level), or None where it holds none."""
    return _count(environ.get("OMP_NUM_THREADS", "").split(",")[0])


def _fixed_in(environ: MutableMapping[str, str]) -> int | None:
    """OMP_NUM_THREADS's count at most the cores this process may use, or None where it holds none."""
    value = _from_environment(environ)
    return None if value is None else min(value, available())


def _count(text: str) -> int | None:
    """``text`` as a thread count (a whole number of 1 or more, in ASCII digits), else None."""
    text = text.strip()
    if not (text.isascii() and text.isdigit()) or len(text.lstrip("0")) > MAX_DIGITS:
        return None
    return int(text) or None
