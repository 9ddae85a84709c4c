"""Training curves as PNG (matplotlib, headless): every net output against iterations and against
seconds, and the learning rate against iterations.

Whatever the nets output is drawn: each train output and each output of each test net, losses
on the left axis and accuracies (an output named like ``accuracy`` or ``top-5``) on a 0–1 right
axis, which is left out when no net has one (an autoencoder). A train net that logs no outputs
is drawn by the iteration line's loss.
"""

from __future__ import annotations

import re
from pathlib import Path

from caffetool.errors import RunError
from caffetool.figures import plt, save_figure
from caffetool.runs.logparse import Metrics, outputs

FILES = ("loss_accuracy_vs_iters.png", "loss_accuracy_vs_seconds.png", "lr_vs_iters.png")
ACCURACY = re.compile(r"acc|top[-_]?\d", re.IGNORECASE)


def _series(rows: list[dict], x: str, y: str) -> tuple[list[float], list[float]]:
    pairs = [(r[x], r[y]) for r in rows if r.get(y) is not None and r.get(x) is not None]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def curves(metrics: Metrics) -> list[tuple[str, list[dict], str, str]]:
    """Each curve to draw: its label, its rows, the key it draws, and how (a line, or points for tests)."""
    train = outputs(metrics.train) or ["smoothed_loss"]
    out = [(f"train {'loss' if name == 'smoothed_loss' else name}", metrics.train, name, "-") for name in train]
    for net, rows in sorted(metrics.test.items()):
        out += [(f"test #{net} {name}", rows, name, "o-") for name in outputs(rows)]
    return out


def _loss_accuracy(metrics: Metrics, x: str, xlabel: str, title: str, out: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100, layout="tight")
    drawn = curves(metrics)
    accuracy = ax.twinx() if any(ACCURACY.search(name) for _, _, name, _ in drawn) else None
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, rows, name, style) in enumerate(drawn):
        axis = accuracy if accuracy is not None and ACCURACY.search(name) else ax
        axis.plot(*_series(rows, x, name), style, color=colors[i % len(colors)], lw=1, ms=3, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("loss")
    ax.grid(alpha=0.3)
    lines = ax.get_legend_handles_labels()[0]
    if accuracy is not None:
        accuracy.set_ylabel("accuracy")
        accuracy.set_ylim(0, 1)
        lines += accuracy.get_legend_handles_labels()[0]
    ax.legend(lines, [line.get_label() for line in lines], loc="center right", fontsize=8)
    ax.set_title(title)
    save_figure(fig, out, RunError)


def write_plots(metrics: Metrics, folder: Path, title: str) -> list[Path]:
    paths = [folder / name for name in FILES]
    _loss_accuracy(metrics, "NumIters", "iterations", title, paths[0])
    _loss_accuracy(metrics, "Seconds", "seconds", title, paths[1])
    fig, ax = plt.subplots(figsize=(8, 3), dpi=100, layout="tight")
    ax.plot(*_series(metrics.train, "NumIters", "LearningRate"), color="tab:purple")
    ax.set_xlabel("iterations")
    ax.set_ylabel("learning rate")
    ax.grid(alpha=0.3)
    ax.set_title(title)
    save_figure(fig, paths[2], RunError)
    return paths
