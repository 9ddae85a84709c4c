"""One trial of a sweep: an ordinary caffetool run, trained inside a Ray Tune trainable.

Each trial is :func:`caffetool.train.session.train` (or ``resume``) on a thread of its Ray actor,
in ``runs/<sweep>/trial-NNNNN/`` with the run's whole record; its manifest also holds ``sweep``:
the sweep, the trial, its parameters, the Ray node and host it ran on and the GPUs Ray gave it.
Every new row of the metric's net, as the log parser sees it, is one result for Tune (``iterations``
is Caffe's iteration, the scheduler's time), so ASHA decides on exactly what the run records.

Tune stops a trial by calling :meth:`CaffeTrial.cleanup`, or hands its actor to the next trial with
:meth:`CaffeTrial.reset_config` (actors are reused: no new worker and no imports per trial); either
way a run still training gets a :class:`~caffetool.train.runner.StopRequest`, Caffe snapshots and
stops, and the run is recorded ``stopped early``. When the sweep is interrupted (Ctrl-C), each trial
learns it at once from the sweep's flag actor (:class:`SweepFlags`, waited on without polling),
stops its run the same way and records it ``interrupted``, without a final result, so Tune keeps
the trial unfinished; a trial that Tune restarts (``sweep.resume``) continues its run from that
snapshot.

A scheduler that stops trials judges each row while Caffe is held (SIGSTOP, see
:func:`caffetool.train.runner.run`): the row is handed to Tune, and Caffe goes on only when Tune
calls :meth:`~CaffeTrial.step` again (the verdict was to continue) or stops the trial. Without the
hold a short trial can finish before its verdict arrives, and ASHA would stop nothing.

Limits: the class API calls ``step`` and ``stop`` on one thread, so ``step`` returns at least every
:data:`STEP_WAIT` seconds (a result without the metric, which the scheduler ignores) to let a stop
through while Caffe is between rows. A trial that crashes raises from ``step``: Tune marks it failed
and the sweep goes on.
"""

from __future__ import annotations

import asyncio
import fcntl
import math
import os
import queue
import socket
import threading
import time
import traceback
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Iterator

import ray
from ray import tune

from caffetool.data import lookup
from caffetool.engine import cpu_threads, locate
from caffetool.errors import CaffetoolError, RunError
from caffetool.runs import rundir
from caffetool.runs.folder import RunFolder
from caffetool.runs.logparse import Metrics
from caffetool.sweep import searchspace, sweeprecord
from caffetool.track import TrackingTarget
from caffetool.train import session
from caffetool.train.runner import Stop, StopRequest

STEP_WAIT = 5.0  # seconds a step waits for a new row before returning an empty result
STOP_WAIT = 120.0  # seconds cleanup waits for Caffe's snapshot and the run's record
NAMESPACE = "caffetool"
ITERATIONS = "iterations"  # the scheduler's time: Caffe's iteration of the row


@dataclass
class TrialSpec:
    """What every trial of a sweep shares (plain data: it travels to each trial's node)."""

    sweep: str
    sweep_dir: str  # absolute: runs/<sweep>
    metric: str
    fixed: dict[str, Any]
    model: str = "lenet"
    dataset: str = "fashion-mnist"
    data_dir: str | None = None
    models_dir: str | None = None
    solver: str | None = None  # absolute; its own paths resolve against ``cwd``
    cwd: str = ""
    engine_prefix: str | None = None
    cpus: float = 1
    gpus: float = 0
    flags: str = ""  # the name of this session's SweepFlags actor
    judged: bool = False  # the scheduler may stop a trial at any row (ASHA): Caffe waits for each verdict
    tracking: dict[str, Any] | None = None  # a TrackingTarget's fields (caffetool.sweep.tracked); None: untracked


@ray.remote(num_cpus=0)
class SweepFlags:
    """The sweep's state that its trials read: whether the sweep as a whole is being interrupted.

    An async actor, so that every trial can wait on :meth:`wait` at once.
    """

    def __init__(self) -> None:
        self.interrupted = asyncio.Event()

    async def interrupt(self) -> bool:
        self.interrupted.set()
        return True

    async def is_interrupted(self) -> bool:
        return self.interrupted.is_set()

    async def wait(self) -> bool:
        await self.interrupted.wait()
        return True


def flags_name(sweep: str) -> str:
    """A new name for a sweep session's flag actor (a resumed sweep must not find an old one)."""
    return f"caffetool-sweep-{sweep}-{uuid.uuid4().hex[:12]}"


NAMED: dict[str, dict[str, str]] = {}  # sweep folder: {Tune's trial id: the trial's name}


class TrialNames:
    """Each trial's name, its run's folder: ``trial-00000``, ``trial-00001``, ... in the order Tune
    creates the trials, which is the order a search algorithm proposed them (Tune's own ids are
    random with one). Numbering goes on after the trials a sweep already has, so a resumed sweep
    adds to them; Tune keeps the names of the trials it restores. Tune copies its configuration,
    and with it this object, so the names live in :data:`NAMED`, which every copy shares."""

    PREFIX = "trial-"

    def __init__(self, sweep_dir: Path) -> None:
        self.sweep_dir = sweep_dir

    def __call__(self, trial: Any) -> str:
        names = NAMED.setdefault(str(self.sweep_dir), {})
        if trial.trial_id not in names:
            number = max(self._taken(), default=-1) + 1 if not names else \
                max(int(n[len(self.PREFIX):]) for n in names.values()) + 1
            names[trial.trial_id] = f"{self.PREFIX}{number:05d}"
        return names[trial.trial_id]

    def _taken(self) -> Iterator[int]:
        for folder in (self.sweep_dir, self.sweep_dir / sweeprecord.TUNE_DIR):
            for path in folder.glob(f"{self.PREFIX}*") if folder.is_dir() else ():
                number = path.name[len(self.PREFIX):]
                if number.isdigit():
                    yield int(number)


def _where(error: BaseException) -> str:
    """The innermost place an unexpected error came from (``file.py:LINE in function``): the trial's
    record keeps the message only, and a thread's traceback is not seen by the user."""
    frames = traceback.extract_tb(error.__traceback__)
    return f"{Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name}" if frames else "no traceback"


class CaffeTrial(tune.Trainable):
    """A Tune trainable whose work is one caffetool run (see the module's docstring)."""

    def setup(self, config: dict[str, Any], spec: dict[str, Any] | None = None) -> None:
        self.spec = TrialSpec(**(spec or {}))
        self.metric = searchspace.parse_metric(self.spec.metric)
        for name in cpu_threads.VARIABLES:
            os.environ[name] = str(max(1, int(self.spec.cpus)))
        self._start(config)

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        """The actor, kept by Tune, takes the next trial (no new worker, no imports again); the
        trial it held, if the scheduler stopped it, is stopped first."""
        self._end()
        self._start(new_config)
        return True

    def step(self) -> dict[str, Any]:
        if self.handed >= self.held_until:
            self.verdict.set()  # Tune asks for more: it let the held row through
        try:
            item = self.results.get(timeout=STEP_WAIT)
        except queue.Empty:
            if not self.thread.is_alive():
                time.sleep(0.2)  # an interrupted trial waits for Tune's stop without spinning
            return {}
        self.handed += 1
        if isinstance(item, BaseException):
            raise item
        return item

    def save_checkpoint(self, checkpoint_dir: str) -> dict[str, Any]:
        """Tune's checkpoint of a trial: its run, whose snapshots are the real checkpoints."""
        return {"run_dir": str(self.run_dir)}

    def load_checkpoint(self, checkpoint: dict[str, Any] | None) -> None:
        """Nothing to load: a restarted trial finds its run directory and resumes it (see ``_run``)."""

    def cleanup(self) -> None:
        self._end()

    def _start(self, config: dict[str, Any]) -> None:
        self.params = dict(config)
        self.results: queue.Queue[dict | BaseException] = queue.Queue()
        self.stop_request = StopRequest()
        self.reported = 0  # rows of the metric's net already sent
        self.sent = self.handed = 0  # results put on the queue, and returned by step()
        self.verdict = threading.Event()  # set: Caffe, held at a row, may go on
        self.verdict.set()
        self.held_until = 0  # the result whose verdict the hold awaits
        self.last: dict[str, Any] = {}
        self.run_dir = Path(self.spec.sweep_dir) / self.trial_name  # TrialNames made it
        self.thread = threading.Thread(target=self._train, name=f"caffe {self.run_dir.name}", daemon=True)
        self.thread.start()
        threading.Thread(target=_on_interrupt, args=(self.spec.flags, self.stop_request), daemon=True).start()

    def _end(self) -> None:
        """Stop the trial's run if it still trains (snapshot, then stop) and wait for its record."""
        if self.thread.is_alive():
            self.stop_request.set(Stop.INTERRUPTED if _sweep_interrupted(self.spec.flags) else Stop.STOPPED_EARLY)
            self.verdict.set()
            self.thread.join(STOP_WAIT)

    # -- the training thread --------------------------------------------------------------------

    def _train(self) -> None:
        try:
            result = self._run()
            self._rows(result.outcome.metrics)  # the final test (caffe test) is not in the log
            self._put(self._final(result))
        except BaseException as e:  # noqa: BLE001 - every failure goes to Tune through step()
            self._put(e if isinstance(e, CaffetoolError) else RunError(f"{type(e).__name__}: {e} ({_where(e)})"))

    def _run(self) -> session.TrainResult:
        node = _node()
        try:
            if self.spec.cwd:
                os.chdir(self.spec.cwd)
            engine = locate(self.spec.engine_prefix, probe=False, gpus=self.spec.gpus > 0)
            engine.gpus = _own_gpus(engine.gpus)
            if RunFolder(self.run_dir).manifest.is_file():
                try:
                    return session.resume(engine, self.run_dir, progress=False, say=_quiet, on_metrics=self._rows,
                                          stop=self.stop_request, record=self._record(node), tracking=self._tracking())
                except session.NothingToResume:
                    rundir.release(self.run_dir)  # stopped before its first snapshot: the trial starts again
            if self.spec.solver is None:
                with _node_lock(Path(self.spec.data_dir or "data")):  # one fetch per node at a time
                    lookup.find(self.spec.dataset, self.spec.data_dir, fetch_missing=True, say=_quiet,
                                progress=False)
            request = self._request(engine, node)
            return session.train(engine, request, say=_quiet, progress=False)
        except FileNotFoundError as e:
            raise RunError(f"on node {node['host']} ({node['ip']}): {e}") from None
        except CaffetoolError as e:
            raise type(e)(f"on node {node['host']} ({node['ip']}): {e}") from None

    def _request(self, engine: Any, node: dict[str, Any]) -> session.TrainRequest:
        batch, test_batch = searchspace.batches(self.spec.fixed, self.params)
        options = searchspace.options(self.spec.fixed, self.params)
        return session.TrainRequest(
            model=self.spec.model, dataset=self.spec.dataset, options=options,
            gpu="all" if self.spec.gpus > 0 and engine.gpus else "cpu", name=self.run_dir.name,
            batch=batch, test_batch=test_batch, data_dir=self.spec.data_dir, runs_dir=self.spec.sweep_dir,
            models_dir=self.spec.models_dir, solver=self.spec.solver, type_given="type" in self.params
            or bool(self.spec.fixed.get("type")), on_metrics=self._rows, stop=self.stop_request,
            record=self._record(node), tracking=self._tracking())

    def _tracking(self) -> TrackingTarget | None:
        """Where the trial's run is tracked: the sweep's store, tagged with the sweep and the trial."""
        if self.spec.tracking is None:
            return None
        target = TrackingTarget(**self.spec.tracking)
        return replace(target, tags={**target.tags, "caffetool.trial": self.run_dir.name})

    def _record(self, node: dict[str, Any]) -> dict[str, Any]:
        """The manifest's ``sweep``: which sweep and trial, its parameters, and where it (last) ran."""
        return {"sweep": {"name": self.spec.sweep, "trial": self.run_dir.name, "trial_id": self.trial_id,
                          "params": self.params, **node, "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
                          "cpus": self.spec.cpus, "gpus": self.spec.gpus}}

    def _rows(self, m: Metrics) -> threading.Event | None:
        """Each new row of the metric's net, as one result; a net without the metric is an error.
        With a judging scheduler, the event that holds Caffe until the newest row is judged."""
        rows = m.train if self.metric.net < 0 else m.test.get(self.metric.net, [])
        new = rows[self.reported:]
        if self.spec.judged and new:
            self.verdict = threading.Event()  # before the rows go: step() may take them at once
            self.held_until = self.sent + len(new)
        for row in new:
            if self.metric.output not in row:
                have = ", ".join(k for k in row if k not in ("NumIters", "Seconds", "LearningRate")) or "none"
                where = "the train net" if self.metric.net < 0 else f"test net #{self.metric.net}"
                self.stop_request.set(Stop.STOPPED_EARLY)
                raise_later = RunError(f"--metric {self.metric.name}: {where} has no output "
                                       f"{self.metric.output!r} (its outputs: {have})")
                self._put(raise_later)
                self.reported = len(rows)
                self.verdict.set()
                return None
            self.last = {ITERATIONS: int(row["NumIters"]), self.metric.name: float(row[self.metric.output]),
                         "seconds": row.get("Seconds")}
            self._put(dict(self.last))
        self.reported = len(rows)
        return self.verdict if self.spec.judged and new else None

    def _put(self, item: dict[str, Any] | BaseException) -> None:
        self.sent += 1
        self.results.put(item)

    def _final(self, result: session.TrainResult) -> dict[str, Any]:
        m = result.manifest
        status = result.outcome.status
        if status == "failed":
            raise RunError(f"{result.run_dir.name} failed: {result.outcome.message}")
        if status == "interrupted":
            return {}  # not done: Tune keeps the trial unfinished, and `sweep.resume` continues it
        final = dict(self.last) or {ITERATIONS: int(m.iterations or 0), self.metric.name: math.nan}
        return {**final, "status": status, "run_dir": str(result.run_dir), "run_iterations": m.iterations,
                "done": True}


def _on_interrupt(flags_actor: str, stop: StopRequest) -> None:
    """Wait (without polling) for the sweep to be interrupted; then stop this trial's run at once,
    rather than when Tune gets round to stopping the trial."""
    try:
        flags = ray.get_actor(flags_actor, namespace=NAMESPACE)
        ray.get(flags.wait.remote())
    except Exception:  # noqa: BLE001 - no flags actor, or the sweep ended: nothing to do
        return
    if not stop.is_set():
        stop.set(Stop.INTERRUPTED)


def _sweep_interrupted(flags_actor: str) -> bool:
    """Whether the driver has marked the sweep interrupted (a stop without it is the scheduler's)."""
    try:
        flags = ray.get_actor(flags_actor, namespace=NAMESPACE)
        return bool(ray.get(flags.is_interrupted.remote(), timeout=10))
    except Exception:  # noqa: BLE001 - no flags actor (or no answer): the scheduler stopped it
        return False


def _node() -> dict[str, Any]:
    context = ray.get_runtime_context()
    return {"host": socket.gethostname(), "node_id": context.get_node_id(), "ip": ray.util.get_node_ip_address()}


def _own_gpus(listed: list[str]) -> list[str]:
    """The GPUs Ray gave this trial, among those ``nvidia-smi`` lists (it ignores CUDA_VISIBLE_DEVICES)."""
    ids = [str(g) for g in ray.get_gpu_ids()]
    if not ids:
        return []
    by_index = {line.split(":", 1)[0].replace("GPU", "").strip(): line for line in listed}
    return [by_index.get(i, f"GPU {i}") for i in ids]


def _quiet(message: str) -> None:
    """A trial's own notices stay in its run's record; the sweep prints one line per trial."""


@contextmanager
def _node_lock(folder: Path) -> Iterator[None]:
    """One trial at a time in ``folder`` on this node: an ``flock`` on the folder itself, which
    leaves no lock file behind in the user's data folder."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def spec_dict(spec: TrialSpec) -> dict[str, Any]:
    return asdict(spec)
