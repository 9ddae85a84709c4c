"""A sweep's record: its plan and its results, in ``sweep.json`` and ``results.csv``, written here alone.

``sweep.json`` holds the :class:`Plan` (everything :mod:`caffetool.sweep.launch` needs to start or
resume the sweep), the sweep's status and timings, Tune's view of each trial, and once the trials
are read (:mod:`caffetool.sweep.leaderboard`) one result per trial and the best; ``results.csv``
holds those results as a table. Every write replaces the file whole (:func:`caffetool.fsio.write_atomic`),
merging into what the file already holds.
"""

from __future__ import annotations

import csv
import json
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from caffetool import fsio
from caffetool.errors import RunError
from caffetool.runs import rundir

PLAN = "sweep.json"
RESULTS = "results.csv"
PLOTS = "plots"  # every trial's metric against iterations, the best trials' curves
TUNE_DIR = "tune"  # Ray Tune's own state (for sweep.resume)
_WRITING = threading.Lock()
FIXED_COLUMNS = ("metric", "metric_iteration", "iterations", "wall_s", "status", "search", "host", "node")


@dataclass
class Plan:
    """What a sweep is: everything :func:`caffetool.sweep.launch.start` and ``resume`` need, as ``sweep.json`` holds it."""

    name: str
    params: list[str]
    metric: str = "test/accuracy"
    mode: str = "max"
    scheduler: str = "fifo"
    grace: int | None = None
    search: str = ""  # grid, random or optuna (caffetool.sweep.search); "" until checked
    seed: int | None = None
    samples: int = 1
    max_concurrent: int | None = None
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    address: str | None = None
    model: str = "lenet"
    dataset: str = "fashion-mnist"
    data_dir: str | None = None
    models_dir: str | None = None
    solver: str | None = None
    cwd: str = field(default_factory=lambda: str(Path.cwd()))
    fixed: dict[str, Any] = field(default_factory=dict)
    engine_prefix: str | None = None
    tracking_uri: str | None = None  # None: the runs folder's MLflow database; "off": none (caffetool.track)
    experiment: str | None = None
    max_iter: int = 0  # settled from the flags: ASHA's max_t



def update(sweep_dir: Path, plan: Plan | None = None, **fields: Any) -> dict[str, Any]:
    """Merge ``plan`` and ``fields`` into ``sweep.json`` (made when missing); the record written. One
    thread at a time (the sweep's MLflow thread writes too), so no merge loses another's fields."""
    with _WRITING:
        previous = _read(sweep_dir) if (sweep_dir / PLAN).is_file() else {}
        data = {**previous, **({"plan": asdict(plan)} if plan is not None else {}), **fields}
        fsio.write_atomic(sweep_dir / PLAN, json.dumps(data, indent=2, default=str) + "\n", RunError)
    return data


def write_results(sweep_dir: Path, rows: list[dict[str, Any]], names: list[str], metric: str) -> None:
    """``results.csv`` (one row per trial: its parameters ``names``, the metric and the rest) and the
    same rows, without their curves, with the best trial's name, in ``sweep.json``."""
    with fsio.atomic_file(sweep_dir / RESULTS, RunError) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["trial", *names, metric, *FIXED_COLUMNS[1:], "message"])
        for r in rows:
            writer.writerow([r["trial"], *(r["params"].get(n) for n in names), *(r[c] for c in FIXED_COLUMNS),
                             (r["message"] or "").splitlines()[0] if r["message"] else ""])
    best = next((r["trial"] for r in rows if r["metric"] is not None), None)
    update(sweep_dir, results=[{k: v for k, v in r.items() if k != "curve"} for r in rows], best=best)


def _read(sweep_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((sweep_dir / PLAN).read_text())
    except (OSError, ValueError) as e:
        raise RunError(f"{sweep_dir / PLAN} is unreadable ({e}); is {sweep_dir} a sweep?") from None
    if not isinstance(data, dict) or not isinstance(data.get("plan"), dict):
        raise RunError(f"{sweep_dir / PLAN} is not a sweep's record")
    return data


def read_plan(sweep_dir: Path) -> Plan:
    known = set(Plan.__dataclass_fields__)
    return Plan(**{k: v for k, v in _read(sweep_dir)["plan"].items() if k in known})


def read_record(sweep_dir: Path) -> dict[str, Any]:
    """``sweep.json`` as written: the plan, the sweep's status and Tune's view of each trial."""
    return _read(sweep_dir)


def find(runs_dir: Path, name: str) -> Path:
    """A sweep by name (under ``runs_dir``) or by path."""
    return rundir.find_record(runs_dir, name, PLAN, "sweep", "a sweep's folder is made by `caffetool sweep`")
