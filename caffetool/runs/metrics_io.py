"""Writing parsed metrics as CSV and JSON, kept apart from the parser."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from caffetool.errors import RunError
from caffetool.fsio import atomic_file, write_atomic
from caffetool.runs.logparse import Metrics

FIRST = ["phase", "net", "NumIters", "Seconds", "LearningRate"]


def rows(metrics: Metrics) -> list[dict]:
    out = [{"phase": "train", "net": "", **row} for row in metrics.train]
    for net, test_rows in sorted(metrics.test.items()):
        out += [{"phase": "test", "net": net, **row} for row in test_rows]
    return out


def write_csv(metrics: Metrics, path: Path) -> Path:
    table = rows(metrics)
    extra = sorted({k for row in table for k in row} - set(FIRST))
    with atomic_file(path, RunError) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIRST + extra)
        writer.writeheader()
        writer.writerows(table)
    return path


def as_json(metrics: Metrics) -> dict:
    return {
        "net": metrics.net_name,
        "train": metrics.train,
        "test": {str(net): r for net, r in sorted(metrics.test.items())},
        "done": metrics.done,
        "fatal": metrics.fatal,
        "diverged_at": metrics.diverged_at,
        "snapshots": metrics.snapshots,
        "resumed_from": metrics.resumed_from,
    }


def _finite(value: Any) -> Any:
    """NaN and infinities are not JSON: a diverged loss is written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def write_json(metrics: Metrics, path: Path) -> Path:
    write_atomic(path, json.dumps(_finite(as_json(metrics)), indent=1, allow_nan=False) + "\n", RunError)
    return path
