"""A run's final figures, as its manifest's ``final`` entry keeps them.

``final`` holds the last iteration, the last train outputs and each test net's last row (whose
``NumIters`` is the iteration it was measured at), and says which figures Caffe's own tests gave
(``caffe train``) and which a ``caffe test`` at the end measured (:mod:`caffetool.train.final_test`).
Training writes it; the run summary, a resumed run's parser and tracking read it.
"""

from __future__ import annotations

import re
from typing import Any

from caffetool.runs.logparse import ROW_KEYS, Metrics, outputs

BY_TRAIN = "caffe train"
BY_TEST = "caffe test"


def last_figures(m: Metrics) -> dict[str, Any]:
    """A run's last figures, as its manifest's ``final`` holds them: each train output's, and each
    test net's last row (whose ``NumIters`` is the iteration it was measured at)."""
    out: dict[str, Any] = {"iteration": m.iteration, "train_loss": m.train_loss(),
                           "train": {name: m.latest(name, -1) for name in outputs(m.train)}}
    for net, rows in sorted(m.test.items()):
        if rows:
            out[f"test{net}"] = dict(rows[-1])
    return out


def summary(final: dict[str, Any], finished: bool = True) -> list[str]:
    """The run summary's lines for a manifest's ``final``: each test net's figures with the iteration
    they were measured at (``final test:`` for a lone test net, ``last test:`` when the run did not
    finish, ``test #k:`` for several)."""
    nets = sorted((int(key[4:]), row) for key, row in final.items() if re.fullmatch(r"test\d+", key))
    lines = []
    for net, row in nets:
        label = ("final test:" if finished else "last test:") if len(nets) == 1 else f"test #{net}:"
        shown = ", ".join(f"{k} {v:.4f}" for k, v in row.items() if k not in ROW_KEYS and v is not None)
        by = " (caffe test)" if final.get("measured_by", {}).get(f"test{net}") == BY_TEST else ""
        lines.append(f"{label:<11} iteration {row['NumIters']}: {shown}{by}")
    if final.get("not_measured"):
        lines.append(f"{'':<11} not measured at iteration {final['iteration']}: {final['not_measured']}")
    return lines


def restore(metrics: Metrics, final: dict[str, Any]) -> None:
    """Puts back the rows an earlier session of the run measured with ``caffe test`` (its manifest's
    ``final``), which a resumed run's parser cannot find in ``caffe.log``."""
    for key, by in final.get("measured_by", {}).items():
        if by == BY_TEST and isinstance(row := final.get(key), dict) and "NumIters" in row:
            metrics.add_test(int(key.removeprefix("test")), dict(row))
