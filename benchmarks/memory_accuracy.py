"""Estimate against measurement: what the estimator predicts and what Caffe allocates (CPU mode).

Cases: LeNet batch 64, CaffeNet batch 8 and 32, VGG-16 batch 4, each with SGD and Adam; the TEST
net's batch equals the training batch. The measurement is malloc's own count (``memory.measure``:
solver built, one test pass, one training step). Target: relative error <= 2% in every case. Also
times the VGG-16 estimate (target < 100 ms).

    .venv/bin/python benchmarks/memory_accuracy.py
"""

from __future__ import annotations

import time

from caffetool.engine import import_caffe, locate
from caffetool.memory import estimate as est
from caffetool.memory import measure, nets

CASES = [("lenet", 64), ("caffenet", 8), ("caffenet", 32), ("vgg16", 4)]
SOLVERS = ("SGD", "Adam")


def main() -> None:
    engine = locate(probe=False)
    caffe = import_caffe(engine)
    print(f"{'model':<9} {'batch':>5} {'solver':<6} {'estimate MiB':>13} {'measured MiB':>13} {'error':>8}")
    worst = 0.0
    for name, batch in CASES:
        source = nets.load(caffe, name, None, None, None, batch, batch)
        for solver in SOLVERS:
            options = est.Options(solver=solver, input_shape=source.input_shape)
            e = est.estimate(source.net, options)
            got = measure.measure(engine, caffe, source.net, solver, source.input_shape, source.num_classes)
            error = (e.total - got["allocated"]) / got["allocated"]
            worst = max(worst, abs(error))
            print(f"{name:<9} {batch:>5} {solver:<6} {e.total / 2**20:>13,.1f} {got['allocated'] / 2**20:>13,.1f} "
                  f"{100 * error:>+7.2f}%", flush=True)
    vgg = nets.load(caffe, "vgg16", None, None, None, 64)
    times = []
    for _ in range(20):
        start = time.perf_counter()
        est.estimate(vgg.net, est.Options(input_shape=vgg.input_shape))
        times.append(time.perf_counter() - start)
    print(f"worst |error| {100 * worst:.2f}% (target <= 2%); VGG-16 estimate {1e3 * min(times):.2f} ms best, "
          f"{1e3 * sorted(times)[len(times) // 2]:.2f} ms median (target < 100 ms)")


if __name__ == "__main__":
    main()
