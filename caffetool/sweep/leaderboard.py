"""A sweep's results read from its trials' runs: one row per trial, a table, and plots.

Each row is read from the trial's own run (its manifest and ``metrics.json``, or its ``caffe.log``
when those are missing), so it says what the run's record says: the parameters, the metric's last
measurement and the iteration it was taken at, the iterations run, wall time, status and host.
A trial that never got a run (Caffe refused its net before the first iteration) has the error Tune
recorded for it. Rows are sorted by the metric (``--mode``), trials without a figure last; the
first row with a figure is the best. ``plots/`` holds every trial's metric against iterations on
one figure, and the final metric against each parameter.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from caffetool.errors import CaffetoolError, RunError
from caffetool.runs import ownership
from caffetool.runs.folder import RunFolder
from caffetool.runs.logparse import parse_file
from caffetool.sweep import hparams, search, searchspace, sweeprecord

CURVES = "metric_vs_iterations.png"
MARKERS = "o^sDv*"  # one per search that made trials (a sweep has at most two: random start, TPE)


def collect(sweep_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The sweep's plan (as ``sweep.json`` holds it) and one row per trial, best first."""
    written = sweeprecord.read_record(sweep_dir)
    plan = written["plan"]
    metric = searchspace.parse_metric(plan["metric"])
    tuned = {t["trial"]: t for t in written.get("trials", [])}
    runs = {p.name: p for p in sorted(sweep_dir.iterdir()) if RunFolder(p).manifest.is_file()}
    rows = [_row(name, runs.get(name), tuned.get(name, {}), metric) for name in sorted(set(tuned) | set(runs))]
    for r in rows:
        r["search"] = _made_by(plan, r["trial"])
    sign = -1.0 if plan.get("mode", "max") == "max" else 1.0
    rows.sort(key=lambda r: (r["metric"] is None, sign * (r["metric"] if r["metric"] is not None else 0.0),
                             r["trial"]))
    return plan, rows


def _made_by(plan: dict[str, Any], trial: str) -> str:
    """Which search made ``trial`` (a sweep from before ``--search`` drew at random or crossed a grid)."""
    chosen = plan.get("search") or ("random" if any(":" in p.split("=", 1)[-1] for p in plan["params"]) else "grid")
    number = trial.rsplit("-", 1)[-1]
    return search.made_by(chosen, int(plan.get("samples") or 1), int(number) if number.isdigit() else 0)


def _row(name: str, run_dir: Path | None, tuned: dict[str, Any], metric: searchspace.Metric) -> dict[str, Any]:
    row: dict[str, Any] = {"trial": name, "params": dict(tuned.get("params") or {}), "metric": None,
                           "metric_iteration": None, "iterations": None, "wall_s": None,
                           "status": "failed" if tuned.get("error") else "pending",
                           "host": None, "node": None, "message": tuned.get("error"), "curve": []}
    if run_dir is None:
        return row
    manifest = ownership.settle(run_dir)
    sweep = manifest.sweep
    row["params"] = dict(sweep.get("params") or row["params"])
    row.update(iterations=manifest.iterations, wall_s=manifest.timings_s.get("total"),
               status=manifest.status, host=sweep.get("host") or manifest.host.get("hostname"),
               node=(sweep.get("node_id") or "")[:12] or None, run_dir=str(run_dir))
    if manifest.status not in ("finished",):
        row["message"] = manifest.message or row["message"]
    if tuned.get("error"):  # the run may say "stopped early": Tune's error says why
        row["status"], row["message"] = "failed", tuned["error"]
    curve = [(int(r["NumIters"]), float(r[metric.output])) for r in _rows(run_dir, metric)
             if r.get(metric.output) is not None]
    row["curve"] = curve
    trained = [(iteration, value) for iteration, value in curve if iteration > 0]
    if trained:  # a figure at iteration 0 is the untrained net's (test_initialization): no result to rank
        row["metric_iteration"], row["metric"] = trained[-1]
        if not math.isfinite(row["metric"]):
            row["metric"] = None
    return row


def _rows(run_dir: Path, metric: searchspace.Metric) -> list[dict[str, Any]]:
    """The rows of the metric's net: from metrics.json, else from caffe.log."""
    try:
        data = json.loads(RunFolder(run_dir).metrics_json.read_text())
        return list(data["train"] if metric.net < 0 else data["test"].get(str(metric.net), []))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        m = parse_file(RunFolder(run_dir).log)
    except CaffetoolError:
        return []
    return m.train if metric.net < 0 else m.test.get(metric.net, [])


def write(sweep_dir: Path) -> list[dict[str, Any]]:
    """``results.csv``, the results in ``sweep.json`` (:mod:`caffetool.sweep.sweeprecord`), and ``plots/``;
    the rows, best first."""
    plan, rows = collect(sweep_dir)
    names = _param_names(rows)
    sweeprecord.write_results(sweep_dir, rows, names, plan["metric"])
    if any(r["curve"] for r in rows):
        _plots(sweep_dir / sweeprecord.PLOTS, rows, names, plan["metric"], plan["name"])
    hparams.write(sweep_dir, plan, rows)
    return rows


def _param_names(rows: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(n for r in rows for n in r["params"]))


def text(rows: list[dict[str, Any]], metric: str) -> str:
    """The table, best first, and a line naming the best trial."""
    names = _param_names(rows)
    header = ["trial", *names, metric, "at iter", "iters", "wall s", "status", "search", "host"]
    body = [[r["trial"], *(_show(r["params"].get(n)) for n in names),
             "-" if r["metric"] is None else f"{r['metric']:.4f}", _show(r["metric_iteration"]),
             _show(r["iterations"]), "-" if r["wall_s"] is None else f"{r['wall_s']:.1f}", r["status"] or "-",
             r.get("search") or "-", r["host"] or "-"] for r in rows]
    widths = [max(len(str(x)) for x in column) for column in zip(header, *body)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(line, widths)).rstrip() for line in [header, *body]]
    best = next((r for r in rows if r["metric"] is not None), None)
    if best is None:
        lines.append("best: none (no trial measured the metric after training: a figure at iteration 0 is the "
                     "untrained net's)")
    else:
        shown = ", ".join(f"{k}={_show(v)}" for k, v in best["params"].items())
        lines.append(f"best: {best['trial']} ({metric} {best['metric']:.4f} at iteration {best['metric_iteration']}; "
                     f"{shown})")
    for r in rows:
        if r["status"] == "failed" and r["message"]:
            lines.append(f"{r['trial']} failed: {r['message'].splitlines()[0]}")
    return "\n".join(lines)


def _show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _plots(folder: Path, rows: list[dict[str, Any]], names: list[str], metric: str, title: str) -> list[Path]:
    from caffetool.figures import plt, save_figure  # noqa: PLC0415 - matplotlib only when plotting

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100, layout="tight")
    for r in rows:
        if r["curve"]:
            xs, ys = zip(*r["curve"])
            ax.plot(xs, ys, "o-", lw=1, ms=3, label=f"{r['trial']} ({r['status']}, {r['search']})")
    ax.set_xlabel("iterations")
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(f"{title}: {metric} of every trial")
    paths = [save_figure(fig, folder / CURVES, RunError)]
    measured = [r for r in rows if r["metric"] is not None]
    for name in names:
        points = [(r["params"].get(name), r["metric"], r["search"]) for r in measured
                  if r["params"].get(name) is not None]
        if not points:
            continue
        fig, ax = plt.subplots(figsize=(6, 4), dpi=100, layout="tight")
        xs = [p[0] for p in points]
        numeric = all(isinstance(x, (int, float)) for x in xs)
        labels = sorted({str(x) for x in xs})
        for made_by, marker in zip(dict.fromkeys(p[2] for p in points), MARKERS):  # one series per search
            mine = [p for p in points if p[2] == made_by]
            at = [p[0] if numeric else labels.index(str(p[0])) for p in mine]
            ax.plot(at, [p[1] for p in mine], marker, ls="none", label=made_by)
        if numeric:
            positive = [x for x in xs if x > 0]
            if len(positive) == len(xs) and max(xs) / min(xs) >= 100:
                ax.set_xscale("log")
        else:
            ax.set_xticks(range(len(labels)), labels)
        ax.legend(fontsize=7, title="made by", title_fontsize=7)
        ax.set_xlabel(name)
        ax.set_ylabel(f"{metric} (last)")
        ax.grid(alpha=0.3)
        ax.set_title(f"{title}: {metric} against {name}")
        paths.append(save_figure(fig, folder / f"metric_vs_{name}.png", RunError))
    return paths
