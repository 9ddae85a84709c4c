"""Writing parsed metrics as CSV and JSON, kept apart from the parser, and reading them back.

Reading gives the rows as the writer had them (a non-finite value, written as null or ``nan``, is
left out of its row); of the rest of the metrics only what the JSON holds comes back.
"""

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


def read_json(path: Path) -> Metrics:
    """The metrics :func:`write_json` wrote to ``path``."""
    try:
        data = json.loads(path.read_text())
        return Metrics(net_name=data.get("net"), train=[_row(r) for r in data.get("train", [])],
                       test={int(net): [_row(r) for r in rows] for net, rows in data.get("test", {}).items()},
                       done=bool(data.get("done")), fatal=data.get("fatal"), diverged_at=data.get("diverged_at"),
                       snapshots=list(data.get("snapshots") or []), resumed_from=list(data.get("resumed_from") or []))
    except (OSError, ValueError, TypeError, AttributeError, KeyError) as e:
        raise RunError(f"{path} is not readable metrics ({getattr(e, 'strerror', None) or e})") from None


def read_csv(path: Path) -> Metrics:
    """The rows :func:`write_csv` wrote to ``path``."""
    metrics = Metrics()
    try:
        with open(path, newline="") as f:
            for line in csv.DictReader(f):
                row = _row({k: v for k, v in line.items() if k not in ("phase", "net")})
                if line.get("phase") == "test":
                    metrics.test.setdefault(int(line["net"]), []).append(row)
                elif line.get("phase") == "train":
                    metrics.train.append(row)
    except (OSError, ValueError, TypeError, KeyError, csv.Error) as e:
        raise RunError(f"{path} is not readable metrics ({getattr(e, 'strerror', None) or e})") from None
    return metrics


def _row(raw: dict[str, Any]) -> dict[str, Any]:
    """A row as the parser makes it: ``NumIters`` an int, the rest numbers; empty and non-finite values left out."""
    row: dict[str, Any] = {}
    for key, value in raw.items():
        if value is None or value == "" or key is None:
            continue
        number = float(value)
        if key == "NumIters":
            row[key] = int(number)
        elif math.isfinite(number):
            row[key] = number
    return row
