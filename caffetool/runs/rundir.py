"""Run directories: one per run, claimed atomically, never shared and never overwritten.

``runs/<name-or-timestamp>/`` is created with a plain ``mkdir`` (which fails if it exists) before
anything is written, so two runs started at once cannot end up in one directory. A run whose
setup fails before Caffe starts is removed again; once Caffe has started, nothing is deleted.
"""

from __future__ import annotations

import datetime as dt
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from caffetool.errors import ConfigError, RunError
from caffetool.runs.folder import NAMES

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def claim(runs_dir: Path, name: str | None) -> Path:
    """A new, empty run directory: ``runs_dir/name``, or a free timestamp name without ``name``."""
    try:
        runs_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunError(f"cannot create the runs directory {runs_dir} ({e.strerror}); "
                       "choose another with --runs-dir or runs.dir") from e
    if name:
        if not NAME.match(name):
            raise ConfigError(f"--name {name!r} must be letters, digits, '.', '_' or '-' (no slashes)")
        path = runs_dir / name
        if not _new_dir(path):
            raise ConfigError(f"run {path} already exists; choose another --name "
                              f"(or `caffetool train.resume {name}` to continue it)")
        return path
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    for n in range(1, 1000):
        path = runs_dir / (stamp if n == 1 else f"{stamp}-{n}")
        if _new_dir(path):
            return path
    raise RunError(f"could not find a free run name under {runs_dir}")


def _new_dir(path: Path) -> bool:
    """Create ``path``; False when it exists already (``mkdir`` is the atomic claim)."""
    try:
        path.mkdir()
    except FileExistsError:
        return False
    except OSError as e:
        raise RunError(f"cannot create run {path} ({e.strerror})") from e
    return True


def release(path: Path) -> None:
    """Remove a run whose setup failed (Caffe never started in it)."""
    shutil.rmtree(path, ignore_errors=True)


@contextmanager
def released_on_failure(path: Path) -> Iterator[Path]:
    """Remove the run at ``path`` if the block fails (Ctrl-C included): setup that never got Caffe
    started leaves no run behind to be mistaken for one."""
    try:
        yield path
    except BaseException:
        release(path)
        raise


def folder_of(runs_dir: Path, run: str) -> Path:
    """A run by name (under ``runs_dir``) or by path; a folder without a manifest is named as such."""
    return find_record(runs_dir, run, NAMES["manifest"], "run", f"a run's folder is made by `caffetool train`, and "
                       f"`ls {runs_dir}` lists the runs", f"; `ls {runs_dir}` lists the runs")


def find_record(runs_dir: Path, name: str, record: str, what: str, made_by: str, hint: str = "") -> Path:
    """The folder ``name`` (a path, or a name under ``runs_dir``) holding ``record``: a run's or a
    sweep's. A folder without it is named as such (``made_by`` says what makes one); ``hint`` ends the
    message when nothing is there."""
    candidates = (Path(name), runs_dir / name)
    for candidate in candidates:
        if (candidate / record).is_file():
            return candidate.absolute()
    for candidate in candidates:
        if candidate.is_dir():
            raise RunError(f"{candidate} has no {record}, so it is no caffetool {what} (or its record was deleted); "
                           f"{made_by}")
    looked = [Path(name)] if Path(name).is_absolute() or "/" in name else [runs_dir / name]
    raise RunError(f"no {what} {name!r} (looked for {' and '.join(f'{c}/{record}' for c in looked)}){hint}")
