"""Ray for one sweep, and Ctrl-C turned into Ray Tune's orderly stop.

:func:`connected` joins the cluster a sweep names (``--address``) or starts a local Ray for the
sweep alone and shuts it down afterwards (its workers, and the Caffe each trial runs, go with it;
:mod:`caffetool.sweep.reaper` makes sure of that however the sweep ends).
:func:`interruptible` replaces Tune's own SIGINT handling while the sweep runs: the first Ctrl-C
(or SIGTERM) marks the sweep interrupted on its flag actor, which every trial waits on, so each
running trial snapshots and records ``interrupted`` at once, and then sends Tune its own
"end the experiment" signal (SIGUSR1), so Tune saves its state for ``sweep.resume`` and stops the
trials; a second Ctrl-C raises KeyboardInterrupt (stop at once). A local Ray whose daemons die
under the sweep (a SIGTERM sent to the sweep's whole process group reaches them too) ends the sweep
at once, recorded interrupted, since nothing can stop in order then. It also quiets Tune's console
output and tracebacks (the sweep says one line per trial; failures are in its report).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from caffetool.errors import RunError

CONNECT_TIMEOUT = 5.0  # seconds to reach a --address before it is called unreachable
TELL_TIMEOUT = 5.0  # seconds the trials' flag actor has to take the interruption
WATCH_INTERVAL = 0.2  # seconds between looks at the local Ray's daemons while the sweep stops
DAEMONS = ("gcs_server", "raylet")  # a local Ray without either cannot stop anything in order
RAYLET_STOPPING = "received SIGTERM"  # the raylet's log line as it starts to drain (Ray's agents read it too)


class LocalRay:
    """The Ray that :func:`connected` started for the sweep: its processes and their reaper."""

    def __init__(self, before: set[int]) -> None:
        import psutil  # noqa: PLC0415

        from caffetool.sweep import reaper  # noqa: PLC0415

        self.roots = [p for p in psutil.Process().children() if p.pid not in before]
        self.daemons = [p for p in self.roots if p.name() in DAEMONS]
        self.reaper = reaper.start([p.pid for p in self.roots])
        self.raylet_log = _raylet_log()

    def broken(self) -> bool:
        """Whether a daemon of this Ray has died, or the raylet was told to stop (it drains for about
        ten seconds before it dies): the sweep can neither go on nor stop in order."""
        import psutil  # noqa: PLC0415

        try:
            if not all(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in self.daemons):
                return True
        except psutil.Error:
            return True
        return self.raylet_log is not None and RAYLET_STOPPING in _tail(self.raylet_log)

    def close(self) -> None:
        from caffetool.sweep import reaper  # noqa: PLC0415

        reaper.finish(self.reaper)


class Interrupt:
    """Whether the sweep was interrupted, and the flag actor to tell the trials."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.flags: Any = None

    @property
    def is_set(self) -> bool:
        return self.event.is_set()


@contextmanager
def interruptible(name: str, say: Callable[[str], None], local: LocalRay | None = None,
                  lost: Callable[[], None] = lambda: None) -> Iterator[Interrupt]:
    """Ctrl-C and SIGTERM while the sweep runs: the first marks the sweep interrupted and asks Tune
    to stop (snapshots); the second raises KeyboardInterrupt (stop at once). The ``local`` Ray is
    watched all the while: if its daemons die, :func:`_abandon` records the sweep (``lost``) and ends it."""
    state = Interrupt()
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def tell() -> None:
        import ray  # noqa: PLC0415

        try:
            if state.flags is not None:
                ray.get(state.flags.interrupt.remote(), timeout=TELL_TIMEOUT)
        except Exception:  # noqa: BLE001 - the trials then record "stopped early": still resumable
            pass
        os.kill(os.getpid(), signal.SIGUSR1)  # Ray Tune's own "end the experiment" signal

    over = threading.Event()  # the sweep is past Tune: Ray's own shutdown is no death to watch for

    def watch(ray: LocalRay) -> None:
        while not over.wait(WATCH_INTERVAL):
            if ray.broken():
                _abandon(name, ray, lost)

    def first(signum: int, frame: object) -> None:
        if state.event.is_set():
            raise KeyboardInterrupt
        state.event.set()
        say(f"stopping sweep {name}: each running trial snapshots and stops (Ctrl-C again to stop at once)")
        threading.Thread(target=tell, daemon=True).start()

    # Tune's SIGINT handler is replaced by this one; its metric check would refuse the empty results
    # a trial gives while Caffe is between rows; its console output is replaced by the sweep's lines.
    # Tune's own per-trial records (CSV, JSON, TensorBoard files under tune/) are off: each trial's run
    # records itself, and a second set of event files would show each trial twice in TensorBoard.
    environment = {"TUNE_DISABLE_SIGINT_HANDLER": "1", "TUNE_DISABLE_STRICT_METRIC_CHECKING": "1",
                   "RAY_AIR_NEW_OUTPUT": "0", "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1"}
    saved = {k: os.environ.get(k) for k in environment}
    os.environ.update(environment)
    tune_log = logging.getLogger("ray.tune")
    level = tune_log.level
    tune_log.setLevel(logging.CRITICAL)  # a failed trial's traceback: its error line is in the report
    for sig in before:
        signal.signal(sig, first)
    watcher = threading.Thread(target=watch, args=(local,), daemon=True) if local is not None else None
    if watcher is not None:
        watcher.start()
    try:
        yield state
    finally:
        over.set()
        if watcher is not None:
            watcher.join(timeout=WATCH_INTERVAL * 5)
        tune_log.setLevel(level)
        for sig, handler in before.items():
            signal.signal(sig, handler)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _raylet_log() -> Path | None:
    """The local raylet's log (``raylet.out`` in the session's logs), where it says it got SIGTERM."""
    try:
        import ray  # noqa: PLC0415

        return Path(ray._private.worker._global_node.get_logs_dir_path()) / "raylet.out"
    except (AttributeError, TypeError):  # another Ray's layout: the daemons' death is still seen
        return None


def _tail(path: Path, size: int = 16384) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - size))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _abandon(name: str, local: LocalRay, lost: Callable[[], None]) -> None:
    """Ray's daemons died under the sweep (a signal to its whole process group, a crash): nothing can
    stop in order, and the main thread may sit inside a Ray call for a minute (until Ray's own GCS
    timeout ends the process), so this thread records the sweep, has the reaper end what Ray left
    (workers, Caffe) and exits at once. Each run keeps its last snapshot for ``sweep.resume``."""
    try:
        lost()
    finally:
        local.close()
        sys.stdout.flush()
        sys.stderr.write(f"Error: interrupted; Ray stopped under sweep {name}, so its trials stopped where they were: "
                         f"`caffetool sweep.resume {name}` continues them\n")
        sys.stderr.flush()
        os._exit(130)


@contextmanager
def connected(address: str | None, say: Callable[[str], None]) -> Iterator[LocalRay | None]:
    """Ray for the sweep: the cluster at ``address``, or a local one (yielded) shut down afterwards."""
    import psutil  # noqa: PLC0415
    import ray  # noqa: PLC0415

    from caffetool.sweep.trial import NAMESPACE  # noqa: PLC0415

    if ray.is_initialized():
        yield None  # a caller's own Ray (a test's cluster): used as it is, left running
        return
    options: dict[str, Any] = {"namespace": NAMESPACE, "log_to_driver": False, "configure_logging": True,
                               "logging_level": "ERROR"}
    local = None
    if address:
        _reachable(address)
        try:
            ray.init(address=address, **options)
        except (ConnectionError, RuntimeError, ValueError) as e:
            if address == "auto":
                raise RunError("--address auto: no Ray runs on this machine; start one with `caffetool ray.start` "
                               "(or leave out --address: the sweep then starts a Ray of its own)") from None
            raise RunError(f"cannot connect to the Ray cluster at --address {address}: {e}; start one with "
                           "`ray start --head` (and `ray start --address HEAD:6379` on the other machines)") from None
    else:
        before = {p.pid for p in psutil.Process().children()}
        # "local": a new Ray, where no address would attach to the one ``ray_current_cluster`` names
        # (a Ray of `caffetool ray.start`, or another sweep's cluster) and treat it as the sweep's own.
        ray.init(address="local", include_dashboard=False, **options)
        local = LocalRay(before)
    try:
        resources = ray.cluster_resources()
        where = f"the Ray at {ray.get_runtime_context().gcs_address} (left running)" if address else "a Ray of its own"
        say(f"Ray: {int(resources.get('CPU', 0))} CPUs, {int(resources.get('GPU', 0))} GPUs on "
            f"{len([n for n in ray.nodes() if n.get('Alive')])} node(s), {where}")
        yield local
    finally:
        ray.shutdown()
        if local is not None:
            local.close()


def _reachable(address: str) -> None:
    """Refuse at once a ``HOST:PORT`` nothing answers on (Ray itself would retry for a minute,
    printing each retry), and ``auto`` where Ray's address file names one; ``ray://`` addresses are
    left to Ray."""
    if address == "auto":
        from caffetool.sweep import resident  # noqa: PLC0415 - Ray's helpers only when attaching

        if (found := resident.stale()) is not None:
            raise RunError(f"--address auto: Ray's address file {found[0]} names {found[1]}, where no Ray answers "
                           "(one that was killed, or a reboot); start one with `caffetool ray.start` (which "
                           "replaces the file), or leave out --address: the sweep then starts a Ray of its own")
        return
    host, _, port = address.rpartition(":")
    if "://" in address or not host or not port.isdigit():
        return
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT):
            pass
    except OSError as e:
        raise RunError(f"cannot reach the Ray cluster at --address {address} ({e.strerror or e}); start one with "
                       "`ray start --head` (and `ray start --address HEAD:6379` on the other machines)") from None


def check_fits(cpus: float, gpus: float) -> None:
    """Refuse a trial that no node of the connected cluster can hold (Tune would keep it pending
    for ever): a trial's CPUs and GPUs are one node's."""
    import ray  # noqa: PLC0415

    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    most_cpus = max((r.get("CPU", 0) for r in nodes), default=0)
    most_gpus = max((r.get("GPU", 0) for r in nodes), default=0)
    if cpus > most_cpus:
        raise RunError(f"--cpus-per-trial {cpus:g} is more than any node of the Ray cluster has (at most "
                       f"{most_cpus:g} CPUs); a trial runs on one node: give {most_cpus:g} or fewer")
    if gpus > most_gpus:
        raise RunError(f"--gpus-per-trial {gpus:g} is more than any node of the Ray cluster has (at most "
                       f"{most_gpus:g} GPUs)")
