"""A run's manifest (``manifest.json``): made in one place, and read and written through one door.

:class:`Manifest` is the record itself, typed: every command reads a run's entries as its fields.
:func:`new` makes a run's first manifest: what trains it (command, model, data set, devices, the
engine's own manifest), where (host, threads) and with which caffetool. :class:`Record` keeps it
in memory while a command works on the run; :func:`update` serves the commands that add to a run's
record later (``train.test``, ``evaluate``, the checks of who owns a run). Every change is a
read-modify-write under the run's lock (``flock`` on :attr:`RunFolder.lock`): the manifest as it is on disk at
that moment, changed, written whole in one rename, so two commands working on one run (a
``train.test`` while the run trains) never write back a stale copy over each other's record.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import caffetool
from caffetool.errors import RunError
from caffetool.fsio import write_atomic
from caffetool.runs import rundir
from caffetool.runs.folder import RunFolder


@dataclass
class Manifest:
    """A run's record, as ``manifest.json`` holds it: one field per entry, in the order the file
    lists them. Entries this version does not know (a newer caffetool's, a user's own) are kept in
    ``extra`` and written back as they were; an empty entry is left out of the file."""

    name: str | None = None
    status: str | None = None  # setting-up, running, finished, failed, stopped, interrupted
    command: str | None = None
    model: str | None = None
    dataset: dict[str, Any] = field(default_factory=dict)
    device: dict[str, Any] = field(default_factory=dict)  # gpu, label, flag, cudnn
    engine: dict[str, Any] = field(default_factory=dict)  # prefix, the engine's own manifest
    host: dict[str, Any] = field(default_factory=dict)
    threads: dict[str, Any] = field(default_factory=dict)
    caffetool: dict[str, Any] = field(default_factory=dict)
    started_at: str | None = None
    project: dict[str, Any] = field(default_factory=dict)  # a --solver run: where its files came from
    sweep: dict[str, Any] = field(default_factory=dict)  # a sweep's trial: its sweep, trial and host
    caffe_command: list[str] = field(default_factory=list)
    solver: dict[str, Any] = field(default_factory=dict)
    owner: dict[str, Any] = field(default_factory=dict)  # the process training it (caffetool.runs.ownership)
    tracking: dict[str, Any] = field(default_factory=dict)  # where MLflow has it (caffetool.track)
    resumes: list[dict[str, Any]] = field(default_factory=list)
    ended_at: str | None = None
    exit_code: int | None = None
    message: str | None = None
    iterations: int | None = None
    samples: Any = None  # the process's CPU and memory samples (caffetool.train.sampler)
    final: dict[str, Any] = field(default_factory=dict)  # the last figures (caffetool.train.final_test)
    timings_s: dict[str, Any] = field(default_factory=dict)
    tests: list[dict[str, Any]] = field(default_factory=list)  # train.test's measurements
    evaluations: list[dict[str, Any]] = field(default_factory=list)  # evaluate's summaries
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        known = {f.name for f in fields(cls)} - {"extra"}
        return cls(**{k: v for k, v in data.items() if k in known},
                   extra={k: v for k, v in data.items() if k not in known})

    def as_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        return {k: v for k, v in out.items() if v is not None and v != {} and v != []} | self.extra

    def caffe_flag(self, flag: str) -> str | None:
        """A flag's value in the Caffe command the run trains with (``weights``, ``gpu`` ...)."""
        return flag_value(self.caffe_command, flag)

    def set(self, **entries: Any) -> None:
        """Set entries by name; one this version does not know goes to ``extra``."""
        known = {f.name for f in fields(self)} - {"extra"}
        for key, value in entries.items():
            if key in known:
                setattr(self, key, value)
            else:
                self.extra[key] = value


def flag_value(argv: list[str], flag: str) -> str | None:
    """The value of ``-flag=VALUE`` in a Caffe command line (as ``caffe_command`` records one), if it has one."""
    return next((arg.split("=", 1)[1] for arg in argv if arg.startswith(f"-{flag}=")), None)


def read(run_dir: Path) -> Manifest:
    path = RunFolder(run_dir).manifest
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise RunError(f"{path} is unreadable ({e})") from e
    if not isinstance(data, dict):
        raise RunError(f"{path} is not a run manifest (a JSON object)")
    try:
        return Manifest.from_dict(data)
    except TypeError as e:
        raise RunError(f"{path} is not a run manifest ({e})") from e


def find(runs_dir: Path, run: str) -> Path:
    """A run by name or path (:func:`caffetool.runs.rundir.folder_of`) whose manifest reads: a damaged
    record is refused before a command writes anything into the run."""
    run_dir = rundir.folder_of(runs_dir, run)
    read(run_dir)
    return run_dir


def write(run_dir: Path, manifest: Manifest) -> None:
    write_atomic(RunFolder(run_dir).manifest, json.dumps(manifest.as_dict(), indent=2, default=str) + "\n", RunError)


@contextmanager
def locked(run_dir: Path) -> Iterator[None]:
    """Hold the run's manifest lock (an exclusive ``flock`` on its lock file) for the block."""
    folder = RunFolder(run_dir)
    try:
        fd = os.open(folder.lock, os.O_CREAT | os.O_RDWR, 0o644)
    except OSError as e:
        raise RunError(f"cannot lock {folder.manifest} ({e.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def update(run_dir: Path, change: Callable[[Manifest], None] | None = None, **entries: Any) -> Manifest:
    """The manifest as it is on disk now, changed by ``change`` and then ``entries``, written back,
    all under the run's lock; the manifest written."""
    with locked(run_dir):
        manifest = read(run_dir)
        if change is not None:
            change(manifest)
        manifest.set(**entries)
        write(run_dir, manifest)
    return manifest


class Record:
    """A run's manifest in memory, kept equal to what :meth:`update` last wrote."""

    def __init__(self, run_dir: Path, data: Manifest) -> None:
        self.run_dir, self.data = run_dir, data

    def update(self, **entries: Any) -> None:
        """Set ``entries`` in the manifest on disk (what other commands added to it stays); ``data``
        stays the same object, now equal to what was written."""
        written = update(self.run_dir, **entries)
        self.data.__dict__.update(written.__dict__)


def new(engine: dict[str, Any], gpus: list[str], run_dir: Path, model: str, dataset: dict[str, Any],
        device: dict[str, Any], threads: dict[str, str | None], started: str) -> Manifest:
    """A run's first manifest, ``setting-up``: ``engine`` (its prefix and build manifest,
    ``EngineInfo.record()``), the ``gpus`` visible, ``dataset`` and ``device`` as the caller describes
    them, ``threads`` the thread variables Caffe runs with."""
    return Manifest(name=run_dir.name, status="setting-up", command=" ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
                    model=model, dataset=dataset, device=device,
                    engine=engine, host=_host(gpus),
                    threads=threads, caffetool={"version": caffetool.__version__, "git_commit": _git_commit()},
                    started_at=started)


def now() -> str:
    """A timestamp as manifests hold them: local time with its offset, to the second."""
    return dt.datetime.now(dt.timezone.utc).astimezone().isoformat(timespec="seconds")


def _host(gpus: list[str]) -> dict[str, Any]:
    cpu = None
    try:
        cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                    if line.startswith("model name")), None)
    except OSError:
        pass
    return {"hostname": socket.gethostname(), "platform": platform.platform(), "cpu": cpu,
            "cpus": os.cpu_count(), "gpus": gpus}


def _git_commit() -> str | None:
    root = Path(caffetool.__file__).resolve().parents[1]
    try:
        done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None
