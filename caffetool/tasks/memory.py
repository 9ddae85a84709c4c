"""``caffetool memory.*``: estimate, fit, measure, and the published figures recomputed."""

from __future__ import annotations

import json
from typing import Any

from invoke import Collection, Context

from caffetool.choices import bounded, count, number, output_file
from caffetool.engine import cpu_threads, import_caffe, locate
from caffetool.errors import ConfigError
from caffetool.memory import batches, estimator, gpus, netsource, table
from caffetool.tasks import settings
from caffetool.tasks._common import task

NET_HELP = {
    "model": "model name (invoke model.list)", "net": "a train/test or deploy prototxt instead",
    "solver": "a solver.prototxt instead: its train net, type and iter_size (paths relative to here)",
    "batch_size": "training batch size",
    "type": f"solver type (any case): {', '.join(estimator.HISTORY)} (default: the solver file's, else SGD)",
    "phase": "train (solver: train net after forward+backward, test net after a test) or test (inference)",
    "mode": "cpu or gpu", "dtype": "fp32 or fp16", "iter_size": "gradient accumulation (default 1)",
    "input_shape": "C,H,W of the images a Data layer reads (needed with --net)",
    "cudnn": "GPU mode: cuDNN convolutions (workspace instead of im2col)",
    "no_test_net": "training: leave out the solver's TEST net",
    "threads": "CPU mode: the engine's threads (default: as `caffetool train` runs it; each thread of the "
               "OpenMP engine keeps its own convolution buffers)",
}


def _load(c: Context, model: str | None, net: str | None, input_shape: str | None, batch_size: str | None,
          solver_type: str | None, phase: str, mode: str, dtype: str, iter_size: str | None, cudnn: bool,
          test_net: bool = True, solver: str | None = None,
          threads: str | None = None) -> tuple[Any, netsource.NetSource, estimator.Options]:
    """The net and the estimator's options from the flags, which win over a solver file's settings;
    numbers are checked before Caffe is loaded."""
    batch, accumulate = count(batch_size, "--batch-size"), count(iter_size, "--iter-size")
    wanted = bounded(threads, "--threads", settings.THREADS)
    engine = locate(c.engine.prefix, probe=False)
    built = engine.manifest.get("options", {})
    workers = cpu_threads.of_engine(built, wanted) if mode == "cpu" else 1
    caffe = import_caffe(engine)
    source = netsource.load(caffe, model, net, input_shape, c.model.dir, batch, solver_file=solver, engine=engine)
    options = estimator.Options(phase=phase, mode=mode, solver=solver_type or source.solver_type or "SGD", dtype=dtype,
                          batch=batch, iter_size=accumulate or source.iter_size or 1, cudnn=cudnn,
                          input_shape=source.input_shape, test_net=test_net, test_nets=source.test_nets,
                          tuned=engine.tuned, threads=workers)
    return caffe, source, options


def without(*drop: str) -> dict[str, str]:
    """NET_HELP for a task that lacks some of the options."""
    return {k: v for k, v in NET_HELP.items() if k not in drop}


@task(help={**NET_HELP, "json": "print the estimate as JSON", "plot": "write a PNG of memory per layer"})
def estimate(c: Context, model: str | None = None, net: str | None = None, batch_size: str | None = None,
             type: str | None = None, phase: str = "train", mode: str = "cpu", dtype: str = "fp32",
             iter_size: str | None = None, input_shape: str | None = None, cudnn: bool = False,
             no_test_net: bool = False, json_: bool = False, plot: str | None = None, solver: str | None = None,
             threads: str | None = None) -> None:
    """Per-layer memory and compute of a net, by Caffe's own allocation rules (no Caffe run)."""
    picture = output_file(plot, "--plot") if plot else None
    _, source, options = _load(c, model, net, input_shape, batch_size, type, phase, mode, dtype, iter_size,
                               cudnn, not no_test_net, solver, threads)
    e = estimator.estimate(source.net, options, source.text, source.origin)
    batch = e.rows[0].top[0] if e.rows and e.rows[0].top else (options.batch or 1)
    fixed, per = estimator.per_sample(source.net, options, source.text, around=batch)
    if json_:
        print(json.dumps(table.estimate_json(source.name, e, fixed, per), indent=1, default=list))
        return
    print("\n".join(table.estimate_lines(source.name, e, fixed, per)))
    if picture:
        from caffetool.memory.plot import plot_layers  # noqa: PLC0415 - matplotlib only when asked

        print(f"plot: {plot_layers(e, picture, source.name)}")


@task(help={**without("phase", "mode", "threads"), "gpu_memory": "card memory, e.g. 12GiB", "gpu": f"a card: {', '.join(gpus.GPUS)}",
            "reserve": "memory kept free for the CUDA context and fragmentation"})
def fit(c: Context, model: str | None = None, net: str | None = None, batch_size: str | None = None,
        type: str | None = None, dtype: str = "fp32", iter_size: str | None = None, input_shape: str | None = None,
        cudnn: bool = False, no_test_net: bool = False, gpu_memory: str | None = None, gpu: str | None = None,
        reserve: str = "400MiB", solver: str | None = None) -> None:
    """Will it fit? The largest batch for a GPU, and ranked changes when the wanted batch does not."""
    from caffetool.memory import fitting  # noqa: PLC0415

    if bool(gpu_memory) == bool(gpu):
        raise ConfigError("give exactly one of --gpu-memory SIZE or --gpu NAME")
    capacity = gpus.parse_size(gpu_memory, "--gpu-memory") if gpu_memory else gpus.lookup(gpu)
    kept = gpus.parse_size(reserve, "--reserve")
    fitting.check_budget(capacity, kept)  # before the net is loaded: nothing to estimate against
    _, source, options = _load(c, model, net, input_shape, batch_size, type, "train", "gpu", dtype, iter_size,
                               cudnn, not no_test_net, solver)
    f = fitting.fit(source.net, options, capacity, kept, source.text)
    print("\n".join(table.fit_lines(source.name, gpu or gpu_memory, options, f)))


@task(help={**without("phase", "dtype", "iter_size", "cudnn", "no_test_net"),
            "classes": "number of classes of the random labels (default: the model's)",
            "device": "with --mode gpu: the GPU to measure on, by id (default 0)"})
def measure(c: Context, model: str | None = None, net: str | None = None, batch_size: str | None = None,
            type: str | None = None, mode: str = "cpu", input_shape: str | None = None,
            classes: str | None = None, device: str = "0", solver: str | None = None, threads: str | None = None) -> None:
    """Measure what the real engine allocates (solver, one test pass, one step) next to the estimate."""
    # A --solver is measured on its own data; --model and --net on random images of their input shape.
    from caffetool.memory import measuring  # noqa: PLC0415

    labels = count(classes, "--classes")
    gpu_id = number(device, "--device", int, minimum=0, maximum=63)
    engine = locate(c.engine.prefix, probe=False)
    caffe, source, options = _load(c, model, net, input_shape, batch_size, type, "train", mode, "fp32", None, False,
                                   solver=solver, threads=threads)
    e = estimator.estimate(source.net, options, source.text, source.origin)
    measuring.check_room(source.net, e, source.text)
    if source.project is not None:  # the user's own data, as the solver names it
        got = measuring.measure_project(engine, caffe, source.project, options.solver, options.mode, gpu_id,
                                        options.threads)
    else:
        if options.batch:  # the engine measures the batch the estimate is for, not the file's own
            batches.set_batch(source.net, options.batch)
        got = measuring.measure(engine, caffe, source.net, options.solver, source.input_shape or (1, 28, 28),
                                labels or source.num_classes or 10, options.mode, gpu_id, options.threads)
    print("\n".join(table.measure_lines(source.name, e, got)))


@task
def report(c: Context) -> None:
    """Published memory figures (vDNN's AlexNet and VGG-16, Dettmers' 6 GB rule) next to the estimator's."""
    from caffetool.memory import published  # noqa: PLC0415

    caffe = import_caffe(locate(c.engine.prefix, probe=False))
    print("\n".join(table.report_lines(published.published(caffe, c.model.dir))))


ns = Collection("memory", estimate, fit, measure, report)
