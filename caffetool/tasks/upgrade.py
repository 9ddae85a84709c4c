"""``caffetool upgrade``: an old Caffe project, script or notebook as an upgraded copy beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from invoke import Collection

from caffetool.engine import locate
from caffetool.errors import EngineNotFound
from caffetool.tasks._common import task
from caffetool.upgrade import upgraded


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
    done = upgraded.upgrade(Path(path), Path(out) if out else None, engine)
    for line in done.summary():
        print(line)
    for entry in done.entries:
        if report or not entry.changed:
            print(f"  {entry}")
    if Path(done.target).is_dir():
        print(f"Report: {done.target / upgraded.REPORT}")


ns = Collection("upgrade", run)
