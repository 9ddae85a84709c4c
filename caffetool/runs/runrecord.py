"""A run's manifest (``manifest.json``): made in one place, and read and written through one door.

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
from pathlib import Path
from typing import Any

import caffetool
from caffetool.engine import EngineInfo
from caffetool.errors import RunError
from caffetool.fsio import write_atomic
from caffetool.runs import rundir
from caffetool.runs.folder import RunFolder


def read(run_dir: Path) -> dict:
    try:
        manifest = json.loads(RunFolder(run_dir).manifest.read_text())
    except (OSError, ValueError) as e:
        raise RunError(f"{RunFolder(run_dir).manifest} is unreadable ({e})") from e
    if not isinstance(manifest, dict):
        raise RunError(f"{RunFolder(run_dir).manifest} is not a run manifest (a JSON object)")
    return manifest


def find(runs_dir: Path, run: str) -> Path:
    """A run by name or path (:func:`caffetool.runs.rundir.find`) whose manifest reads: a damaged
    record is refused before a command writes anything into the run."""
    run_dir = rundir.find(runs_dir, run)
    read(run_dir)
    return run_dir


def write(run_dir: Path, manifest: dict) -> None:
    write_atomic(RunFolder(run_dir).manifest, json.dumps(manifest, indent=2, default=str) + "\n", RunError)


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


def update(run_dir: Path, change: Callable[[dict], None] | None = None, **fields: Any) -> dict:
    """The manifest as it is on disk now, changed by ``change`` and then ``fields``, written back, all
    under the run's lock; the manifest written."""
    with locked(run_dir):
        manifest = read(run_dir)
        if change is not None:
            change(manifest)
        manifest.update(fields)
        write(run_dir, manifest)
    return manifest


class Record:
    """A run's manifest in memory, kept equal to what :meth:`update` last wrote."""

    def __init__(self, run_dir: Path, data: dict) -> None:
        self.run_dir, self.data = run_dir, data

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def update(self, **fields: Any) -> None:
        """Set ``fields`` in the manifest on disk (what other commands added to it stays)."""
        written = update(self.run_dir, **fields)
        self.data.clear()
        self.data.update(written)


def new(engine: EngineInfo, run_dir: Path, model: str, dataset: dict[str, Any], device: dict[str, Any],
        threads: dict[str, str | None], started: str) -> dict[str, Any]:
    """A run's first manifest, ``setting-up``: ``dataset`` and ``device`` as the caller describes
    them, ``threads`` the thread variables Caffe runs with."""
    return {
        "name": run_dir.name,
        "status": "setting-up",
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "model": model,
        "dataset": dataset,
        "device": device,
        "engine": {"prefix": str(engine.prefix), "manifest": engine.manifest},
        "host": _host(engine),
        "threads": threads,
        "caffetool": {"version": caffetool.__version__, "git_commit": _git_commit()},
        "started_at": started,
    }


def now() -> str:
    """A timestamp as manifests hold them: local time with its offset, to the second."""
    return dt.datetime.now(dt.timezone.utc).astimezone().isoformat(timespec="seconds")


def _host(engine: EngineInfo) -> dict[str, Any]:
    cpu = None
    try:
        cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                    if line.startswith("model name")), None)
    except OSError:
        pass
    return {"hostname": socket.gethostname(), "platform": platform.platform(), "cpu": cpu,
            "cpus": os.cpu_count(), "gpus": engine.gpus}


def _git_commit() -> str | None:
    root = Path(caffetool.__file__).resolve().parents[1]
    try:
        done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None
