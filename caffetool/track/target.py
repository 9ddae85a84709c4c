"""Where a run is tracked: an MLflow store, an experiment, and for a sweep's trial the run it belongs to.

The default store is a SQLite database in the runs folder, ``sqlite:///<runs dir>/mlflow.db``, with
its artifacts beside it in ``<runs dir>/mlartifacts``; ``off`` tracks nothing. This module only names
things: it imports no MLflow and touches no store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from caffetool.errors import ConfigError

OFF = "off"
DEFAULT_EXPERIMENT = "caffetool"
STORE_FILE = "mlflow.db"
ARTIFACTS = "mlartifacts"


@dataclass
class TrackingTarget:
    """Where and how one run (or a sweep's parent run) is logged to MLflow.

    ``uri`` is any MLflow tracking URI (``sqlite:///ABS/PATH/mlflow.db``, ``http://host:5000``, ...);
    ``experiment`` the experiment's name (made when missing); ``parent_run_id`` makes the run a child
    of that run (MLflow's ``mlflow.parentRunId`` tag: a sweep's trials under the sweep's run);
    ``tags`` are set on the run besides caffetool's own. Plain data, so it travels to other
    processes (a Ray trial) as it is.
    """

    uri: str
    experiment: str = DEFAULT_EXPERIMENT
    parent_run_id: str | None = None
    tags: dict[str, str] = field(default_factory=dict)


def default_uri(runs_dir: str | Path) -> str:
    """The store of the runs in ``runs_dir``: ``sqlite:///<absolute runs dir>/mlflow.db``."""
    return f"sqlite:///{Path(runs_dir).absolute() / STORE_FILE}"


def resolve(uri: str | None, experiment: str | None, runs_dir: str | Path) -> TrackingTarget | None:
    """The target a command's settings name: ``uri`` (``None``: the runs folder's database; ``off``:
    no tracking, ``None`` returned) and ``experiment`` (``None``: :data:`DEFAULT_EXPERIMENT`)."""
    chosen = (uri or "").strip() or default_uri(runs_dir)
    if chosen.lower() == OFF:
        return None
    name = (experiment or "").strip() or DEFAULT_EXPERIMENT
    if len(name) > 500:
        raise ConfigError(f"--experiment is {len(name)} characters long; MLflow takes names of up to 500")
    return TrackingTarget(chosen, name)


def artifact_location(uri: str) -> str | None:
    """Where a new experiment of a SQLite store keeps its artifacts: ``mlartifacts`` beside the
    database (MLflow would otherwise put them under the current folder). ``None`` for other stores,
    which decide for themselves (a server proxies them)."""
    parts = urlsplit(uri)
    if parts.scheme != "sqlite" or not uri.startswith("sqlite:///"):
        return None
    path = uri.removeprefix("sqlite:///").split("?", 1)[0]
    if not path or path == ":memory:":
        return None
    return str(Path(path).absolute().parent / ARTIFACTS)


def shown(uri: str) -> str:
    """``uri`` as messages show it: without a password (``http://user:secret@host`` → ``http://user:***@host``)."""
    parts = urlsplit(uri)
    if parts.password:
        return uri.replace(f":{parts.password}@", ":***@", 1)
    return uri
