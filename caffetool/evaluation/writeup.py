"""An evaluation's folder, its record in the run's manifest, and its one-screen summary.

The folder (``confusion.csv``, ``confusion.png``, ``per_class.csv``, ``predictions.csv``,
``mistakes.png``, ``summary.json``) is built in a staging sibling and renamed into place whole, so an
evaluation of the same weights run again replaces the old one at once, and an interrupted one leaves
the old one as it was.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from caffetool.errors import RunError
from caffetool.evaluation import confusion_figures, metrics
from caffetool.fsio import staged_dir
from caffetool.runs import runrecord
from caffetool.runs.folder import EVALUATION_SUMMARY, RunFolder

SUMMARY = EVALUATION_SUMMARY
FILES = ("confusion.csv", "confusion.png", "per_class.csv", "predictions.csv", "mistakes.png", SUMMARY)
MISTAKES = 32
CONFUSED, WORST = 5, 3


@dataclass
class Report:
    summary: dict[str, Any]  # summary.json
    matrix: np.ndarray
    predictions: list[Sequence[Any]]  # rows, header first
    mistakes: list[tuple[np.ndarray, str]] = field(default_factory=list)  # (image, caption)
    title: str = ""


def summary(results: metrics.Results, names: list[str], **fields: Any) -> dict[str, Any]:
    """summary.json's content: the figures of ``results`` and whatever ``fields`` add (weights, split, ...)."""
    return {**fields, "count": results.count, "top1": results.accuracy(results.right1),
            "topk": results.accuracy(results.rightk), "k": results.k, "classes": names,
            "per_class": metrics.per_class(results.confusion(), names)}


def write(report: Report, final: Path) -> Path:
    """Write the evaluation's folder at ``final`` (replacing one there) in one rename."""
    names = report.summary["classes"]
    with staged_dir(final, RunError) as folder:
        table = [["true \\ predicted", *names]] + [[name, *map(int, row)] for name, row in zip(names, report.matrix)]
        (folder / "confusion.csv").write_text(csv_text(table))
        keys = ("class", "precision", "recall", "f1", "support")
        (folder / "per_class.csv").write_text(csv_text([keys] + [[r[k] for k in keys]
                                                                for r in report.summary["per_class"]]))
        (folder / "predictions.csv").write_text(csv_text(report.predictions))
        confusion_figures.confusion_png(report.matrix, names, folder / "confusion.png", report.title)
        images = [image for image, _ in report.mistakes]
        confusion_figures.contact_sheet_png(images, [caption for _, caption in report.mistakes], folder / "mistakes.png",
                                  f"{report.title}: the most confident mistakes (true / predicted)")
        (folder / SUMMARY).write_text(json.dumps(report.summary, indent=2) + "\n")
    return final


def csv_text(rows: Sequence[Sequence[Any]]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


def record(run_dir: Path, summary: dict[str, Any], folder: Path) -> runrecord.Manifest:
    """Put the evaluation (its summary less the per-class table) in the run's manifest's ``evaluations``,
    in place of an earlier one of the same folder."""
    entry = {k: v for k, v in summary.items() if k != "per_class"} | {"dir": str(folder)}

    def add(manifest: runrecord.Manifest) -> None:
        manifest.evaluations = [e for e in manifest.evaluations
                                   if isinstance(e, dict) and e.get("dir") != str(folder)] + [entry]

    return runrecord.update(run_dir, add)


def newest(run_dir: Path) -> Path | None:
    """The run's most recent evaluation folder: the one whose summary.json is newest."""
    found = [(p.stat().st_mtime, p.parent) for p in RunFolder(run_dir).evaluation_summaries()]
    return max(found)[1] if found else None


def lines(summary: dict[str, Any], matrix: np.ndarray, folder: Path, what: str) -> list[str]:
    """The one-screen summary of an evaluation of ``summary['count']`` ``what``."""
    names = summary["classes"]
    out = [f"evaluated:  {summary['count']} {what}"
           + (f", {summary['seconds']:.1f} s" if "seconds" in summary else "")]
    out.append(f"top-1:      {summary['top1']:.4f}" + _caffe_test(summary.get("caffe_test")))
    out.append(f"{'top-%d:' % summary['k']:<12}{summary['topk']:.4f}")
    confused = metrics.most_confused(matrix, CONFUSED)
    out.append("confused:   " + ("none" if not confused else f"{names[confused[0][0]]} as {names[confused[0][1]]}: "
                                 f"{confused[0][2]}"))
    out += [f"            {names[t]} as {names[p]}: {n}" for t, p, n in confused[1:]]
    worst = metrics.worst_by_f1(summary["per_class"], WORST)
    out.append("worst F1:   " + ", ".join(f"{r['class']} {r['f1']:.3f}" for r in worst))
    out.append(f"written:    {folder}")
    return out


def _caffe_test(measured: dict | None) -> str:
    if not measured:
        return ""
    if measured.get("accuracy") is None:
        return f"  (caffe test: {measured.get('not_measured', 'no accuracy output')})"
    same = "the same" if measured.get("equal") else "DIFFERENT"
    return (f"  (caffe test: {measured['accuracy']:g} over {measured['iterations']} x {measured['batch_size']}, "
            f"{same})")
