"""Tracking of runs in MLflow: every training logged as it trains, earlier runs imported from their folders.

``caffetool train`` (and ``train --solver``, ``train.resume``) logs each run to an MLflow store: its
params, tags, metrics with the iteration as step, and artifacts, mapped from the run's own record
(:mod:`caffetool.track.mapping`), live and at a cost the training does not feel
(:mod:`caffetool.track.live`). The default store is ``sqlite:///<runs dir>/mlflow.db`` with the
artifacts in ``<runs dir>/mlartifacts`` (:mod:`caffetool.track.target`); ``mlflow ui
--backend-store-uri sqlite:///runs/mlflow.db`` shows it. ``caffetool track.import RUN`` logs a run made
with tracking off, or before tracking existed (:mod:`caffetool.track.importer`). A run's manifest
records where it is tracked (``tracking``: uri, run_id, experiment_id), and a resumed run goes on in
the same MLflow run. A store that fails never fails a training: tracking is off for that run, said
in one line.

The API for runs made by other code (a sweep: a parent run, with one child run per trial):

* :class:`TrackingTarget` (uri, experiment, parent_run_id, tags), given to
  :class:`caffetool.train.session.TrainRequest` as ``tracking=`` or to
  :func:`caffetool.train.session.resume` as ``tracking=``: the run is logged there, as a child of
  ``parent_run_id`` (MLflow's ``mlflow.parentRunId`` tag) with ``tags`` added; ``None`` tracks nothing.
* :func:`start_parent` and :func:`end_parent`: the parent run itself.

Several processes may write one SQLite store at once (a sweep's trials): every call is retried while
the database is locked, and the database's tables are made once, by whichever process opens it first
(a sweep's driver, making the parent, before any trial starts). Limits: SQLite wants a local disk
(on a cluster, use a tracking server: ``--tracking-uri http://host:5000``); MLflow itself is imported
only when something is tracked.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import caffetool
from caffetool.track.mapping import MLFLOW_STATUS, mlflow_status
from caffetool.track.store import opened
from caffetool.track.target import DEFAULT_EXPERIMENT, OFF, TrackingTarget, default_uri, resolve

__all__ = ["DEFAULT_EXPERIMENT", "OFF", "TrackingTarget", "continued", "default_uri", "end_parent", "resolve",
           "start_parent"]


def start_parent(target: TrackingTarget, name: str, params: Mapping[str, Any] | None = None,
                 tags: Mapping[str, Any] | None = None) -> str:
    """Start a parent run (a sweep's) named ``name`` in ``target``'s store and experiment, with
    ``params`` and ``tags`` (and ``target.tags``); its MLflow run id, for the children's
    ``TrackingTarget(parent_run_id=...)``. ``target.parent_run_id`` nests it in turn.

    Raises :class:`~caffetool.errors.TrackingError` when the store cannot be used: the caller says so
    and runs its trainings untracked (``tracking=None``), as a training does.
    """
    store = opened(target)
    parent = {"mlflow.parentRunId": target.parent_run_id} if target.parent_run_id else {}
    run_id = store.create_run(name, {**target.tags, **(tags or {}), **parent, "status": "running",
                                     "caffetool.version": caffetool.__version__}, int(time.time() * 1000))
    store.log(run_id, params=params or {})
    return run_id


def end_parent(target: TrackingTarget, run_id: str, status: str = "finished",
               metrics: Mapping[str, float] | None = None, step: int = 0) -> None:
    """End the parent run ``run_id`` with ``status`` (caffetool's: finished, failed, interrupted,
    stopped early; or MLflow's: FINISHED, FAILED, KILLED) and its ``metrics`` (at ``step``), such as
    the best trial's figures. Raises :class:`~caffetool.errors.TrackingError` as :func:`start_parent`."""
    store = opened(target)
    now = int(time.time() * 1000)
    store.log(run_id, [(step, key, value, now) for key, value in (metrics or {}).items()], tags={"status": status})
    store.end(run_id, status if status in MLFLOW_STATUS.values() else mlflow_status(status), now)


def continued(target: TrackingTarget | None, recorded: Mapping[str, Any] | None) -> tuple[TrackingTarget | None, str | None]:
    """Where a resumed run is logged: to the store and MLflow run its manifest's ``tracking`` names
    (``recorded``), when tracking is on (``target``); else where ``target`` says, as a new MLflow run.
    The target, and the run id to continue (``None``: a new run)."""
    if target is None or not recorded or not recorded.get("uri") or not recorded.get("run_id"):
        return target, None
    parent = target.parent_run_id or recorded.get("parent_run_id")
    return replace(target, uri=recorded["uri"], parent_run_id=parent), recorded["run_id"]
