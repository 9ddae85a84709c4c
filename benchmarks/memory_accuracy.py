"""Estimate against measurement: what the estimator predicts and what Caffe allocates (CPU mode).

Cases: caffetool's declared LeNet (batch 64), CaffeNet (8 and 32) and VGG-16 (4), read from LMDB,
with the TEST net's batch equal to the training batch; then every net of ``memory_nets`` (ResNet-50,
GoogLeNet, SqueezeNet v1.1, FCN-8s, U-Net, LRCN with LSTM and with RNN, the siamese LeNet, and two
nets of the remaining layer types), fed by DummyData, at its two batch sizes. Each with SGD and
Adam. The measurement is malloc's own count (``memory.measure``: solver built, one test pass, one
training step). Target: relative error <= 2% in every case; a case the estimator refuses counts as
failing, with its message in the row. Also times the VGG-16 estimate (target < 100 ms). Exits 1 if
any case fails.

    .venv/bin/python benchmarks/memory_accuracy.py [--quick] [--only NAME[,NAME...]]

``--quick``: each net's first batch size, SGD only. ``--only``: those nets only.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import memory_nets

from caffetool.engine import import_caffe, locate
from caffetool.errors import CaffetoolError
from caffetool.memory import estimator, measuring, netsource

CLASSIC = {"lenet": (64,), "caffenet": (8, 32), "vgg16": (4,)}  # declared models, read from LMDB
SOLVERS = ("SGD", "Adam")
TARGET = 0.02
NO_IMAGES = (1, 1, 1)  # DummyData nets read no LMDB; measure() still makes one, as small as can be


@dataclass
class Case:
    name: str
    batch: int
    solver: str
    load: Callable[[], tuple[Any, tuple[int, int, int] | None, int]]  # net, Data layers' image shape, classes


def cases(caffe: Any, only: set[str] | None, quick: bool) -> list[Case]:
    """Every (net, batch, solver) to measure, in table order."""
    def classic(name: str, batch: int) -> Callable:
        def load() -> tuple[Any, tuple[int, int, int] | None, int]:
            source = netsource.load(caffe, name, None, None, None, batch, batch)
            return source.net, source.input_shape, source.num_classes
        return load

    def bench(name: str, batch: int) -> Callable:
        return lambda: (memory_nets.get(name).build(caffe, batch), None, 1)

    declared = [(name, batches, classic) for name, batches in CLASSIC.items()]
    declared += [(net.name, net.batches, bench) for net in memory_nets.NETS]
    solvers = SOLVERS[:1] if quick else SOLVERS
    return [Case(name, batch, solver, make(name, batch))
            for name, batches, make in declared if only is None or name in only
            for batch in (batches[:1] if quick else batches) for solver in solvers]


@dataclass
class Row:
    text: str
    error: float | None  # relative error of the estimate; None when refused or not measured

    @property
    def ok(self) -> bool:
        return self.error is not None and abs(self.error) <= TARGET


def run(engine: Any, caffe: Any, case: Case, threads: int = 1) -> Row:
    """One case on ``threads`` CPU threads: estimate, measure, and the table's row."""
    net, shape, classes = case.load()
    start = time.perf_counter()
    head = f"{case.name:<13} {case.batch:>5} {case.solver:<6}"
    try:
        options = estimator.Options(solver=case.solver, input_shape=shape, threads=threads, tuned=engine.tuned)
        e: int | None = estimator.estimate(net, options).total
        refusal = ""
    except CaffetoolError as error:
        e, refusal = None, f"refused: {error}"
    except Exception as error:  # noqa: BLE001 - an estimator bug is one failing row, not the end of the table
        e, refusal = None, f"estimator failed: {type(error).__name__}: {error}"
    try:
        got = measuring.measure(engine, caffe, net, case.solver, shape or NO_IMAGES, classes,
                              threads=threads)["allocated"]
    except CaffetoolError as error:
        return Row(f"{head} {'-':>13} {'-':>13} {'-':>8} {time.perf_counter() - start:>5.0f}  "
                   f"measuring failed: {error}", None)
    seconds = time.perf_counter() - start
    if e is None:
        return Row(f"{head} {'-':>13} {got / 2**20:>13,.1f} {'-':>8} {seconds:>5.0f}  {refusal}", None)
    error = (e - got) / got
    mark = "" if abs(error) <= TARGET else "  over target"
    return Row(f"{head} {e / 2**20:>13,.1f} {got / 2**20:>13,.1f} {100 * error:>+7.2f}% {seconds:>5.0f}{mark}", error)


def timing(caffe: Any) -> str:
    """How long the estimate of VGG-16 at batch 64 takes, best and median of 20."""
    vgg = netsource.load(caffe, "vgg16", None, None, None, 64)
    times = []
    for _ in range(20):
        start = time.perf_counter()
        estimator.estimate(vgg.net, estimator.Options(input_shape=vgg.input_shape))
        times.append(time.perf_counter() - start)
    return (f"VGG-16 estimate {1e3 * min(times):.2f} ms best, {1e3 * sorted(times)[len(times) // 2]:.2f} ms median "
            "(target < 100 ms)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="each net's first batch size, SGD only")
    parser.add_argument("--only", help="comma-separated net names (default: all)")
    parser.add_argument("--threads", type=int, default=1, help="the engine's CPU threads (default 1)")
    args = parser.parse_args()
    known = [*CLASSIC, *(net.name for net in memory_nets.NETS)]
    only = set(args.only.split(",")) if args.only else None
    if only and (unknown := only - set(known)):
        parser.error(f"unknown net {', '.join(sorted(unknown))}; known: {', '.join(known)}")
    engine = locate(probe=False)
    caffe = import_caffe(engine)
    began = time.perf_counter()
    print(f"{'net':<13} {'batch':>5} {'solver':<6} {'estimate MiB':>13} {'measured MiB':>13} {'error':>8} {'secs':>5}")
    rows = []
    for case in cases(caffe, only, args.quick):
        rows.append(run(engine, caffe, case, args.threads))
        print(rows[-1].text, flush=True)
    failed = sum(not row.ok for row in rows)
    errors = [abs(row.error) for row in rows if row.error is not None]
    worst = f"worst |error| {100 * max(errors):.2f}%" if errors else "none estimated"
    print(f"{len(rows) - failed} of {len(rows)} cases within {100 * TARGET:.0f}%; {worst} "
          f"(target <= {100 * TARGET:.0f}%); {time.perf_counter() - began:.0f} s")
    try:
        print(timing(caffe))
    except Exception as error:  # noqa: BLE001 - as in run(): reported, counted as a failure
        print(f"VGG-16 estimate failed: {type(error).__name__}: {error}")
        failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
