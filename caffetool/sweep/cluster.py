"""Ray for one sweep, and Ctrl-C turned into Ray Tune's orderly stop.

:func:`connected` joins the cluster a sweep names (``--address``) or starts a local Ray for the
sweep alone and shuts it down afterwards (its workers, and the Caffe each trial runs, go with it).
:func:`interruptible` replaces Tune's own SIGINT handling while the sweep runs: the first Ctrl-C
(or SIGTERM) marks the sweep interrupted on its flag actor, which every trial waits on, so each
running trial snapshots and records ``interrupted`` at once, and then sends Tune its own
"end the experiment" signal (SIGUSR1), so Tune saves its state for ``sweep.resume`` and stops the
trials; a second Ctrl-C raises KeyboardInterrupt (stop at once). It also quiets Tune's console
output and tracebacks (the sweep says one line per trial; failures are in its report).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from caffetool.errors import RunError


class Interrupt:
    """Whether the sweep was interrupted, and the flag actor to tell the trials."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.flags: Any = None

    @property
    def is_set(self) -> bool:
        return self.event.is_set()


@contextmanager
def interruptible(name: str, say: Callable[[str], None]) -> Iterator[Interrupt]:
    """Ctrl-C and SIGTERM while the sweep runs: the first marks the sweep interrupted and asks Tune
    to stop (snapshots); the second raises KeyboardInterrupt (stop at once)."""
    state = Interrupt()
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def tell() -> None:
        import ray  # noqa: PLC0415

        try:
            if state.flags is not None:
                ray.get(state.flags.interrupt.remote(), timeout=10)
        except Exception:  # noqa: BLE001 - the trials then record "stopped early": still resumable
            pass
        os.kill(os.getpid(), signal.SIGUSR1)  # Ray Tune's own "end the experiment" signal

    def first(signum: int, frame: object) -> None:
        if state.event.is_set():
            raise KeyboardInterrupt
        state.event.set()
        say(f"stopping sweep {name}: each running trial snapshots and stops (Ctrl-C again to stop at once)")
        threading.Thread(target=tell, daemon=True).start()

    # Tune's SIGINT handler is replaced by this one; its metric check would refuse the empty results
    # a trial gives while Caffe is between rows; its console output is replaced by the sweep's lines.
    environment = {"TUNE_DISABLE_SIGINT_HANDLER": "1", "TUNE_DISABLE_STRICT_METRIC_CHECKING": "1",
                   "RAY_AIR_NEW_OUTPUT": "0"}
    saved = {k: os.environ.get(k) for k in environment}
    os.environ.update(environment)
    tune_log = logging.getLogger("ray.tune")
    level = tune_log.level
    tune_log.setLevel(logging.CRITICAL)  # a failed trial's traceback: its error line is in the report
    for sig in before:
        signal.signal(sig, first)
    try:
        yield state
    finally:
        tune_log.setLevel(level)
        for sig, handler in before.items():
            signal.signal(sig, handler)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextmanager
def connected(address: str | None, say: Callable[[str], None]) -> Iterator[None]:
    """Ray for the sweep: the cluster at ``address``, or a local one shut down afterwards."""
    import ray  # noqa: PLC0415

    from caffetool.sweep.trial import NAMESPACE  # noqa: PLC0415

    if ray.is_initialized():
        yield  # a caller's own Ray (a test's cluster): used as it is, left running
        return
    options: dict[str, Any] = {"namespace": NAMESPACE, "log_to_driver": False, "configure_logging": True,
                               "logging_level": "ERROR"}
    if address:
        try:
            ray.init(address=address, **options)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise RunError(f"cannot connect to the Ray cluster at --address {address}: {e}; start one with "
                           "`ray start --head` (and `ray start --address HEAD:6379` on the other machines)") from None
    else:
        ray.init(include_dashboard=False, **options)
    try:
        resources = ray.cluster_resources()
        say(f"Ray: {int(resources.get('CPU', 0))} CPUs, {int(resources.get('GPU', 0))} GPUs on "
            f"{len([n for n in ray.nodes() if n.get('Alive')])} node(s)")
        yield
    finally:
        ray.shutdown()
