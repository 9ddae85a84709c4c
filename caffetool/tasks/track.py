"""``caffetool track.import``: runs made with tracking off, or before it existed, logged to MLflow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from invoke import Collection

from caffetool import extras, track
from caffetool.engine import import_caffe, locate
from caffetool.errors import ConfigError
from caffetool.runs import runrecord
from caffetool.runs.folder import RunFolder
from caffetool.tasks._common import pick, task
from caffetool.tasks.train import TRACKING_HELP


@task(name="import", help={
    "runs": "run names or folders (a sweep's folder: each trial's run), separated by commas (or given one "
            "after another, with `caffetool`)",
    "runs_dir": "where runs are",
    "tracking_uri": "MLflow store to log them to (default: sqlite:///<runs dir>/mlflow.db)",
    "experiment": TRACKING_HELP["experiment"], "force": "import a run the store has already again (the earlier "
                                                        "MLflow run is marked deleted)"})
def import_(c: Any, runs: str, runs_dir: str | None = None, tracking_uri: str | None = None,
            experiment: str | None = None, force: bool = False) -> None:
    """Log earlier runs to MLflow from their folders: params, metrics, tags, artifacts."""
    from caffetool.track import importer  # noqa: PLC0415 - MLflow's modules only for this task

    extras.need("mlflow", "caffetool track.import")
    root = Path(pick(runs_dir, c.runs.dir))
    names = [r.strip() for r in runs.split(",") if r.strip()]  # a folder's name may hold spaces
    if not names:
        raise ConfigError("name at least one run: caffetool track.import RUN[,RUN...]")
    run_dirs = [run_dir for name in names for run_dir in _runs_named(root, name)]
    target = track.resolve(pick(tracking_uri, c.tracking.uri), pick(experiment, c.tracking.experiment), root)
    if target is None:
        raise ConfigError("--tracking-uri off names no store to import into; give one, e.g. "
                          f"--tracking-uri {track.default_uri(root)}")
    caffe_pb2 = import_caffe(locate(c.engine.prefix, probe=False)).proto.caffe_pb2
    for imported in importer.import_runs(run_dirs, target, caffe_pb2, force):
        print(imported.line(track.target.shown(target.uri)))


def _runs_named(root: Path, name: str) -> list[Path]:
    """The run ``name`` names, or every trial's run of the sweep it names (a sweep's folder holds its
    trials' runs: importing it imports them)."""
    from caffetool.sweep import sweeprecord  # noqa: PLC0415

    for folder in (Path(name), root / name):
        if (folder / sweeprecord.PLAN).is_file():
            trials = sorted(p for p in folder.iterdir() if RunFolder(p).manifest.is_file())
            if not trials:
                raise ConfigError(f"{folder} is a sweep whose trials have no runs yet; nothing to import")
            return [runrecord.find(root, str(trial)) for trial in trials]
    return [runrecord.find(root, name)]


ns = Collection("track", import_)
