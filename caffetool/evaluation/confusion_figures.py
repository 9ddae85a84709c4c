"""The evaluation's pictures (matplotlib, headless): the confusion matrix as two labelled heat maps,
counts and row-normalised side by side, and the most confident mistakes as a contact sheet.

Limits: cells are numbered up to :data:`NUMBERED` classes and ticks named up to :data:`NAMED`; past
that (ImageNet's 1000) the maps are drawn without them, still readable as a pattern.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from caffetool.errors import RunError
from caffetool.figures import plt, save_figure

NUMBERED = 20
NAMED = 60
SHEET_COLUMNS = 8


def confusion_png(matrix: np.ndarray, names: list[str], out: Path, title: str) -> Path:
    k = len(names)
    rows = matrix.sum(axis=1, keepdims=True)
    normalised = np.divide(matrix, rows, out=np.zeros(matrix.shape), where=rows > 0)
    side = min(max(4.5, 0.45 * k + 2), 24)
    fig, axes = plt.subplots(1, 2, figsize=(2 * side + 1, side), dpi=100, layout="tight")
    panels = ((axes[0], matrix, "counts", "d"), (axes[1], normalised, "share of the true class", ".2f"))
    for ax, values, what, fmt in panels:
        image = ax.imshow(values, cmap="Blues", interpolation="nearest")
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
        ax.set_title(f"{title}: {what}", fontsize=10)
        ax.set_xlabel("predicted")
        ax.set_ylabel("true")
        if k <= NAMED:
            ax.set_xticks(range(k), names, rotation=60, ha="right", fontsize=8)
            ax.set_yticks(range(k), names, fontsize=8)
        if k <= NUMBERED:
            high = values.max() / 2 if values.size else 0
            for (t, p), v in np.ndenumerate(values):
                if v:
                    ax.text(p, t, format(v, fmt), ha="center", va="center", fontsize=7,
                            color="white" if v > high else "black")
    return save_figure(fig, out, RunError)


def contact_sheet_png(images: list[np.ndarray], captions: list[str], out: Path, title: str) -> Path:
    """``images`` (H, W, C uint8; OpenCV's BGR order for colour) in a grid, each captioned."""
    n = max(len(images), 1)
    columns = min(SHEET_COLUMNS, n)
    rows = math.ceil(n / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(1.6 * columns, 1.9 * rows + 0.4), dpi=100,
                             layout="tight", squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, image, caption in zip(axes.flat, images, captions):
        if image.shape[2] == 1:
            ax.imshow(image[:, :, 0], cmap="gray", vmin=0, vmax=255, interpolation="nearest")
        else:
            ax.imshow(image[:, :, 2::-1], interpolation="nearest")
        ax.set_title(caption, fontsize=7)
    if not images:
        axes.flat[0].text(0.5, 0.5, "no mistakes", ha="center", va="center")
    fig.suptitle(title, fontsize=10)
    return save_figure(fig, out, RunError)
