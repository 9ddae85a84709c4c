"""Run directories: one per run, claimed atomically, never shared and never overwritten.

``runs/<name-or-timestamp>/`` is created with a plain ``mkdir`` (which fails if it exists) before
anything is written, so two runs started at once cannot end up in one directory. A run whose
setup fails before Caffe starts is removed again; once Caffe has started, nothing is deleted.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
from pathlib import Path

from caffetool.errors import ConfigError

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
MANIFEST = "manifest.json"


def claim(runs_dir: Path, name: str | None) -> Path:
    runs_dir.mkdir(parents=True, exist_ok=True)
    if name:
        if not NAME.match(name):
            raise ConfigError(f"--name {name!r} must be letters, digits, '.', '_' or '-' (no slashes)")
        path = runs_dir / name
        try:
            path.mkdir()
        except FileExistsError:
            raise ConfigError(f"run {path} already exists; choose another --name "
                              f"(or `invoke train.resume {name}` to continue it)") from None
        return path
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    for n in range(1, 1000):
        path = runs_dir / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise ConfigError(f"could not find a free run name under {runs_dir}")


def release(path: Path) -> None:
    """Remove a run whose setup failed (Caffe never started in it)."""
    shutil.rmtree(path, ignore_errors=True)


def find(runs_dir: Path, run: str) -> Path:
    """A run by name (under ``runs_dir``) or by path."""
    for candidate in (Path(run), runs_dir / run):
        if (candidate / MANIFEST).is_file():
            return candidate.absolute()
    raise ConfigError(f"no run {run!r} (looked for {runs_dir / run}/{MANIFEST}); `ls {runs_dir}` lists the runs")


def read_manifest(path: Path) -> dict:
    try:
        return json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path / MANIFEST} is unreadable ({e})") from e


def write_manifest(path: Path, manifest: dict) -> None:
    tmp = path / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=2, default=str) + "\n")
    os.replace(tmp, path / MANIFEST)
