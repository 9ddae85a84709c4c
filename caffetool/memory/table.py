"""What the memory tasks print: an estimate, a fit, a measurement and the published figures as text
lines or JSON.

Kept apart from the estimator so its numbers stay plain data (bytes, rows) that tests and the
benchmarks read directly, and apart from the task layer so the tasks only wire flags to these
functions. Sizes are shown in MiB (2**20 bytes), as ``nvidia-smi`` and Caffe's own logs count.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from caffetool.memory.estimator import Estimate, Options, Row
from caffetool.memory.fitting import Fit
from caffetool.memory.published import PublishedFigure

HEADER = (f"{'layer':<22} {'type':<16} {'top':<18} {'MACC':>13} {'params':>11} {'param MiB':>9} {'grad':>8} "
          f"{'history':>8} {'data':>8} {'diff':>8} {'scratch':>8}")


def mib(n: int) -> str:
    return f"{n / 2**20:,.1f}"


def estimate_json(name: str, e: Estimate, fixed: int, per_sample: int) -> dict[str, Any]:
    """The whole estimate as one JSON-ready dict (``memory.estimate --json``)."""
    options = {k: v for k, v in vars(e.options).items() if k not in ("test_nets", "cudnn_choices")}
    options["test_nets"] = None if e.options.test_nets is None else len(e.options.test_nets)
    choices = e.options.cudnn_choices
    options["cudnn_choices"] = None if choices is None else [
        {"layer": layer, "call": call, "bytes": size} for (layer, call), size in sorted(choices.items())]
    return {"net": name, "options": options, "rows": [asdict(r) for r in e.rows],
            "test_rows": [asdict(r) for r in e.test_rows], "groups": e.groups, "allocator": e.allocator,
            "host_pinned": e.host_pinned, "total": e.total, "lower_bound": e.lower_bound,
            "unmodelled": [{"layer": n, "type": t, "assumed": why} for n, t, why in e.unmodelled],
            "not_counted": [{"layer": n, "what": what} for n, what in e.not_counted],
            "params": e.params, "macc": e.macc, "flops": 2 * e.macc, "fixed": fixed, "per_sample": per_sample,
            "seconds": e.seconds}


def estimate_lines(name: str, e: Estimate, fixed: int, per_sample: int) -> list[str]:
    """Per-layer table, then the groups and ``total = fixed + batch x per-sample``."""
    o = e.options
    batch = e.rows[0].top[0] if e.rows and e.rows[0].top else "?"
    lines = [f"{name}: {o.phase} phase, {o.mode.upper()}, {o.solver}, {o.dtype}, batch {batch}, "
             f"iter_size {o.iter_size}", HEADER]
    lines += [_row(r) for r in e.rows]
    if e.test_rows:
        test = sum(r.data_bytes + r.diff_bytes + r.scratch_bytes for r in e.test_rows)
        label = f"(test net: {len(e.test_rows)} layers, weights shared)"
        lines.append(f"{label:<58} activations and scratch {mib(test)} MiB")
    lines.append(f"parameters {e.params:,}; MACCs {e.macc:,} (FLOPs {2 * e.macc:,}) per training batch forward")
    return lines + _unknown(e) + _totals(e, fixed, per_sample)


def _unknown(e: Estimate) -> list[str]:
    """The layers whose memory the estimate could not count, so the total is a lower bound."""
    lines = [f"not modelled: layer {name!r} ({kind}): its own memory is not counted; {why}"
             for name, kind, why in e.unmodelled]
    lines += [f"not counted: layer {name!r} holds {what}" for name, what in e.not_counted]
    return lines


def _row(r: Row) -> str:
    top = "x".join(map(str, r.top)) or "-"
    return (f"{r.layer[:22]:<22} {r.type[:16]:<16} {top:<18} {r.macc:>13,} {r.params:>11,} "
            f"{mib(r.param_bytes):>9} {mib(r.grad_bytes):>8} {mib(r.history_bytes):>8} "
            f"{mib(r.data_bytes):>8} {mib(r.diff_bytes):>8} {mib(r.scratch_bytes):>8}")


def _totals(e: Estimate, fixed: int, per_sample: int) -> list[str]:
    lines = [f"  {group:<14} {mib(size):>12} MiB" for group, size in e.groups.items()]
    if e.options.mode == "gpu":
        lines.append(f"  {'CUDA pages':<14} {mib(e.allocator):>12} MiB (2 MiB pages: large blobs in whole pages, "
                     "small ones packed)")
    elif e.allocator:
        lines.append(f"  {'malloc+objects':<14} {mib(e.allocator):>12} MiB (glibc's rounding, Caffe's own objects)")
    if e.host_pinned:
        lines.append(f"  {'pinned host':<14} {mib(e.host_pinned):>12} MiB (prefetch batches, not on the device)")
    total = f"at least {mib(e.total)}" if e.lower_bound else mib(e.total)
    caveat = ("before CUDA's pages" if e.options.mode == "gpu" else
              "near this batch: the OpenMP engine's convolution scratch stops growing at 8 MiB a thread")
    lines.append(f"  {'total':<14} {total:>12} MiB  (by batch: {mib(fixed)} MiB fixed + batch x "
                 f"{mib(per_sample)} MiB per sample; {caveat})")
    lines.append(f"(estimated in {e.seconds * 1e3:.1f} ms)")
    return lines


def fit_lines(name: str, card: str, options: Options, f: Fit) -> list[str]:
    """The largest batch, whether the asked one fits, and the ranked changes when it does not."""
    lines = [f"{name} on {card} ({mib(f.capacity)} MiB, {mib(f.reserve)} MiB kept free), "
             f"{options.solver}, {options.dtype}:", _largest(f),
             f"  batch {f.wanted_batch} needs {mib(f.wanted_bytes)} MiB: {'fits' if f.fits else 'does not fit'}"]
    if not f.fits:
        lines.append("  changes, most memory saved first:")
        lines += [f"   - {ch.name}: saves {mib(ch.saves)} MiB{' (then fits)' if ch.fits else ''}; cost: {ch.cost}"
                  for ch in f.changes]
    if f.unmodelled:
        lines.append("  not modelled, so every figure above is a lower bound (the largest batch an upper limit): "
                     + ", ".join(f"{name} ({kind})" for name, kind, _ in f.unmodelled))
    return lines


def _largest(f: Fit) -> str:
    if f.largest_batch == 0:
        return f"  no batch fits: even batch 1 needs more than the {mib(f.capacity - f.reserve)} MiB available"
    why = " (Caffe's limit of INT_MAX elements per blob; the memory would hold more)" if f.limited_by_blobs else ""
    return f"  largest batch that fits: {f.largest_batch}{why}"


MEASURED_BY = {"cpu": "malloc in use after solver + test pass + 1 step",
               "gpu": "NVML peak over solver + test pass + 1 step, less a one-layer net's"}


def measure_lines(name: str, e: Estimate, got: dict) -> list[str]:
    """The estimate against what the engine allocated (``memory.measure``), with the relative error."""
    error = (e.total - got["allocated"]) / got["allocated"]
    return [f"{name}, batch {e.rows[0].top[0]}, {e.options.solver}, {e.options.mode.upper()}:",
            f"  estimate  {mib(e.total):>10} MiB{' (at least: some layers are not modelled)' if e.lower_bound else ''}",
            f"  measured  {mib(got['allocated']):>10} MiB  ({MEASURED_BY[e.options.mode]})",
            f"  error     {100 * error:+.2f}%"]


def report_lines(figures: list[PublishedFigure]) -> list[str]:
    """Each published figure with its source, ours, and why they differ (``memory.report``)."""
    lines = []
    for f in figures:
        lines += [f.what, f"  published: {f.theirs} ({f.source})", f"  ours:      {f.ours}",
                  f"  why:       {f.why}", ""]
    return lines
