"""``train.report``: runs side by side — devices, iterations, wall time, speed, final test figures, speed-up.

This is the CPU-versus-GPU comparison of the 4 × M40 MNIST walkthrough, made for any runs: the
first run is the baseline of the speed-up column. The test columns are whatever the runs' test
nets output at their final iteration (``test accuracy``, ``test loss`` for a classifier with one
test net; ``test #1 l2_error`` and the like for several), with the iteration they were measured
at. The table is printed, and written as Markdown and as a PNG.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from caffetool.errors import RunError
from caffetool.figures import plt, save_figure
from caffetool.fsio import write_atomic
from caffetool.runs.logparse import ROW_KEYS
from caffetool.runs.runrecord import Manifest

FIRST = ("run", "device(s)", "iterations", "wall time", "iter/s")
LAST = ("tested at", "speed-up")
TEST_KEY = re.compile(r"test(\d+)")


@dataclass
class Table:
    columns: list[str]
    cells: list[list[str]]


def row(manifest: Manifest) -> dict:
    t = manifest.timings_s
    wall = t.get("solving") or t.get("total") or 0.0
    iters = manifest.iterations or 0
    final = manifest.final
    tests = {int(m.group(1)): r for key, r in final.items() if (m := TEST_KEY.fullmatch(key))}
    return {"run": manifest.name, "device(s)": manifest.device.get("label", "?"),
            "iterations": iters, "wall_s": wall, "iter_per_s": iters / wall if wall else 0.0,
            "tests": tests, "status": manifest.status}


def _test_columns(rows: list[dict]) -> list[tuple[int, str]]:
    """(net, output) for every test output any run has, in the order the runs show them."""
    return list(dict.fromkeys((net, k) for r in rows for net, test in sorted(r["tests"].items())
                              for k in test if k not in ROW_KEYS))


def table(manifests: list[Manifest]) -> Table:
    rows = [row(m) for m in manifests]
    tested = _test_columns(rows)
    several = len({net for net, _ in tested}) > 1
    columns = [*FIRST, *(f"test #{net} {k}" if several else f"test {k}" for net, k in tested), *LAST]
    base = rows[0]["wall_s"] / rows[0]["iterations"] if rows and rows[0]["iterations"] else None
    cells = []
    for r in rows:
        per_iter = r["wall_s"] / r["iterations"] if r["iterations"] else None
        figures = [r["tests"].get(net, {}).get(k) for net, k in tested]
        at = sorted({test["NumIters"] for test in r["tests"].values() if "NumIters" in test})
        cells.append([
            r["run"] + ("" if r["status"] == "finished" else f" ({r['status']})"), r["device(s)"],
            f"{r['iterations']:,}", _duration(r["wall_s"]), f"{r['iter_per_s']:.1f}",
            *("—" if v is None else f"{v:.4f}" for v in figures),
            ", ".join(f"{i:,}" for i in at) or "—", f"{base / per_iter:.2f}x" if base and per_iter else "—",
        ])
    return Table(columns, cells)


def _duration(seconds: float) -> str:
    minutes, sec = divmod(seconds, 60)
    return f"{int(minutes)} min {sec:04.1f} s" if minutes else f"{sec:.1f} s"


def text(t: Table) -> str:
    widths = [max(len(c), *(len(r[i]) for r in t.cells)) for i, c in enumerate(t.columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(t.columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in t.cells]
    return "\n".join(lines)


def markdown(t: Table) -> str:
    lines = ["| " + " | ".join(t.columns) + " |", "|" + "---|" * len(t.columns)]
    lines += ["| " + " | ".join(r) + " |" for r in t.cells]
    return "\n".join(lines) + "\n"


def write(t: Table, out_dir: Path, stem: str) -> tuple[Path, Path]:
    md = out_dir / f"{stem}.md"
    write_atomic(md, markdown(t), RunError)
    fig, ax = plt.subplots(figsize=(min(16, 2 + 1.6 * len(t.columns)), 0.6 + 0.45 * (len(t.cells) + 1)), dpi=100)
    ax.axis("off")
    drawn = ax.table(cellText=t.cells, colLabels=t.columns, loc="center", cellLoc="left")
    drawn.auto_set_font_size(False)
    drawn.set_fontsize(9)
    drawn.auto_set_column_width(list(range(len(t.columns))))
    png = save_figure(fig, out_dir / f"{stem}.png", RunError, bbox_inches="tight")
    return md, png
