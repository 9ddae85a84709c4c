"""``train.report``: runs side by side — devices, iterations, wall time, speed, accuracy, speed-up.

This is the CPU-versus-GPU comparison of the 4 × M40 MNIST walkthrough, made for any runs: the
first run is the baseline of the speed-up column. The table is printed, and written as Markdown
and as a PNG.
"""

from __future__ import annotations

from pathlib import Path

from caffetool.errors import RunError
from caffetool.figures import plt, save_figure
from caffetool.fsio import write_atomic

COLUMNS = ("run", "device(s)", "iterations", "wall time", "iter/s", "test accuracy", "test loss", "speed-up")


def row(manifest: dict) -> dict:
    t = manifest.get("timings_s", {})
    wall = t.get("solving") or t.get("total") or 0.0
    iters = manifest.get("iterations") or 0
    test = manifest.get("final", {}).get("test0", {})
    return {"run": manifest["name"], "device(s)": manifest.get("device", {}).get("label", "?"),
            "iterations": iters, "wall_s": wall, "iter_per_s": iters / wall if wall else 0.0,
            "accuracy": test.get("accuracy"), "loss": test.get("loss"), "status": manifest.get("status")}


def table(manifests: list[dict]) -> list[list[str]]:
    rows = [row(m) for m in manifests]
    base = rows[0]["wall_s"] / rows[0]["iterations"] if rows and rows[0]["iterations"] else None
    out = []
    for r in rows:
        per_iter = r["wall_s"] / r["iterations"] if r["iterations"] else None
        speedup = f"{base / per_iter:.2f}x" if base and per_iter else "—"
        out.append([
            r["run"] + ("" if r["status"] == "finished" else f" ({r['status']})"), r["device(s)"],
            f"{r['iterations']:,}", _duration(r["wall_s"]), f"{r['iter_per_s']:.1f}",
            "—" if r["accuracy"] is None else f"{r['accuracy']:.4f}",
            "—" if r["loss"] is None else f"{r['loss']:.4f}", speedup,
        ])
    return out


def _duration(seconds: float) -> str:
    minutes, sec = divmod(seconds, 60)
    return f"{int(minutes)} min {sec:04.1f} s" if minutes else f"{sec:.1f} s"


def text(cells: list[list[str]]) -> str:
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(COLUMNS)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    return "\n".join(lines)


def markdown(cells: list[list[str]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(r) + " |" for r in cells]
    return "\n".join(lines) + "\n"


def write(cells: list[list[str]], out_dir: Path, stem: str) -> tuple[Path, Path]:
    md = out_dir / f"{stem}.md"
    write_atomic(md, markdown(cells), RunError)
    fig, ax = plt.subplots(figsize=(min(16, 2 + 1.6 * len(COLUMNS)), 0.6 + 0.45 * (len(cells) + 1)), dpi=100)
    ax.axis("off")
    t = ax.table(cellText=cells, colLabels=list(COLUMNS), loc="center", cellLoc="left")
    t.auto_set_font_size(False)
    t.set_fontsize(9)
    t.auto_set_column_width(list(range(len(COLUMNS))))
    png = save_figure(fig, out_dir / f"{stem}.png", RunError, bbox_inches="tight")
    return md, png
