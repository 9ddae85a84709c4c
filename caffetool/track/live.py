"""A training logged to MLflow while Caffe trains, off the path of the training itself.

:class:`LiveRun` is fed like the run's TensorBoard events (:mod:`caffetool.train.runevents`): the
runner hands it the metrics after every line of Caffe's output, and it takes the new rows
(:class:`caffetool.runs.scalars.NewRows`), which costs a comparison of two counts when there are
none. Everything else happens on one background thread, started as Caffe starts: importing MLflow
and opening a SQLite store (about 2.5 s of CPU, once per process), making the run
(or, for a resumed training, finding the one it was logged to), its params and tags
(:mod:`caffetool.track.mapping`), then the rows, sent in one ``log_batch`` every
:data:`SEND_EVERY` seconds (each call costs the SQLite store about 8 ms of CPU, whatever it holds).
The run's manifest records where it is tracked (``tracking``: uri, run_id, experiment_id) as soon as
the run exists. A resumed training goes on in its MLflow run, sending the earlier rows the run lacks
(those of a session killed before it could send them); MLflow never changes a param, so a value the
resume changed (``max_iter``) is the tag ``resumed.<param>``. At the end the last rows, the final
figures, the status and the artifacts are sent, and the training waits for that at most
:data:`END_WAIT` seconds.

Limits: that first 2.5 s of CPU is taken from Caffe on a machine whose cores Caffe keeps busy. The
thread runs at the lowest priority of its process; Caffe runs in the same session
(:mod:`caffetool.train.runner`), so even where the kernel shares the CPU out by session first
(Linux's autogroups) the thread gives way to Caffe's.

A failure of the store (unreachable, read-only, locked past the retries, a bad URI) turns tracking
off for the run: the training goes on and is recorded as usual, and the problem is said once, in
one line, when the run ends (not while the progress bar is drawn).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import queue
import shlex
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from caffetool.errors import CaffetoolError
from caffetool.runs import runrecord
from caffetool.runs.logparse import Metrics
from caffetool.runs.scalars import NewRows, Scalar, all_of
from caffetool.track import mapping
from caffetool.track.store import Point, Store, forget, opened, prepare, reason
from caffetool.track.target import DEFAULT_EXPERIMENT, TrackingTarget, shown

SEND_EVERY = 5.0
END_WAIT = 60.0
DISCARD_WAIT = 10.0
LOWEST_PRIORITY = 19
_END, _DISCARD = "end", "discard"


def epoch_ms(stamp: str | None) -> int | None:
    """A manifest's timestamp (``started_at``) in milliseconds since the epoch."""
    try:
        return int(dt.datetime.fromisoformat(stamp).timestamp() * 1000) if stamp else None
    except ValueError:
        return None


def record_of(target: TrackingTarget, run_id: str, experiment_id: str) -> dict[str, Any]:
    """The manifest's ``tracking``: where the run is logged."""
    entry = {"uri": target.uri, "run_id": run_id, "experiment_id": experiment_id}
    if target.parent_run_id:
        entry["parent_run_id"] = target.parent_run_id
    return entry


def problem_line(target: TrackingTarget, run_dir: Path, why: str, begun: bool = False) -> str:
    """The one line that says a run is not (fully) tracked, and what to do (``begun``: its MLflow run
    exists, partly logged)."""
    return (f"warning: {run_dir.name} is not {'fully ' if begun else ''}tracked in MLflow ({why}); the run itself is "
            f"recorded as usual. Fix the store (or give --tracking-uri off), then log the run with `caffetool "
            f"track.import {shlex.quote(str(run_dir))} --tracking-uri {shlex.quote(shown(target.uri))}"
            f"{' --experiment ' + shlex.quote(target.experiment) if target.experiment != DEFAULT_EXPERIMENT else ''}"
            f"{' --force' if begun else ''}`")


class LiveRun:
    """One session of a run (a training, or a resume of it), logged to MLflow as it goes."""

    def __init__(self, target: TrackingTarget, run_dir: Path, metrics: Metrics, caffe_pb2: ModuleType,
                 say: Callable[[str], None], continue_run: str | None = None) -> None:
        """``metrics``: what the run has logged before this session (a resumed run's rows), sent only
        if the MLflow run is new or lacks them; ``continue_run``: the MLflow run an earlier session
        logged to, continued when the store still has it."""
        prepare()
        self.target, self.run_dir, self.caffe_pb2, self.say = target, run_dir, caffe_pb2, say
        self.continue_run = continue_run
        self.rows = NewRows(metrics)
        self.earlier = all_of(metrics)
        self.problem: str | None = None
        self.tracking: dict[str, Any] | None = None
        self.weights: Path | None = None
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name="caffetool-mlflow", daemon=True)
        self._thread.start()

    def update(self, m: Metrics) -> None:
        """Queues the rows ``m`` has gained (called after every line of Caffe's output; never raises)."""
        try:
            if self.problem is None and self.rows.pending(m):
                now = int(time.time() * 1000)
                self._queue.put([(step, tag, value, now) for step, tag, value in self.rows.take(m)])
        except Exception as e:  # noqa: BLE001 - tracking never fails the training
            self.problem = self.problem or f"its rows could not be read: {reason(e)}"

    def finish(self, weights: Path | None) -> dict[str, Any] | None:
        """Sends the end of the run (the manifest as it is on disk now, and ``weights``) and waits for it
        at most :data:`END_WAIT` seconds; the manifest's ``tracking`` entry, or ``None`` if not tracked."""
        self.weights = weights
        self._queue.put(_END)
        self._thread.join(END_WAIT)
        if self._thread.is_alive() and self.problem is None:
            self.problem = f"the store took more than {END_WAIT:.0f} s to take the end of the run"
        if self.problem:
            self.say(problem_line(self.target, self.run_dir, self.problem, self.tracking is not None))
        return self.tracking if not self.problem else None

    def discard(self) -> None:
        """The run is removed (Caffe refused it before its first iteration): so is its MLflow run."""
        self._queue.put(_DISCARD)
        self._thread.join(DISCARD_WAIT)

    def _work(self) -> None:
        with contextlib.suppress(OSError):  # Linux: one thread's nice value; elsewhere it stays as it is
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LOWEST_PRIORITY)
        try:
            store = opened(self.target)
            run_id, earlier = self._open(store)
            self._send(store, run_id, earlier)
        except CaffetoolError as e:
            self.problem = str(e)
        except Exception as e:  # noqa: BLE001 - nothing of MLflow's may end a training
            self.problem = f"cannot track in {shown(self.target.uri)}: {reason(e)}"
        if self.problem:
            forget(self.target)

    def _open(self, store: Store) -> tuple[str, list[Point]]:
        """The MLflow run of this session, with the params and tags the run has, recorded in the manifest;
        the earlier rows it still lacks."""
        manifest = runrecord.read(self.run_dir)
        params = mapping.params(manifest, self.run_dir, self.caffe_pb2)
        tags = mapping.tags(manifest, self.run_dir) | {"status": "running"}
        now = int(time.time() * 1000)
        earlier: list[Scalar] = self.earlier
        if self.continue_run and store.exists(self.continue_run):
            run_id = self.continue_run
            store.running(run_id)
            logged, steps = store.logged(run_id)
            tags |= {f"resumed.{k}": v for k, v in params.items() if k in logged and logged[k] != v}
            params = {k: v for k, v in params.items() if k not in logged}  # MLflow's params never change
            earlier = [(step, tag, value) for step, tag, value in earlier if step > steps.get(tag, -1)]
        else:
            parent = {"mlflow.parentRunId": self.target.parent_run_id} if self.target.parent_run_id else {}
            run_id = store.create_run(self.run_dir.name, {**self.target.tags, **tags, **parent},
                                      epoch_ms(manifest.started_at) or now)
            tags = {}
        store.log(run_id, params=params, tags=tags)
        self.tracking = record_of(self.target, run_id, store.experiment_id)
        with contextlib.suppress(CaffetoolError):  # a manifest that cannot be written fails the run itself
            runrecord.update(self.run_dir, tracking=self.tracking)
        return run_id, [(step, tag, value, now) for step, tag, value in earlier]

    def _send(self, store: Store, run_id: str, pending: list[Point]) -> None:
        """Rows in batches until the end, then the end of the run."""
        last = time.monotonic()
        while True:
            try:
                item = self._queue.get(timeout=max(0.0, SEND_EVERY - (time.monotonic() - last)))
            except queue.Empty:
                item = None
            if isinstance(item, list):
                pending += item
            elif item == _DISCARD:
                store.delete(run_id)
                return
            elif item == _END:
                break
            if time.monotonic() - last >= SEND_EVERY:
                if pending:
                    store.log(run_id, pending)
                    pending = []
                last = time.monotonic()
        manifest = runrecord.read(self.run_dir)
        now = int(time.time() * 1000)
        pending += [(step, tag, value, now) for step, tag, value in mapping.final_scalars(manifest.final)]
        try:
            store.log(run_id, pending, tags={"status": manifest.status})
            store.upload(run_id, mapping.artifacts(self.run_dir, self.weights))
        except Exception:
            # The MLflow run still ends, with the training's status: left RUNNING it would show a
            # training that never ended. What failed is raised on (the warning says how to log it again).
            with contextlib.suppress(Exception):
                store.end(run_id, mapping.mlflow_status(manifest.status), now)
            raise
        store.end(run_id, mapping.mlflow_status(manifest.status), now)
