"""``caffetool train`` and ``train.*``: run, resume, test, time, parse and compare trainings."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from invoke import Collection, Exit

from caffetool import track
from caffetool.choices import bounded, count, input_file
from caffetool.engine import cpu_threads, import_caffe, locate
from caffetool.errors import ConfigError
from caffetool.nets import builders, declaration, prototxt
from caffetool.nets.solvers import SolverOptions
from caffetool.runs import final_figures, metrics_io, ownership, runrecord
from caffetool.runs.folder import RunFolder
from caffetool.runs.logparse import parse_file
from caffetool.tasks import settings
from caffetool.tasks._common import chosen_folder, pick, task
from caffetool.tasks.solver_flags import solver_help, takes_solver_flags
from caffetool.backends import devices
from caffetool.train import caffe_commands, session

THREADS_HELP = ("CPU threads for the engine's layers and BLAS (default: OMP_NUM_THREADS if set, else every core "
                "this process may use)")
TRACKING_HELP = {"tracking_uri": "MLflow store the run is logged to: sqlite:///PATH/mlflow.db, http://HOST:5000, ... "
                                 "or off (default: sqlite:///<runs dir>/mlflow.db)",
                 "experiment": "MLflow experiment (default caffetool)"}


@task(default=True, iterable=["stepvalue"], help={
    "model": "model name (invoke model.list; default lenet)", "dataset": "data set (fetched if missing), or a folder made by data.images",
    "gpu": "auto, cpu, all, or GPU ids like 0,1", "name": "run name (default: a timestamp)",
    "weights": ".caffemodel to start from (fine-tuning)", "batch_size": "training batch size",
    "test_batch_size": "test batch size", "data_dir": "where data sets are", "runs_dir": "where runs go",
    "solver": "your own solver.prototxt, paths in it relative to here (as `caffe train -solver`)",
    "labels": "labels.txt for the run (one class name a line)",
    "deploy": "deploy net for --solver (default: derived from a classifier's train net)",
    "threads": THREADS_HELP, **TRACKING_HELP,
    **solver_help(without=("mode",)),
})
@takes_solver_flags(without=("mode",))
def run(c: Any, model: str | None = None, dataset: str | None = None, gpu: str = "auto", name: str | None = None,
        weights: str | None = None, batch_size: str | None = None, test_batch_size: str | None = None,
        data_dir: str | None = None, runs_dir: str | None = None, solver: str | None = None,
        labels: str | None = None, deploy: str | None = None, threads: str | None = None,
        tracking_uri: str | None = None, experiment: str | None = None, *, solver_flags: dict[str, Any]) -> None:
    """Train with the real `caffe train`: live progress, full run record, curves."""
    _check_solver_flags(solver, {"--model": model, "--dataset": dataset}, {"--labels": labels, "--deploy": deploy})
    options = SolverOptions.from_flags(**solver_flags)
    cpu_threads.apply(bounded(threads, "--threads", settings.THREADS))
    runs = chosen_folder(runs_dir, c.runs.dir, "--runs-dir", "runs.dir")
    request = session.TrainRequest(
        model=model or "lenet", dataset=pick(dataset, c.data.dataset), options=options, gpu=gpu, name=name,
        weights=weights, batch=count(batch_size, "--batch-size"),
        test_batch=count(test_batch_size, "--test-batch-size"),
        data_dir=chosen_folder(data_dir, c.data.dir, "--data-dir", "data.dir"),
        runs_dir=runs, models_dir=c.model.dir, solver=solver, labels=labels, deploy=deploy,
        type_given=solver_flags["type"] is not None,
        tracking=track.resolve(pick(tracking_uri, c.tracking.uri), pick(experiment, c.tracking.experiment), runs))
    result = session.train(locate(c.engine.prefix, probe=False, gpus=True), request)
    finish(result)


def _check_solver_flags(solver: str | None, generated: dict[str, Any], own: dict[str, Any]) -> None:
    """Refuse flags that the kind of run asked for would ignore: a ``--solver`` run trains what its
    file names; a generated run writes its own deploy net and takes its data set's labels."""
    if given := [flag for flag, value in (generated if solver else own).items() if value is not None]:
        flags = " and ".join(given)
        raise ConfigError(f"--solver trains the net and data its file names, so {flags} would be ignored: drop "
                          f"{flags} (or --solver)" if solver else
                          f"{flags} go with --solver; a run of --model writes its own deploy net and takes its "
                          "data set's labels")


def finish(result: session.TrainResult) -> None:
    """Print the run's one-screen summary; a run that did not finish exits non-zero."""
    m, out = result.manifest, result.outcome
    t = m.timings_s
    print(f"run:        {result.run_dir}")
    print(f"status:     {out.status} — {out.message}" if out.status != "finished" else "status:     finished")
    print(f"iterations: {m.iterations}  wall {t.get('total', 0):.1f} s "
          f"(setup {t.get('setup', 0):.1f}, training {t.get('training', 0):.1f}, testing {t.get('testing', 0):.1f})")
    for line in final_figures.summary(m.final, finished=out.status == "finished"):
        print(line)
    if result.weights:
        beside = [f"{what}: {path}" for what, path in (("deploy", RunFolder(result.run_dir).deploy),
                                                       ("labels", RunFolder(result.run_dir).labels)) if path.is_file()]
        print(f"model:      {result.weights}" + (f" ({', '.join(beside)})" if beside else ""))
    print(f"curves:     {RunFolder(result.run_dir).plots}")
    if out.status != "finished":
        raise Exit(code=1 if out.status != "interrupted" else 130)


@task(help={"run": "run name or directory", "max_iter": "train up to this iteration instead",
            "runs_dir": "where runs are", "threads": THREADS_HELP,
            "tracking_uri": "MLflow store for a run not tracked yet, or off (a tracked run goes on where it is)",
            "experiment": TRACKING_HELP["experiment"]})
def resume(c: Any, run: str, max_iter: str | None = None, runs_dir: str | None = None,
           threads: str | None = None, tracking_uri: str | None = None, experiment: str | None = None) -> None:
    """Continue a run from its newest complete snapshot."""
    iterations = count(max_iter, "--max-iter")
    cpu_threads.apply(bounded(threads, "--threads", settings.THREADS))
    run_dir = runrecord.find(Path(pick(runs_dir, c.runs.dir)), run)
    target = track.resolve(pick(tracking_uri, c.tracking.uri), pick(experiment, c.tracking.experiment), run_dir.parent)
    result = session.resume(locate(c.engine.prefix, probe=False, gpus=True), run_dir, iterations, tracking=target)
    finish(result)


@task(name="test", help={"run": "run name or directory", "weights": ".caffemodel (default: the newest)",
                         "iterations": "test batches (default: the solver's test_iter)", "runs_dir": "where runs are"})
def test_(c: Any, run: str, weights: str | None = None, iterations: str | None = None,
          runs_dir: str | None = None) -> None:
    """Run `caffe test` on every test net of a run, on its final (or given) weights, and record the outputs."""
    batches = count(iterations, "--iterations")
    run_dir = runrecord.find(Path(pick(runs_dir, c.runs.dir)), run)
    chosen = input_file(weights, "--weights") if weights else None
    records = session.test(locate(c.engine.prefix, probe=False, gpus=True), run_dir, chosen, batches)
    for r in records:
        net = f", test net #{r.net}" if len(records) > 1 else ""
        print(f"caffe test on {r.weights.name}{net}, {r.batches} batches: "
              + ", ".join(f"{k} {v:.4f}" for k, v in r.outputs.items()))


@task(name="time", help={"model": "model name", "batch_size": "batch size (default: the model's)",
                         "gpu": "cpu, all or ids", "iterations": "timed forward-backward passes (default 10)",
                         "top": "layers to show (default 15)"})
def time_(c: Any, model: str = "lenet", batch_size: str | None = None, gpu: str = "cpu",
          iterations: str | None = None, top: str | None = None) -> None:
    """`caffe time` on a model: per-layer forward/backward times, costliest first."""
    batch = count(batch_size, "--batch-size")
    passes = count(iterations, "--iterations") or 10
    shown = count(top, "--top") or 15
    engine = locate(c.engine.prefix, probe=False, gpus=True)
    caffe = import_caffe(engine)
    m = declaration.get(model, c.model.dir)
    batch = batch or m.batch[0]
    net = builders.deploy(caffe, m, builders.shape_of(m), batch=batch)
    net.force_backward = True  # time the backward pass although a deploy net has no loss
    chosen = devices.choose(engine, gpu)
    with tempfile.TemporaryDirectory(prefix="caffetool-time-") as tmp:
        path = Path(tmp) / f"{m.name}.prototxt"
        path.write_text(prototxt.to_text(net))
        layers, averages = caffe_commands.caffe_time(engine, path, passes, chosen.flag)
    total = sum(t.total_ms for t in layers) or 1.0
    print(f"{m.name}, batch {batch}, {chosen.label}, {passes} iterations: "
          f"forward {averages.get('forward', 0):.2f} ms, backward {averages.get('backward', 0):.2f} ms")
    print(f"{'layer':<28} {'forward ms':>11} {'backward ms':>12} {'share':>7}")
    for t in layers[:shown]:
        print(f"{t.layer:<28} {t.forward_ms:>11.3f} {t.backward_ms:>12.3f} {t.total_ms / total:>6.1%}")


@task(help={"log": "any Caffe training log", "out": "folder for metrics.csv/json (default: beside the log)"})
def parse(c: Any, log: str, out: str | None = None) -> None:
    """Parse any Caffe log into metrics.csv and metrics.json."""
    metrics = parse_file(Path(log))
    folder = Path(out) if out else Path(log).absolute().parent
    stem = Path(log).stem
    csv_path = metrics_io.write_csv(metrics, folder / f"{stem}.metrics.csv")
    json_path = metrics_io.write_json(metrics, folder / f"{stem}.metrics.json")
    tests = ", ".join(f"net #{k}: {len(v)} tests" for k, v in sorted(metrics.test.items())) or "no tests"
    print(f"{metrics.net_name or 'net'}: {len(metrics.train)} train rows, {tests}; "
          f"{'finished' if metrics.done else 'not finished'} -> {csv_path}, {json_path}")


@task(name="report", help={
    "runs": "run names or directories, separated by commas (the first is the baseline)",
    "out": "folder for the Markdown and PNG (default: runs/reports)", "runs_dir": "where runs are"})
def report_(c: Any, runs: str, out: str | None = None, runs_dir: str | None = None) -> None:
    """Compare runs side by side: devices, iterations, wall time, iter/s, accuracy, speed-up."""
    from caffetool.runs import comparison  # noqa: PLC0415 - matplotlib only when reporting

    runs_root = Path(pick(runs_dir, c.runs.dir))
    names = [r for r in runs.replace(",", " ").split() if r]
    manifests = [ownership.settle(runrecord.find(runs_root, r)) for r in names]
    if not manifests:
        raise ConfigError("name at least one run: invoke train.report RUN[,RUN...]")
    cells = comparison.table(manifests)
    print(comparison.text(cells))
    stem = "report-" + "-vs-".join(m.name for m in manifests)[:120]
    md, png = comparison.write(cells, Path(out) if out else runs_root / "reports", stem)
    print(f"written: {md}, {png}")


ns = Collection("train", run, resume, test_, time_, parse, report_)
