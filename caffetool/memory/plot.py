"""A stacked bar chart of memory per layer (PNG)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from caffetool.errors import ConfigError
from caffetool.figures import plt, save_figure

if TYPE_CHECKING:
    from caffetool.memory.estimator import Estimate

PARTS = (("param_bytes", "weights"), ("grad_bytes", "weight gradients"), ("history_bytes", "solver history"),
         ("data_bytes", "activations"), ("diff_bytes", "activation gradients"), ("scratch_bytes", "scratch"))


def plot_layers(e: Estimate, out: str | Path, title: str) -> Path:
    """Bars per layer with memory of nonzero size; a ``--plot`` path that cannot be written is refused."""
    rows = [r for r in e.rows if r.total]
    fig, ax = plt.subplots(figsize=(max(8, 0.35 * len(rows)), 5), dpi=100, layout="tight")
    bottom = [0.0] * len(rows)
    for attr, label in PARTS:
        values = [getattr(r, attr) / 2**20 for r in rows]
        ax.bar(range(len(rows)), values, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_xticks(range(len(rows)), [r.layer for r in rows], rotation=75, fontsize=7)
    ax.set_ylabel("MiB")
    ax.set_title(f"{title}: {e.total / 2**20:,.0f} MiB in all")
    ax.legend(fontsize=8)
    return save_figure(fig, Path(out), ConfigError)
