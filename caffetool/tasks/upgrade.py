"""``caffetool upgrade``: an old Caffe project, script or notebook as an upgraded copy beside it.

The upgrader is imported only when the task runs: its Python 2 parser (fissix) writes its grammar
tables into the user's cache folder as it loads, which no other command, ``--list`` and ``--help``
included, may depend on.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

from invoke import Collection

from caffetool.engine import locate
from caffetool.errors import ConfigError, EngineNotFound
from caffetool.tasks._common import task


@task(default=True, positional=["path"], help={
    "path": "a project folder, a .py script or a .ipynb notebook (read only, never changed)",
    "out": "where the upgraded copy goes (default: beside it, named PATH-upgraded)",
    "report": "also print every change made, not only the places to check"})
def run(c: Any, path: str, out: str | None = None, report: bool = False) -> None:
    """Python 2 to 3 (print, integer division, xrange, dict iteration, string functions, pycaffe's
    renamed helpers) and nets, solvers and weights in Caffe's current format, written as a copy."""
    try:
        engine = locate(c.engine.prefix, probe=False)
    except EngineNotFound:
        engine = None
    upgraded = _upgrader()
    done = upgraded.upgrade(Path(path), Path(out) if out else None, engine)
    for line in done.summary():
        print(line)
    for entry in done.entries:
        if report or not entry.changed:
            print(f"  {entry}")
    if Path(done.target).is_dir():
        print(f"Report: {upgraded.shown(done.target / done.report_name)}")


def _upgrader() -> ModuleType:
    """:mod:`caffetool.upgrade.upgraded`, refused by name where the cache folder its parser writes
    into cannot be written (a read-only home, or ``XDG_CACHE_HOME`` naming a file)."""
    try:
        from caffetool.upgrade import upgraded  # noqa: PLC0415 - fissix writes its cache when loaded
    except OSError as e:
        from appdirs import user_cache_dir  # noqa: PLC0415 - fissix's own rule for where its cache is

        raise ConfigError(f"upgrade keeps its Python 2 parser's grammar tables in {user_cache_dir('fissix')}, "
                          f"which cannot be written ({e.strerror or e}): set XDG_CACHE_HOME to a writable folder, "
                          "e.g. XDG_CACHE_HOME=/tmp/cache caffetool upgrade PATH") from None
    return upgraded


ns = Collection("upgrade", run)
