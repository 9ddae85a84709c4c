"""Running the real ``caffe`` binary on a run directory, watched line by line.

The binary runs in a process group of its own (so a Ctrl-C at the terminal reaches only this
process, which decides what Caffe gets) but in this process's session: where the kernel shares the
CPU out by session first (Linux's autogroups), a session of its own would make Caffe an equal of the
whole session it came from, so that a program the user put at nice 19 beside it took half its
cores (a LeNet training 2.6 times slower); in the session, the kernel weighs Caffe's threads against
the session's programs by their nice values, as it does any program the user starts. It runs with
the run directory as working directory; its glog output goes to
``caffe.log`` unchanged and through the log parser, which drives the progress display and the
live metrics files. A :class:`Supervisor` holds what is known of the Caffe it watches and what it
has been asked; the ways a run ends besides finishing:

* the loss turns NaN or infinite: Caffe is killed at once (it would go on for nothing);
* Ctrl-C or SIGTERM: Caffe gets SIGINT, which ``-sigint_effect snapshot`` turns into a snapshot;
  once the snapshot is in the log, SIGHUP (``-sighup_effect stop``) ends the run cleanly, so it
  can be resumed from that snapshot (a second Ctrl-C stops at once);
* another thread asks for a stop (a :class:`StopRequest`, e.g. a sweep's scheduler giving up on
  a trial): the same snapshot and stop, recorded with the status the request names
  (``stopped early``), within a fraction of a second. A scheduler that judges rows holds Caffe
  (SIGSTOP) until it has judged the newest one, so its stop lands where it decided it;
* Caffe dies (non-zero exit, glog FATAL): its FATAL line and last log lines are reported;
* ``caffe.log`` or the live metrics cannot be written (a full disk): Caffe is killed and the run
  fails, naming the file and the reason;
* this process dies without a chance to clean up (SIGKILL, the OOM killer): the kernel kills
  Caffe too (``PR_SET_PDEATHSIG``), since nothing would read its log any more. The next command
  that reads the run marks it interrupted (:mod:`caffetool.runs.ownership`).

Progress is shown by :mod:`caffetool.train.progress`; every new row also goes to the run's
TensorBoard events (:mod:`caffetool.train.runevents`) as it appears, and so do the resource
samples taken while Caffe runs; with tracking on, the rows go to MLflow too (:mod:`caffetool.track.live`).
"""

from __future__ import annotations

import contextlib
import enum
import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from caffetool import glog, proc
from caffetool.engine import EngineInfo
from caffetool.engine.locate import caffe_env
from caffetool.errors import CaffetoolError, RunError
from caffetool.proc import exit_status
from caffetool.runs import snapshots
from caffetool.runs.folder import RunFolder
from caffetool.runs.logparse import LogParser, Metrics
from caffetool.train.progress import Progress, display
from caffetool.train.runevents import RunEvents
from caffetool.train.sampler import UsageSampler

if TYPE_CHECKING:
    from caffetool.track.live import LiveRun

_NO_LOCK = contextlib.nullcontext()
STOPPED_EARLY = "Optimization stopped early."  # Caffe's Solver::Solve, when a signal ended the loop
TAIL_LINES = 12
# What sees each line's metrics; an event it returns holds Caffe until the event is set.
OnMetrics = Callable[[Metrics], "threading.Event | None"]


@dataclass
class RunOutcome:
    status: str  # finished, failed, interrupted, diverged
    exit_code: int | None
    metrics: Metrics
    message: str
    samples: dict
    seconds: float


class Phase(enum.Enum):
    """Where a watched Caffe is: from set-up to the exit this process waits for."""

    STARTING = "starting"  # building the nets; no iteration yet
    TRAINING = "training"
    SNAPSHOTTING = "snapshotting"  # asked for a snapshot (SIGINT); SIGHUP follows once it is logged
    STOPPING = "stopping"  # asked to stop (SIGHUP) or killed; only its exit is awaited


class Stop(enum.Enum):
    """Why this process ended a run early; the value is the run's status."""

    INTERRUPTED = "interrupted"
    STOPPED_EARLY = "stopped early"  # asked by another thread (a sweep's scheduler): snapshot, then stop
    DIVERGED = "diverged"
    FAILED = "failed"


class StopRequest:
    """A stop asked from another thread: the run is snapshotted and stopped like a Ctrl-C, and
    recorded with ``status`` (:attr:`Stop.STOPPED_EARLY` unless the asker says otherwise)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.status = Stop.STOPPED_EARLY

    def set(self, status: Stop = Stop.STOPPED_EARLY) -> None:
        self.status = status
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float) -> bool:
        return self._event.wait(timeout)


def caffe_train_argv(engine: EngineInfo, solver: str, gpu_flag: list[str], weights: str | None = None,
                     snapshot: str | None = None) -> list[str]:
    argv = [str(engine.caffe), "train", f"-solver={solver}", "-sigint_effect=snapshot", "-sighup_effect=stop"]
    if weights:
        argv.append(f"-weights={weights}")
    if snapshot:
        argv.append(f"-snapshot={snapshot}")
    if gpu_flag:
        argv.append(f"{gpu_flag[0]}={gpu_flag[1]}")
    return argv


@dataclass
class Supervisor:
    """What is known of a running Caffe and what it has been asked; every signal it gets is sent here."""

    process: subprocess.Popen[str]
    parser: LogParser
    phase: Phase = Phase.STARTING
    stop: Stop | None = None
    failure: str | None = None  # why this process failed the run (a file it could not write)
    snapshots_before: int = 0
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))

    @property
    def metrics(self) -> Metrics:
        return self.parser.metrics

    def feed(self, line: str) -> None:
        """One line of Caffe's output: parsed, and acted upon."""
        self.tail.append(line.rstrip())
        self.parser.feed(line)
        m = self.metrics
        if self.phase is Phase.STARTING and m.started is not None:
            self.phase = Phase.TRAINING
        if m.diverged_at is not None and self.stop is not Stop.DIVERGED:
            self._end(Stop.DIVERGED)  # nothing worth saving after a NaN
        elif self.phase is Phase.SNAPSHOTTING and len(m.snapshots) > self.snapshots_before \
                and m.snapshots[-1].endswith(snapshots.STATE):
            self.phase = Phase.STOPPING
            self._signal(signal.SIGHUP)  # the snapshot is written: now stop

    def interrupt(self, why: Stop = Stop.INTERRUPTED) -> None:
        """Ctrl-C or SIGTERM (or a :class:`StopRequest`, ``why``): the first asks for a snapshot and
        then a stop; the second stops at once."""
        if self.phase in (Phase.STARTING, Phase.TRAINING):
            self.stop, self.phase = why, Phase.SNAPSHOTTING
            self.snapshots_before = len(self.metrics.snapshots)
            self._signal(signal.SIGINT)  # Caffe snapshots at its next iteration
        elif self.phase is Phase.SNAPSHOTTING:
            self.phase = Phase.STOPPING
            self._signal(signal.SIGHUP)

    def fail(self, why: str) -> None:
        """This process cannot go on recording the run (``why`` says so): Caffe is killed."""
        if self.failure is None:
            self.failure = why
            self._end(Stop.FAILED)

    def outcome(self, code: int, samples: dict, seconds: float) -> RunOutcome:
        """How the run ended, once Caffe has exited with ``code``."""
        m = self.parser.feed_all([])  # the last row waits for a next line that will not come
        if self.stop is Stop.DIVERGED:
            good = f"; the last finite loss was at iteration {m.last_good}" if m.last_good is not None else ""
            message = (f"the loss became NaN or infinite at iteration {m.diverged_at}{good}: training was "
                       "stopped. Lower the learning rate (--base-lr) and retry.")
            return RunOutcome(Stop.DIVERGED.value, code, m, message, samples, seconds)
        if self.stop is Stop.FAILED:
            message = (f"{self.failure}; Caffe was stopped at iteration {m.iteration}. Once that is "
                       "fixed, continue with `caffetool train.resume RUN`")
            return RunOutcome(Stop.FAILED.value, code, m, message, samples, seconds)
        if self.stop is Stop.STOPPED_EARLY and code == 0 and not m.fatal \
                and not any(line.endswith(STOPPED_EARLY) for line in self.tail):
            return RunOutcome("finished", code, m, "finished", samples, seconds)  # asked after its last iteration
        if self.stop in (Stop.INTERRUPTED, Stop.STOPPED_EARLY):
            snap = next((s for s in reversed(m.snapshots) if s.endswith(snapshots.STATE)), None)
            at = snapshots.iteration_of(snap) if snap else None
            where = f"snapshot {snap}" if snap else "no snapshot"
            return RunOutcome(self.stop.value, code, m, f"{self.stop.value} at iteration "
                              f"{m.iteration if at is None else at} ({where}); continue with "
                              "`caffetool train.resume RUN`", samples, seconds)
        if code != 0 or m.fatal:
            if m.python_error and not m.fatal:
                fatal = python_layer_failure(m.python_error, code)
            else:
                fatal = f"Caffe stopped: {m.fatal}" if m.fatal else f"caffe train ended ({exit_status(code)})"
            shown = [line for line in self.tail if not glog.STACK_DUMP.match(line)][-6:]
            return RunOutcome("failed", code, m, fatal + "\nlast log lines:\n  " + "\n  ".join(shown),
                              samples, seconds)
        return RunOutcome("finished", code, m, "finished", samples, seconds)

    def pause(self) -> None:
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def _end(self, stop: Stop) -> None:
        self.stop, self.phase = stop, Phase.STOPPING
        self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, sig)


# What libcaffe prints when a Python layer raised and Caffe did not print the exception (one raised
# in the layer's ``setup``, ``reshape``, ``forward`` or ``backward``, unlike a failed import).
PYTHON_ABORT = "boost::python::error_already_set"


def python_layer_failure(error: str, code: int) -> str:
    """A failed run's message for an exception ``error`` a Python layer raised."""
    return (f"a Python layer raised {error} (Caffe aborted: {exit_status(code)}); put the layer's module on "
            "PYTHONPATH, or correct its python_param")


def run(argv: list[str], run_dir: Path, max_iter: int, progress: bool = True,
        on_update: Callable[[Metrics], None] | None = None, update_every: float = 60.0,
        parser: LogParser | None = None, events: RunEvents | None = None,
        on_metrics: OnMetrics | None = None, stop: StopRequest | None = None,
        tracker: LiveRun | None = None) -> RunOutcome:
    """Run ``argv`` in ``run_dir``, appending to caffe.log; ``on_update(metrics)`` refreshes live outputs,
    ``events`` gets each new row and resource sample as it comes, and ``tracker`` each new row (it
    never fails the run).

    ``on_metrics(metrics)`` sees the metrics after every line of Caffe's output, unthrottled (a
    sweep reports each new row to its scheduler from there). When it returns an event, Caffe is
    paused until the event is set or ``stop`` is asked: a scheduler judges a row before Caffe
    trains past it, however fast Caffe is and however slow the scheduler. ``stop``, once set,
    snapshots and stops Caffe as :class:`StopRequest` says.

    Caffe is never left running when this returns or raises. The final outputs are the caller's
    to write, after it has recorded the outcome; so is closing ``events`` and ending ``tracker``.
    """
    start = time.monotonic()
    try:
        process = subprocess.Popen(argv, cwd=run_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   errors="replace", env=caffe_env(Path(argv[0]).parents[1]), process_group=0,
                                   stdin=subprocess.DEVNULL,
                                   preexec_fn=dies_with_parent())
    except OSError as e:
        raise RunError(f"could not start {argv[0]}: {e.strerror}") from None
    supervisor = Supervisor(process, parser or LogParser())
    lock = threading.Lock()  # the supervisor is fed by this thread and, with ``stop``, asked by another
    sampler = UsageSampler(process.pid, on_sample=events.sample if events else None)
    sampler.start()
    if stop is not None:  # after the sampler: this thread's poll reaps a Caffe that has ended
        threading.Thread(target=_stop_when_asked, args=(supervisor, stop, lock), daemon=True).start()
    shown = display(max_iter, supervisor.metrics.iteration) if progress else None
    refresh = _Every(update_every, on_update)
    try:
        with _Log(RunFolder(run_dir).log, supervisor.fail) as log:
            _watch(supervisor, log, shown, refresh, events, on_metrics, lock, stop, tracker)
            code = _wait(supervisor)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        samples = sampler.stop()
        if shown is not None:
            shown.close()
    return supervisor.outcome(code, samples, time.monotonic() - start)


def _watch(supervisor: Supervisor, log: _Log, shown: Progress | None, refresh: _Every,
           events: RunEvents | None, on_metrics: OnMetrics | None = None,
           lock: threading.Lock | None = None, stop: StopRequest | None = None,
           tracker: LiveRun | None = None) -> None:
    """Read Caffe's output to its end, logging, showing and acting on each line."""
    stream = supervisor.process.stdout
    assert stream is not None
    while True:
        try:
            line = stream.readline()
            if not line:
                return
            with lock or _NO_LOCK:
                supervisor.feed(line)
            log.write(line)
            if shown is not None:
                shown.show(supervisor.metrics)
            if supervisor.failure is None:
                refresh.maybe(supervisor.metrics, supervisor.fail)
            if supervisor.failure is None and events is not None:
                try:
                    events.update(supervisor.metrics)
                except CaffetoolError as e:
                    supervisor.fail(str(e))
            if tracker is not None:
                tracker.update(supervisor.metrics)
            if on_metrics is not None:
                until = on_metrics(supervisor.metrics)
                if until is not None:
                    _paused(supervisor, until, stop, lock or _NO_LOCK)
        except KeyboardInterrupt:
            supervisor.interrupt()


def _paused(supervisor: Supervisor, until: threading.Event, stop: StopRequest | None,
            lock: threading.Lock | contextlib.AbstractContextManager) -> None:
    """Caffe stopped (SIGSTOP) until ``until`` is set; a stop asked meanwhile is sent before
    Caffe goes on, so it snapshots at the iteration it was paused at."""
    supervisor.pause()
    try:
        while not until.wait(0.05):
            if supervisor.process.poll() is not None:
                return
            if stop is not None and stop.is_set():
                with lock:
                    if supervisor.stop is None and not supervisor.metrics.done:
                        supervisor.interrupt(stop.status)
                return
    finally:
        supervisor.resume()


def _stop_when_asked(supervisor: Supervisor, stop: StopRequest, lock: threading.Lock) -> None:
    """Another thread's stop, acted upon as soon as it is asked (Caffe may log nothing for a while)."""
    while supervisor.process.poll() is None:
        if stop.wait(0.2):
            with lock:
                if supervisor.stop is None and not supervisor.metrics.done:
                    supervisor.interrupt(stop.status)
            return


def _wait(supervisor: Supervisor) -> int:
    while True:
        try:
            return supervisor.process.wait()
        except KeyboardInterrupt:
            supervisor.interrupt()


def dies_with_parent() -> Callable[[], None]:
    """A ``preexec_fn`` that has the kernel SIGKILL the child when this process dies.

    ``prctl`` is looked up before the fork, so the child only makes the call. A parent that died
    between the fork and the call would never send the signal: the child then ends itself.
    The child also starts with no signal blocked: a signal mask survives ``exec``, and a thread
    that blocks SIGINT (a Ray worker's do) would otherwise start a Caffe that never sees its SIGINT.
    """
    die = proc.parent_death_signal(signal.SIGKILL)
    parent = os.getpid()

    def arm() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        die()
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return arm


class _Log:
    """caffe.log, appended line by line (so it is whole whenever this process dies); the first
    failed write goes to ``failed`` and ends the logging."""

    def __init__(self, path: Path, failed: Callable[[str], None]) -> None:
        self.path = path
        self.failed = failed
        self.file: IO[str] | None = None

    def __enter__(self) -> _Log:
        try:
            self.file = open(self.path, "a", buffering=1)
        except OSError as e:
            self.failed(f"cannot write {self.path}: {e.strerror}")
        return self

    def write(self, line: str) -> None:
        if self.file is None:
            return
        try:
            self.file.write(line)
        except OSError as e:
            self.failed(f"cannot write {self.path}: {e.strerror}")
            self.__exit__()

    def __exit__(self, *exc: object) -> None:
        file, self.file = self.file, None
        if file is not None:
            try:
                file.close()
            except OSError:
                pass  # the write that failed already said why


class _Every:
    """Calls ``on_update`` after each new test result, at most once per ``seconds``."""

    def __init__(self, seconds: float, on_update: Callable[[Metrics], None] | None) -> None:
        self.seconds = seconds
        self.on_update = on_update
        self.tests = 0
        self.last = time.monotonic()

    def maybe(self, m: Metrics, failed: Callable[[str], None]) -> None:
        tests = sum(len(rows) for rows in m.test.values())
        now = time.monotonic()
        if self.on_update is None or tests == self.tests or now - self.last < self.seconds:
            return
        self.tests, self.last = tests, now
        try:
            self.on_update(m)
        except CaffetoolError as e:
            failed(str(e))
