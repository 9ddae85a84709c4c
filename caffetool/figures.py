"""Headless matplotlib figures, saved as PNG files that are either complete or absent.

Importing this module selects matplotlib's Agg backend, so figures are drawn without a display
(CI, SSH, Docker); import it before anything imports ``matplotlib.pyplot``. Figures should be
made with ``layout="tight"``: :func:`save_figure` saves them as they are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend must be chosen first
from matplotlib.figure import Figure  # noqa: E402

from caffetool.fsio import atomic_file  # noqa: E402

__all__ = ["plt", "save_figure"]


def save_figure(fig: Figure, out: Path, error: type[Exception] | None = None, **savefig: Any) -> Path:
    """Write ``fig`` to ``out`` in one rename and close it (pyplot keeps every open figure alive).

    ``error`` names the failure to write, as in :func:`caffetool.fsio.write_atomic`; ``savefig``
    passes options such as ``bbox_inches`` on to matplotlib.
    """
    out = Path(out)
    try:
        with atomic_file(out, error) as tmp:
            fig.savefig(tmp, **savefig)
    finally:
        plt.close(fig)
    return out
