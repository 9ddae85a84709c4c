"""A sweep in MLflow: one parent run for the sweep, its trials' runs as children.

Each trial's run is tracked as any training is (:mod:`caffetool.track`, live, in the trial's own
process), in the store the sweep names: by default the runs folder's database
(``sqlite:///runs/mlflow.db``), so ``mlflow ui`` shows sweeps beside single trainings. The sweep's
run is made on a thread of the sweep's command, off its path: a new SQLite store takes MLflow
seconds to make (its schema's migrations), which no trial should wait for. So a trial's run starts
without its parent, and the thread nests it (MLflow's ``mlflow.parentRunId`` tag) as soon as both
exist: at the trial's first result, at its end, and for every trial at the sweep's end.

The parent run holds the sweep's plan as params (each ``--param`` under its name, the search and its seed, the
scheduler, the metric, the model and data set), its status, its best trial (a tag) and that trial's
figure as its metric, under the tag the trials log it with (``test0/accuracy``). ``sweep.json``
records the parent (``tracking``), and ``sweep.resume`` goes on in the same one. A store that fails
is named once and the sweep goes on untracked, as a training does.
"""

from __future__ import annotations

import shlex
import threading
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from caffetool import track
from caffetool.errors import RunError, TrackingError
from caffetool.runs import runrecord
from caffetool.runs.folder import RunFolder
from caffetool.sweep import sweeprecord
from caffetool.track.store import Store
from caffetool.track.target import shown

FINISH_WAIT = 60.0  # seconds the sweep's end waits for the parent's last writes
NEST_EVERY = 5.0  # seconds between looks for trial runs to nest
KIND = "sweep"


class SweepRun:
    """The sweep's MLflow run, written by a thread of its own: made, then every few seconds the
    trials' runs that have appeared nested under it, then ended. No method waits but :meth:`finish`."""

    def __init__(self, target: track.TrackingTarget | None, plan: sweeprecord.Plan, sweep_dir: Path,
                 say: Callable[[str], None]) -> None:
        self.target = target
        self.plan = plan
        self.sweep_dir = sweep_dir
        self.say = say
        self.run_id: str | None = None
        self.store: Store | None = None
        self.nested: set[str] = set()  # the trials' MLflow runs under the parent
        self.over = threading.Event()
        self.outcome: tuple[str, list[dict[str, Any]], str] | None = None
        self.thread: threading.Thread | None = None
        if target is not None:
            recorded = sweeprecord.read_record(sweep_dir).get("tracking") or {}
            self.thread = threading.Thread(target=self._work, args=(recorded,), name="mlflow sweep", daemon=True)
            self.thread.start()

    def trials(self) -> dict[str, Any] | None:
        """Where each trial's run is tracked (plain data for :class:`~caffetool.sweep.trial.TrialSpec`)."""
        if self.target is None:
            return None
        return asdict(replace(self.target, tags={**self.target.tags, "caffetool.sweep": self.plan.name}))

    def abandon(self) -> None:
        """Stop at once (Ctrl-C): what is written stays; the sweep's run stays running for
        ``sweep.resume`` to go on in."""
        self.over.set()

    def finish(self, status: str, rows: list[dict[str, Any]], metric_tag: str) -> None:
        """End the sweep's run with ``status``, every trial nested and the best named; waits (bounded)."""
        if self.thread is None:
            return
        self.outcome = (status, rows, metric_tag)
        self.over.set()
        self.thread.join(FINISH_WAIT)
        if self.thread.is_alive():
            self.say(f"tracking: MLflow did not finish writing sweep {self.plan.name} in {FINISH_WAIT:.0f} s; "
                     "what it wrote stays")

    def _work(self, recorded: dict[str, Any]) -> None:
        try:
            self._begin(recorded)
            while not self.over.wait(NEST_EVERY):
                self._nest_all(p for p in self.sweep_dir.iterdir() if RunFolder(p).manifest.is_file())
            if self.outcome is not None:
                self._finish(*self.outcome)
        except Exception as e:  # noqa: BLE001 - tracking never fails a sweep: named once, then off
            why = str(e) if isinstance(e, TrackingError) else f"{type(e).__name__}: {e}"
            self.say(f"tracking: {why}; sweep {self.plan.name} goes on untracked (`caffetool track.import "
                     f"{shlex.quote(str(self.sweep_dir))}` logs its trials later)")

    def _begin(self, recorded: dict[str, Any]) -> None:
        assert self.target is not None
        self.store = Store(self.target)
        if recorded.get("uri") == shown(self.target.uri) and recorded.get("run_id") \
                and self.store.exists(recorded["run_id"]):
            self.run_id = recorded["run_id"]  # a resumed sweep goes on in its run
            self.store.running(self.run_id)
            self.store.log(self.run_id, tags={"status": "running"})
        else:
            self.run_id = track.start_parent(self.target, self.plan.name, params=self._params(),
                                             tags={"caffetool.kind": KIND, "caffetool.sweep_dir": str(self.sweep_dir)})
        sweeprecord.update(self.sweep_dir, tracking={"uri": shown(self.target.uri),
                                                     "experiment": self.target.experiment, "run_id": self.run_id})

    def _params(self) -> dict[str, Any]:
        plan = self.plan
        # each --param under its own name: in MLflow's table the sweep's row shows the range where its
        # trials' rows show the value drawn
        given = {p.split("=", 1)[0].strip().replace("-", "_").lower(): p.split("=", 1)[-1].strip() for p in plan.params}
        return {**given, "search": plan.search, "seed": plan.seed, "samples": plan.samples,
                "scheduler": plan.scheduler, "grace": plan.grace, "metric": plan.metric, "mode": plan.mode,
                "model": None if plan.solver else plan.model, "dataset": None if plan.solver else plan.dataset,
                "solver": plan.solver, "max_iter": plan.max_iter, "cpus_per_trial": plan.cpus_per_trial,
                "gpus_per_trial": plan.gpus_per_trial, **{f"fixed.{k}": v for k, v in plan.fixed.items()}}

    def _nest_all(self, run_dirs: Any) -> None:
        assert self.store is not None and self.run_id is not None
        for run_dir in run_dirs:
            child = _tracked_run(run_dir)
            if child is not None and child not in self.nested:
                self.store.log(child, tags={"mlflow.parentRunId": self.run_id})
                self.nested.add(child)

    def _finish(self, status: str, rows: list[dict[str, Any]], metric_tag: str) -> None:
        assert self.target is not None and self.store is not None and self.run_id is not None
        self._nest_all(Path(r["run_dir"]) for r in rows if r.get("run_dir"))
        best = next((r for r in rows if r["metric"] is not None), None)
        if best is not None:
            self.store.log(self.run_id, tags={"best_trial": best["trial"]})
        track.end_parent(self.target, self.run_id, status, {metric_tag: best["metric"]} if best else None,
                         step=int(best["metric_iteration"] or 0) if best else 0)


def _tracked_run(run_dir: Path) -> str | None:
    """The MLflow run a trial's manifest says it is tracked in (None until its tracker opened it)."""
    try:
        return runrecord.read(run_dir).tracking.get("run_id")
    except RunError:
        return None
