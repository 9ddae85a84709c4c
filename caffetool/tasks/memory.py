"""``invoke memory.*``: estimate, fit, measure and the seeds' report."""

from __future__ import annotations

import json
from dataclasses import asdict

from invoke import Collection

from caffetool.engine import import_caffe, locate
from caffetool.memory import estimate as est
from caffetool.memory import gpus, nets
from caffetool.tasks._common import task

NET_HELP = {
    "model": "model name (invoke model.list)", "net": "a train/test or deploy prototxt instead",
    "batch_size": "training batch size", "solver": f"solver type: {', '.join(est.HISTORY)}",
    "phase": "train (solver: train net after forward+backward, test net after a test) or test (inference)",
    "mode": "cpu or gpu", "dtype": "fp32 or fp16", "iter_size": "gradient accumulation",
    "input_shape": "C,H,W of the images a Data layer reads (needed with --net)",
    "cudnn": "GPU mode: cuDNN convolutions (workspace instead of im2col)",
    "no_test_net": "training: leave out the solver's TEST net",
}


def _load(c, model, net, input_shape, batch_size, solver, phase, mode, dtype, iter_size, cudnn, test_net=True):
    caffe = import_caffe(locate(c.engine.prefix, probe=False))
    batch = None if batch_size is None else int(batch_size)
    source = nets.load(caffe, model, net, input_shape, c.model.dir, batch)
    options = est.Options(phase=phase, mode=mode, solver=solver, dtype=dtype, batch=batch,
                          iter_size=int(iter_size), cudnn=cudnn, input_shape=source.input_shape, test_net=test_net)
    return caffe, source, options


def without(*drop: str) -> dict:
    """NET_HELP for a task that lacks some of the options."""
    return {k: v for k, v in NET_HELP.items() if k not in drop}


def mib(n: int) -> str:
    return f"{n / 2**20:,.1f}"


@task(help={**NET_HELP, "json": "print the estimate as JSON", "plot": "write a PNG of memory per layer"})
def estimate(c, model=None, net=None, batch_size=None, solver="SGD", phase="train", mode="cpu", dtype="fp32",
             iter_size=1, input_shape=None, cudnn=False, no_test_net=False, json_=False, plot=None):
    """Per-layer memory and compute of a net, by Caffe's own allocation rules (no Caffe run)."""
    _, source, options = _load(c, model, net, input_shape, batch_size, solver, phase, mode, dtype, iter_size,
                               cudnn, not no_test_net)
    e = est.estimate(source.net, options, source.text, source.origin)
    fixed, per = est.per_sample(source.net, options, source.text)
    if json_:
        print(json.dumps({"net": source.name, "options": asdict(options), "rows": [asdict(r) for r in e.rows],
                          "test_rows": [asdict(r) for r in e.test_rows], "groups": e.groups,
                          "allocator": e.allocator, "host_pinned": e.host_pinned, "total": e.total,
                          "params": e.params, "macc": e.macc, "flops": 2 * e.macc, "fixed": fixed,
                          "per_sample": per, "seconds": e.seconds}, indent=1, default=list))
        return
    head = (f"{'layer':<22} {'type':<16} {'top':<18} {'MACC':>13} {'params':>11} {'param MiB':>9} {'grad':>8} "
            f"{'history':>8} {'data':>8} {'diff':>8} {'scratch':>8}")
    print(f"{source.name}: {options.phase} phase, {options.mode.upper()}, {options.solver}, {options.dtype}, "
          f"batch {e.rows[0].top[0] if e.rows and e.rows[0].top else '?'}, iter_size {options.iter_size}")
    print(head)
    for r in e.rows:
        print(f"{r.layer[:22]:<22} {r.type[:16]:<16} {'x'.join(map(str, r.top)) or '-':<18} {r.macc:>13,} "
              f"{r.params:>11,} {mib(r.param_bytes):>9} {mib(r.grad_bytes):>8} {mib(r.history_bytes):>8} "
              f"{mib(r.data_bytes):>8} {mib(r.diff_bytes):>8} {mib(r.scratch_bytes):>8}")
    if e.test_rows:
        test = sum(r.data_bytes + r.diff_bytes + r.scratch_bytes for r in e.test_rows)
        print(f"{'(test net: ' + str(len(e.test_rows)) + ' layers, weights shared)':<58} activations and scratch {mib(test)} MiB")
    print(f"parameters {e.params:,}; MACCs {e.macc:,} (FLOPs {2 * e.macc:,}) per training batch forward")
    for group, size in e.groups.items():
        print(f"  {group:<14} {mib(size):>12} MiB")
    if e.allocator:
        print(f"  {'malloc rounding':<14} {mib(e.allocator):>12} MiB")
    if e.host_pinned:
        print(f"  {'pinned host':<14} {mib(e.host_pinned):>12} MiB (prefetch batches, not on the device)")
    print(f"  {'total':<14} {mib(e.total):>12} MiB  = {mib(fixed)} MiB fixed + batch x {mib(per)} MiB per sample")
    print(f"(estimated in {e.seconds * 1e3:.1f} ms)")
    if plot:
        from caffetool.memory.plot import plot_layers  # noqa: PLC0415 - matplotlib only when asked

        print(f"plot: {plot_layers(e, plot, source.name)}")


@task(help={**without("phase", "mode"), "gpu_memory": "card memory, e.g. 12GiB", "gpu": f"a card: {', '.join(gpus.GPUS)}",
            "reserve": "memory kept free for the CUDA context and fragmentation"})
def fit(c, model=None, net=None, batch_size=None, solver="SGD", dtype="fp32", iter_size=1, input_shape=None,
        cudnn=False, no_test_net=False, gpu_memory=None, gpu=None, reserve="400MiB"):
    """Will it fit? The largest batch for a GPU, and ranked changes when the wanted batch does not fit."""
    from caffetool.errors import ConfigError  # noqa: PLC0415
    from caffetool.memory import fit as fitting  # noqa: PLC0415

    if bool(gpu_memory) == bool(gpu):
        raise ConfigError("give exactly one of --gpu-memory SIZE or --gpu NAME")
    capacity = gpus.parse_size(gpu_memory) if gpu_memory else gpus.lookup(gpu)
    _, source, options = _load(c, model, net, input_shape, batch_size, solver, "train", "gpu", dtype, iter_size,
                               cudnn, not no_test_net)
    f = fitting.fit(source.net, options, capacity, gpus.parse_size(reserve), source.text)
    print(f"{source.name} on {gpu or gpu_memory} ({mib(capacity)} MiB, {mib(f.reserve)} MiB kept free), "
          f"{options.solver}, {options.dtype}:")
    print(f"  largest batch that fits: {f.largest_batch}")
    print(f"  batch {f.wanted_batch} needs {mib(f.wanted_bytes)} MiB: {'fits' if f.fits else 'does not fit'}")
    if not f.fits:
        print("  changes, most memory saved first:")
        for ch in f.changes:
            print(f"   - {ch.name}: saves {mib(ch.saves)} MiB{' (then fits)' if ch.fits else ''}; cost: {ch.cost}")


@task(help={**without("phase", "dtype", "iter_size", "cudnn", "no_test_net"),
            "classes": "number of classes of the random labels (default: the model's)"})
def measure(c, model=None, net=None, batch_size=None, solver="SGD", mode="cpu", input_shape=None, classes=None):
    """Measure what the real engine allocates (solver, one test pass, one step) next to the estimate."""
    from caffetool.memory import measure as measuring  # noqa: PLC0415

    engine = locate(c.engine.prefix, probe=False)
    caffe, source, options = _load(c, model, net, input_shape, batch_size, solver, "train", mode, "fp32", 1, False)
    e = est.estimate(source.net, options, source.text, source.origin)
    got = measuring.measure(engine, caffe, source.net, solver, source.input_shape or (1, 28, 28),
                            int(classes or source.num_classes or 10), mode)
    error = (e.total - got["allocated"]) / got["allocated"]
    print(f"{source.name}, batch {e.rows[0].top[0]}, {solver}, {mode.upper()}:")
    print(f"  estimate  {mib(e.total):>10} MiB")
    print(f"  measured  {mib(got['allocated']):>10} MiB  (malloc in use after solver + test pass + 1 step)")
    print(f"  error     {100 * error:+.2f}%")


@task
def report(c):
    """The seeds' memory figures (AlexNet, VGG-16, the 6 GB rule) next to the estimator's."""
    from caffetool.memory import report as reporting  # noqa: PLC0415

    caffe = import_caffe(locate(c.engine.prefix, probe=False))
    loaded = {}
    for name in ("alexnet", "vgg16"):
        s = nets.load(caffe, name, None, None, c.model.dir, 128)
        loaded[name] = (s.net, est.Options(input_shape=s.input_shape, mode="gpu"))
    for f in reporting.figures(loaded):
        print(f"{f.what}\n  seed: {f.theirs}\n  ours: {f.ours}\n  why:  {f.why}\n")


ns = Collection("memory", estimate, fit, measure, report)
