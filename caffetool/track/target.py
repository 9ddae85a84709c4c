"""Where a run is tracked: an MLflow store, an experiment, and for a sweep's trial the run it belongs to.

The default store is a SQLite database in the runs folder, ``sqlite:///<runs dir>/mlflow.db``, with
its artifacts beside it in ``<runs dir>/mlartifacts``; ``off`` tracks nothing. This module names
things and imports no MLflow; of a SQLite store it checks what a file system can tell before MLflow
opens it (MLflow retries an unopenable database for a minute and then blames slowness).
"""

from __future__ import annotations

import os
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
    if chosen != default_uri(runs_dir):  # the runs folder, and so the default's, is made by the first run
        check_sqlite(chosen)
    name = (experiment or "").strip() or DEFAULT_EXPERIMENT
    if len(name) > 500:
        raise ConfigError(f"--experiment is {len(name)} characters long; MLflow takes names of up to 500")
    return TrackingTarget(chosen, name)


def check_sqlite(uri: str) -> None:
    """Refuse a SQLite store that keeps nothing (``:memory:``, which ends with the process while the
    run's manifest names a run in it, and whose artifacts MLflow writes into the current folder) or that
    cannot be opened: a folder, a file that is no SQLite database, a folder that is missing or cannot
    be written in."""
    if urlsplit(uri).scheme != "sqlite":
        return
    path = uri.split("://", 1)[1].removeprefix("/").split("?", 1)[0] if "://" in uri else ""
    if not path or path == ":memory:" or "mode=memory" in uri:
        raise ConfigError(f"--tracking-uri {uri} keeps nothing: an in-memory database ends with the process, and the "
                          "run's record would name a run no store holds; name a database file (by default "
                          f"{STORE_FILE} in the runs folder), or give --tracking-uri off")
    database = Path(path).absolute()
    if database.is_dir():
        raise ConfigError(f"--tracking-uri {uri}: {database} is a folder; name the database file in it, e.g. "
                          f"sqlite:///{database / STORE_FILE}")
    if database.exists():
        _check_database(uri, database)
        return
    folder = database.parent
    blocker = next((f for f in (folder, *folder.parents) if f.exists() and not f.is_dir()), None)
    if blocker is not None:
        raise ConfigError(f"--tracking-uri {uri}: {blocker} is a file, not a folder; name a database in a folder")
    if not folder.is_dir():
        raise ConfigError(f"--tracking-uri {uri}: the folder {folder} does not exist; make it, or name a database in "
                          "a folder that does")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"--tracking-uri {uri}: cannot make the database {database}, as {folder} is not writable")


def _check_database(uri: str, database: Path) -> None:
    """An existing file must be a SQLite database this user can open for writing."""
    try:
        with database.open("rb") as f:
            head = f.read(16)
    except OSError as e:
        raise ConfigError(f"--tracking-uri {uri}: cannot open {database} ({e.strerror})") from None
    if head and head != b"SQLite format 3\x00":
        raise ConfigError(f"--tracking-uri {uri}: {database} is not a SQLite database; name another file")
    if not os.access(database, os.W_OK) or not os.access(database.parent, os.W_OK | os.X_OK):
        raise ConfigError(f"--tracking-uri {uri}: {database} cannot be written (SQLite also writes its journal "
                          f"beside it, in {database.parent})")


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
