"""``track.import``: runs made before tracking existed, or with it off, logged to MLflow from their folders.

A run is logged as live logging would have logged it (:mod:`caffetool.track.mapping`): the same
params, tags and artifacts, and its metrics from the rows it recorded (``metrics.json``, else
``metrics.csv``); its start and end are the manifest's. Its manifest then records where it is tracked,
as a live run's does (a run in a read-only folder is imported all the same). A run whose metrics
files are missing or damaged is read from its ``caffe.log``, as ``train.parse`` reads it, with the
final figures its manifest holds.

A run the store has already (its manifest's ``tracking`` run id is there, or a run is tagged with its
folder) is skipped, unless ``force``: then the run is logged again and the earlier MLflow runs of it
are marked deleted (MLflow keeps them, restorable with ``mlflow runs restore``); a sweep's trial
logged again into the same store stays under its parent run. A run that is still
training is skipped: it is tracked live, or can be imported when it ends.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType

from caffetool.errors import CaffetoolError, RunError, TrackingError
from caffetool.runs import final_figures, metrics_io, ownership, runrecord, snapshots
from caffetool.runs.folder import RunFolder
from caffetool.runs.logparse import Metrics, parse_file
from caffetool.runs.scalars import all_of
from caffetool.track import mapping
from caffetool.track.live import epoch_ms, record_of
from caffetool.track.store import Store, opened
from caffetool.track.target import TrackingTarget


@dataclass
class Imported:
    """What became of one run: logged as ``run_id``, or ``skipped`` (why), with a ``note``."""

    run_dir: Path
    run_id: str | None = None
    skipped: str | None = None
    note: str | None = None

    def line(self, store: str) -> str:
        """One line for the user."""
        if self.skipped:
            return f"skipped {self.run_dir.name}: {self.skipped}"
        return f"imported {self.run_dir.name}: MLflow run {self.run_id} in {store}" + (
            f" ({self.note})" if self.note else "")


def import_runs(run_dirs: list[Path], target: TrackingTarget, caffe_pb2: ModuleType,
                force: bool = False) -> Iterator[Imported]:
    """Each of ``run_dirs`` imported into ``target`` (the store opened once); raises
    :class:`~caffetool.errors.TrackingError` when the store cannot be used."""
    store = opened(target)
    for run_dir in run_dirs:
        yield import_run(store, target, run_dir, caffe_pb2, force)


def import_run(store: Store, target: TrackingTarget, run_dir: Path, caffe_pb2: ModuleType,
               force: bool = False) -> Imported:
    """``run_dir`` logged to ``store`` (opened for ``target``), or skipped (see the module's description)."""
    manifest = ownership.settle(run_dir)
    if manifest.status in ownership.ACTIVE:
        owner = manifest.owner
        return Imported(run_dir, skipped=f"it is training now (process {owner.get('pid')} on {owner.get('host')}); "
                                         "import it when it ends")
    earlier = store.tracked(run_dir, manifest.tracking.get("run_id"))
    if earlier and not force:
        return Imported(run_dir, skipped=f"already tracked in {store.uri} as MLflow run {', '.join(earlier)} "
                                         "(--force imports it again)")
    metrics = read_metrics(run_dir, manifest)
    recorded = manifest.tracking
    parent_id = target.parent_run_id or (recorded.get("parent_run_id") if recorded.get("uri") == target.uri else None)
    parent = {"mlflow.parentRunId": parent_id} if parent_id else {}
    run_id = store.create_run(run_dir.name, {**target.tags, **mapping.tags(manifest, run_dir), **parent},
                              epoch_ms(manifest.started_at))
    note = None
    try:
        runrecord.update(run_dir, tracking=record_of(replace(target, parent_run_id=parent_id), run_id,
                                                     store.experiment_id))
    except RunError as e:
        note = f"not recorded in its manifest: {e}"
    try:
        _log(store, run_id, run_dir, metrics, caffe_pb2)
    except TrackingError:
        with contextlib.suppress(CaffetoolError):  # half a run is no run: the store and the manifest as they were
            store.delete(run_id)
            runrecord.update(run_dir, tracking=recorded)
        raise
    for old in earlier:
        store.delete(old)
    if earlier:
        note = "; ".join(filter(None, [f"replaces {', '.join(earlier)}, now marked deleted", note]))
    return Imported(run_dir, run_id, note=note)


def _log(store: Store, run_id: str, run_dir: Path, metrics: Metrics, caffe_pb2: ModuleType) -> None:
    """The run's params, metrics, final figures, status and artifacts, from its manifest as it is now."""
    manifest = runrecord.read(run_dir)
    end = epoch_ms(manifest.ended_at)
    at = end or epoch_ms(manifest.started_at) or int(time.time() * 1000)
    points = [(step, tag, value, at) for step, tag, value in all_of(metrics)
              + mapping.final_scalars(manifest.final)]
    store.log(run_id, points, params=mapping.params(manifest, run_dir, caffe_pb2))
    store.upload(run_id, mapping.artifacts(run_dir, snapshots.newest_weights(run_dir, caffe_pb2)))
    store.end(run_id, mapping.mlflow_status(manifest.status), end)


def read_metrics(run_dir: Path, manifest: runrecord.Manifest) -> Metrics:
    """The rows the run recorded: ``metrics.json``, else ``metrics.csv``, else its ``caffe.log``."""
    folder = RunFolder(run_dir)
    for path, read in ((folder.metrics_json, metrics_io.read_json), (folder.metrics_csv, metrics_io.read_csv)):
        if path.is_file():
            try:
                return read(path)
            except RunError:
                continue
    if not folder.log.is_file():
        raise RunError(f"{run_dir} has no {folder.metrics_json.name}, {folder.metrics_csv.name} or {folder.log.name}: it "
                       "holds no metrics to import")
    metrics = parse_file(folder.log)
    final_figures.restore(metrics, manifest.final)
    return metrics
