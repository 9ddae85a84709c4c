"""An MLflow store, opened and written through ``MlflowClient``: the one place that imports MLflow.

Every call is retried while SQLite answers "database is locked" (several processes — a sweep's
trials — writing one database file), for up to :data:`LOCKED_RETRY_S`. A SQLite store is opened under
an exclusive lock of this host (a ``flock`` on the folder that holds the database, so that nothing is
left behind once it is released): the first process to open a new database creates its tables, and the others wait
for it (MLflow's tracking store checks and creates them without a lock, and two processes creating
them at once fail). Any other failure of MLflow, SQLAlchemy, the network or the file system is raised as
one :class:`~caffetool.errors.TrackingError` naming the store, never as MLflow's own exception.

A process opens each store once (:func:`opened`): a sweep's trial actor trains run after run, and
importing MLflow and opening a SQLite store cost about 2.5 s of CPU the first time. MLflow's output
is silenced as it is imported (:func:`load`): its loggers, Alembic's (the schema
migrations of a new database), SQLAlchemy's, and its warnings. Unless they are set already,
MLflow's usage telemetry is turned off and its HTTP retries are shortened, so an unreachable server
costs seconds, not minutes. Limits: param values longer than :data:`PARAM_LIMIT` characters and tag
values longer than :data:`TAG_LIMIT` are cut (the limits of older MLflow servers); characters MLflow
refuses in a name become ``_``; non-finite metric values are not logged.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import math
import os
import re
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from caffetool.errors import TrackingError
from caffetool.track.target import TrackingTarget, artifact_location, shown

LOCKED = ("database is locked", "database table is locked")
LOCKED_RETRY_S = 60.0
PARAM_LIMIT = 500
TAG_LIMIT = 5000
BATCH_METRICS = 1000  # MLflow's limits for one log_batch
BATCH_PARAMS_TAGS = 100
CUT = "...[cut]"
_NAME = re.compile(r"[^/\w.\- :]")
QUIET_LOGGERS = ("mlflow", "alembic", "sqlalchemy", "huey")
QUIET_WARNINGS = ("mlflow", "alembic", "urllib3", "requests")
# Settings of MLflow's that caffetool sets unless the user has: no usage telemetry (a thread that
# posts to the internet from every training), and an unreachable server given up in seconds.
ENVIRONMENT = {"MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
               "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}
T = TypeVar("T")

Point = tuple[int, str, float, int]  # step, key, value, timestamp in ms
# MLflow's UI opens an experiment of this kind on its runs table (model training), not on its GenAI
# trace views
EXPERIMENT_TAGS = {"mlflow.experimentKind": "custom_model_development"}


def prepare() -> None:
    """Sets :data:`ENVIRONMENT` where unset and silences the warnings of MLflow and what it imports;
    call it on the main thread before a thread imports MLflow. A filter added by a thread is lost
    when another thread leaves ``warnings.catch_warnings``, and requests silences urllib3's PySocks
    warning that way, as it is imported."""
    for name, value in ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    for module in QUIET_WARNINGS:
        warnings.filterwarnings("ignore", module=rf"{module}(\.|$)")


def load() -> ModuleType:
    """MLflow, imported and silenced (see the module's description)."""
    prepare()
    import mlflow  # noqa: PLC0415 - 1.5 s to import: only when a run is tracked

    for name in QUIET_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers = [logging.NullHandler()]
        logger.propagate = False
        logger.setLevel(logging.CRITICAL)
    return mlflow


def reason(error: BaseException) -> str:
    """What went wrong, in one short line (MLflow's messages can run to pages)."""
    if isinstance(error, OSError) and error.strerror:
        return f"{error.strerror}: {error.filename}" if error.filename else error.strerror
    text = str(getattr(error, "message", None) or error) or type(error).__name__
    if errno := re.search(r"\[Errno -?\d+\] [^'\"()\]]+", text):
        return errno.group(0).strip()
    line = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    return line if len(line) <= 300 else line[:297] + "..."


def cut(value: Any, limit: int) -> str:
    """``value`` as text of at most ``limit`` characters (cut ones end with :data:`CUT`)."""
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[:limit - len(CUT)] + CUT


def name(key: str) -> str:
    """A metric, param or tag name MLflow takes: characters it refuses become ``_``."""
    return _NAME.sub("_", key)[:250]


_OPENED: dict[tuple[str, str], Store] = {}
_OPENING = threading.Lock()


def opened(target: TrackingTarget) -> Store:
    """The store and experiment of ``target``, opened the first time this process asks for them."""
    key = (target.uri, target.experiment)
    with _OPENING:
        if key not in _OPENED:
            _OPENED[key] = Store(target)
        return _OPENED[key]


def forget(target: TrackingTarget) -> None:
    """Open the store of ``target`` again next time (it failed: a database deleted, an experiment gone)."""
    with _OPENING:
        _OPENED.pop((target.uri, target.experiment), None)


@contextlib.contextmanager
def opening(uri: str) -> Iterator[None]:
    """Hold this host's lock on the SQLite database of ``uri`` (no lock for other stores)."""
    location = artifact_location(uri)  # set for a SQLite file only
    if location is None:
        yield
        return
    folder = Path(location).parent
    folder.mkdir(parents=True, exist_ok=True)  # as MLflow would, to create the database in it
    lock = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
    finally:
        os.close(lock)  # closing releases the lock


def _locked(error: BaseException) -> bool:
    text = str(error).lower()
    return any(sign in text for sign in LOCKED)


class Store:
    """An MLflow store and an experiment in it, opened when made (MLflow is imported then)."""

    def __init__(self, target: TrackingTarget) -> None:
        self.uri = shown(target.uri)  # as messages show it
        self._uri = target.uri
        try:
            self.mlflow = load()
            with opening(target.uri):
                self.client = self._retried(self.mlflow.MlflowClient, tracking_uri=target.uri)
                self.experiment_id = self._retried(self._experiment, target.experiment)
        except TrackingError:
            raise
        except Exception as e:  # noqa: BLE001 - whatever MLflow raises is one kind of failure here
            raise TrackingError(f"cannot track in {self.uri}: {reason(e)}") from None

    def _experiment(self, experiment: str) -> str:
        found = self.client.get_experiment_by_name(experiment)
        if found is None:
            try:
                return self.client.create_experiment(experiment, artifact_location=artifact_location(self._uri),
                                                     tags=EXPERIMENT_TAGS)
            except self.mlflow.exceptions.MlflowException as e:
                if e.error_code != "RESOURCE_ALREADY_EXISTS":
                    raise
                found = self.client.get_experiment_by_name(experiment)  # another process made it first
        if found.lifecycle_stage == "deleted":
            raise TrackingError(f"the experiment {experiment!r} in {self.uri} is deleted; restore it (`mlflow "
                                f"experiments restore --experiment-id {found.experiment_id}`) or choose another "
                                "with --experiment")
        return found.experiment_id

    def _retried(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``call``, again after a pause while SQLite says the database is locked."""
        deadline, pause = time.monotonic() + LOCKED_RETRY_S, 0.05
        while True:
            try:
                return call(*args, **kwargs)
            except Exception as e:
                if not _locked(e) or time.monotonic() > deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    def _do(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``call`` retried, its failure a :class:`TrackingError`."""
        try:
            return self._retried(call, *args, **kwargs)
        except TrackingError:
            raise
        except Exception as e:  # noqa: BLE001
            raise TrackingError(f"cannot track in {self.uri}: {reason(e)}") from None

    def create_run(self, run_name: str, tags: Mapping[str, Any], start_ms: int | None = None) -> str:
        """A new run in the experiment; its run id."""
        tags = {name(k): cut(v, TAG_LIMIT) for k, v in tags.items() if v is not None}
        return self._do(self.client.create_run, self.experiment_id, start_time=start_ms, tags=tags,
                        run_name=run_name).info.run_id

    def exists(self, run_id: str) -> bool:
        """Whether ``run_id`` is a run of this store that is not deleted."""
        def get() -> bool:
            try:
                return self.client.get_run(run_id).info.lifecycle_stage != "deleted"
            except self.mlflow.exceptions.MlflowException as e:
                if e.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "NOT_FOUND"):
                    return False
                raise
        return self._do(get)

    def log(self, run_id: str, points: Iterable[Point] = (), params: Mapping[str, Any] | None = None,
            tags: Mapping[str, Any] | None = None) -> None:
        """Metrics, params and tags, in as few ``log_batch`` calls as MLflow's limits allow."""
        entities = self.mlflow.entities
        metrics = [entities.Metric(name(key), float(value), int(ms), int(step)) for step, key, value, ms in points
                   if isinstance(value, (int, float)) and math.isfinite(value)]
        others = [entities.Param(name(k), cut(v, PARAM_LIMIT)) for k, v in (params or {}).items() if v is not None]
        others += [entities.RunTag(name(k), cut(v, TAG_LIMIT)) for k, v in (tags or {}).items() if v is not None]
        while metrics or others:
            some, metrics = metrics[:BATCH_METRICS], metrics[BATCH_METRICS:]
            more, others = others[:BATCH_PARAMS_TAGS], others[BATCH_PARAMS_TAGS:]
            self._do(self.client.log_batch, run_id, metrics=some,
                     params=[p for p in more if isinstance(p, entities.Param)],
                     tags=[t for t in more if isinstance(t, entities.RunTag)], synchronous=True)

    def logged(self, run_id: str) -> tuple[dict[str, str], dict[str, int]]:
        """A run's params, and the last step logged of each of its metrics."""
        run = self._do(self.client.get_run, run_id)
        steps = {key: max((m.step for m in self._do(self.client.get_metric_history, run_id, key)), default=-1)
                 for key in run.data.metrics}
        return dict(run.data.params), steps

    def upload(self, run_id: str, files: Iterable[tuple[Path, str | None]]) -> None:
        """Each ``(file, folder)`` as an artifact of the run (``folder`` ``None``: at the top)."""
        for path, folder in files:
            self._do(self.client.log_artifact, run_id, str(path), folder)

    def running(self, run_id: str) -> None:
        """A run ended earlier, running again (a resumed training)."""
        self._do(self.client.update_run, run_id, status="RUNNING")

    def end(self, run_id: str, status: str, end_ms: int | None = None) -> None:
        """The run ended with MLflow's ``status`` (FINISHED, FAILED, KILLED)."""
        self._do(self.client.set_terminated, run_id, status=status, end_time=end_ms)

    def delete(self, run_id: str) -> None:
        """The run marked deleted (MLflow keeps it, restorable with ``mlflow runs restore``)."""
        self._do(self.client.delete_run, run_id)

    def tracked(self, run_dir: Path, run_id: str | None) -> list[str]:
        """The runs of this store (any experiment, not deleted) that log ``run_dir``: ``run_id`` if it is
        one of them, and every run tagged with the folder (``caffetool.run_dir``)."""
        found = [run_id] if run_id and self.exists(run_id) else []
        folder = str(run_dir.absolute())
        if "'" in folder:
            return found  # MLflow's filter strings cannot quote it
        experiments = [e.experiment_id for e in self._do(self.client.search_experiments)]
        runs = self._do(self.client.search_runs, experiments, filter_string=f"tags.`caffetool.run_dir` = '{folder}'")
        return found + [r.info.run_id for r in runs if r.info.run_id not in found]
