"""Training curves as PNG (matplotlib, headless): loss and test accuracy against iterations and
against seconds, and the learning rate against iterations."""

from __future__ import annotations

from pathlib import Path

from caffetool.errors import RunError
from caffetool.figures import plt, save_figure
from caffetool.train.logparse import Metrics

FILES = ("loss_accuracy_vs_iters.png", "loss_accuracy_vs_seconds.png", "lr_vs_iters.png")


def _series(rows: list[dict], x: str, y: str) -> tuple[list[float], list[float]]:
    pairs = [(r[x], r[y]) for r in rows if r.get(y) is not None and r.get(x) is not None]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _loss_accuracy(metrics: Metrics, x: str, xlabel: str, title: str, out: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100, layout="tight")
    ax.plot(*_series(metrics.train, x, "loss"), color="tab:blue", lw=1, label="train loss")
    for net, rows in sorted(metrics.test.items()):
        ax.plot(*_series(rows, x, "loss"), "o-", color="tab:orange", ms=3, label=f"test #{net} loss")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("loss")
    ax.grid(alpha=0.3)
    acc = ax.twinx()
    for net, rows in sorted(metrics.test.items()):
        acc.plot(*_series(rows, x, "accuracy"), "s-", color="tab:green", ms=3, label=f"test #{net} accuracy")
    acc.set_ylabel("accuracy")
    acc.set_ylim(0, 1)
    lines = ax.get_legend_handles_labels()[0] + acc.get_legend_handles_labels()[0]
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
