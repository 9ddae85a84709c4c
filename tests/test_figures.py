"""Figures are written whole or not at all, and closed either way."""

from __future__ import annotations

import pytest

from caffetool.errors import RunError
from caffetool.figures import plt, save_figure

from .smalldisk import small_disk


def figure():
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100, layout="tight")
    ax.plot(range(1000), [x * x for x in range(1000)])
    return fig


def test_a_figure_is_saved_as_png_and_closed(tmp_path):
    out = save_figure(figure(), tmp_path / "plots" / "loss.png", RunError, bbox_inches="tight")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in out.parent.iterdir()) == ["loss.png"]
    assert plt.get_fignums() == []


def test_a_full_disk_keeps_the_old_image_and_closes_the_figure(tmp_path):
    with small_disk(tmp_path / "disk", "8k") as disk:
        out = disk / "loss.png"
        out.write_bytes(b"old")
        with pytest.raises(RunError, match=rf"^cannot write {out}: No space left on device$"):
            save_figure(figure(), out, RunError)
        assert out.read_bytes() == b"old"
        assert [p.name for p in disk.iterdir()] == ["loss.png"]
    assert plt.get_fignums() == []
