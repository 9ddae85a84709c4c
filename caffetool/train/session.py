"""``invoke train`` and ``train.resume``: a run directory from setup to its complete record.

Setup reuses the data and model layers (a missing data set is fetched, the three prototxt files
are generated and validated into the run directory); then the runner trains, and the manifest,
``metrics.csv``/``metrics.json`` and ``plots/`` are written — during the run and at its end.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import caffetool
from caffetool.data import fetch, layout, registry
from caffetool.engine import EngineInfo
from caffetool.errors import CaffetoolError, ConfigError
from caffetool.nets import generate, model as models, prototxt, solver as solvers
from caffetool.train import devices, metrics_io, rundir, runner
from caffetool.train.logparse import LogParser, Metrics, parse_file

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_CORETYPE")


@dataclass
class TrainRequest:
    model: str = "lenet"
    dataset: str = "fashion-mnist"
    options: solvers.SolverOptions | None = None
    gpu: str = "auto"
    name: str | None = None
    weights: str | None = None
    batch: int | None = None
    test_batch: int | None = None
    data_dir: str | Path | None = None
    runs_dir: str | Path = "runs"
    models_dir: str | Path | None = None


@dataclass
class TrainResult:
    run_dir: Path
    outcome: runner.RunOutcome
    manifest: dict


def train(engine: EngineInfo, req: TrainRequest, say: Callable[[str], None] = print,
          progress: bool = True) -> TrainResult:
    started, t0 = _now(), time.monotonic()
    chosen = devices.choose(engine, req.gpu)  # refused here, before anything is created
    if chosen.notice:
        say(chosen.notice)
    options = req.options or solvers.SolverOptions()
    options.mode = "gpu" if chosen.gpu else "cpu"
    spec = registry.get(req.dataset)
    model = models.get(req.model, req.models_dir)
    if req.weights and not Path(req.weights).is_file():
        raise ConfigError(f"--weights {req.weights} does not exist")
    dataset = fetch.fetch(spec, req.data_dir, say=say, progress=progress).dataset
    run_dir = rundir.claim(Path(req.runs_dir).absolute(), req.name)
    try:
        # Caffe validates the files as the first step of the run (see _train_and_record).
        generated = generate.generate(engine, model, dataset, run_dir, options, req.batch, req.test_batch,
                                      validate=False)
        shutil.copyfile(dataset.labels_file, run_dir / layout.LABELS)
    except BaseException:
        rundir.release(run_dir)  # Caffe never ran here: leave nothing behind
        raise
    solver_msg = prototxt.read(generated.files["solver.prototxt"], _solver_message(engine))
    if chosen.gpu:
        try:
            _preflight(engine, generated.files["train_val.prototxt"], model, dataset, options)
        except BaseException:
            rundir.release(run_dir)
            raise
    manifest = _manifest(engine, run_dir, model.name, dataset, chosen, started)
    argv = runner.caffe_train_argv(engine, "solver.prototxt", chosen.flag,
                                   str(Path(req.weights).absolute()) if req.weights else None)
    manifest["caffe_command"] = argv
    manifest["solver"] = {"type": options.type, "max_iter": solver_msg.max_iter,
                          "base_lr": solver_msg.base_lr, "lr_policy": solver_msg.lr_policy}
    manifest["timings_s"] = {"setup": round(time.monotonic() - t0, 3)}
    rundir.write_manifest(run_dir, manifest)
    say(f"run {run_dir.name}: {model.name} on {dataset.name}, {solver_msg.max_iter} iterations, {chosen.label}")
    result = _train_and_record(argv, run_dir, manifest, solver_msg.max_iter, progress, t0)
    if result.outcome.status == "failed" and result.outcome.metrics.started is None:
        # Caffe refused the net before its first iteration: that is a validation failure, and
        # the run never started, so its directory goes.
        rundir.release(run_dir)
        fatal = result.outcome.metrics.fatal or result.outcome.message
        raise ConfigError(f"Caffe refused the generated net: {fatal}")
    return result


def _preflight(engine: EngineInfo, train_val: Path, model, dataset: layout.Dataset,
               options: solvers.SolverOptions) -> None:
    from caffetool.engine import import_caffe  # noqa: PLC0415
    from caffetool.memory import estimate as est  # noqa: PLC0415
    from caffetool.train import preflight  # noqa: PLC0415

    net = prototxt.read(train_val, import_caffe(engine).proto.caffe_pb2.NetParameter())
    preflight.check(net, est.Options(solver=options.type, mode="gpu", input_shape=dataset.shape),
                    preflight.gpu_memory())


def resume(engine: EngineInfo, run_dir: Path, max_iter: int | None = None, progress: bool = True,
           say: Callable[[str], None] = print) -> TrainResult:
    """Continue ``run_dir`` from its newest ``.solverstate``; output appends to caffe.log."""
    t0 = time.monotonic()
    manifest = rundir.read_manifest(run_dir)
    state = newest_solverstate(run_dir)
    if state is None:
        raise ConfigError(f"{run_dir} has no .solverstate snapshot to resume from")
    solver_file = run_dir / "solver.prototxt"
    msg = prototxt.read(solver_file, _solver_message(engine))
    if max_iter is not None:
        msg.max_iter = max_iter
        prototxt.write_atomic(solver_file, prototxt.to_text(msg))
    chosen = devices.choose(engine, "auto" if manifest.get("device", {}).get("gpu") else "cpu")
    argv = runner.caffe_train_argv(engine, "solver.prototxt", chosen.flag, snapshot=str(state.relative_to(run_dir)))
    manifest.setdefault("resumes", []).append({"at": _now(), "from": str(state.relative_to(run_dir)),
                                                "max_iter": msg.max_iter, "caffe_command": argv})
    say(f"resuming {run_dir.name} from {state.name} up to iteration {msg.max_iter}")
    return _train_and_record(argv, run_dir, manifest, msg.max_iter, progress, t0, resumed=True)


def _train_and_record(argv: list[str], run_dir: Path, manifest: dict, max_iter: int, progress: bool,
                      t0: float, resumed: bool = False) -> TrainResult:
    parser = LogParser()
    if resumed and (run_dir / runner.LOG).exists():
        with open(run_dir / runner.LOG, errors="replace") as f:
            for line in f:
                parser.feed(line)
    manifest["status"] = "running"
    rundir.write_manifest(run_dir, manifest)
    title = f"{run_dir.name}: {manifest['model']} on {manifest['dataset']['name']}"

    def refresh(metrics: Metrics, final: bool) -> None:
        metrics_io.write_csv(metrics, run_dir / "metrics.csv")
        metrics_io.write_json(metrics, run_dir / "metrics.json")
        if metrics.train or metrics.test:
            from caffetool.train import plots  # noqa: PLC0415 - matplotlib costs 0.3 s to import

            plots.write_plots(metrics, run_dir / "plots", title)

    outcome = runner.run(argv, run_dir, max_iter, progress, on_update=refresh, parser=parser)
    m = outcome.metrics
    manifest.update(
        status=outcome.status, exit_code=outcome.exit_code, message=outcome.message, ended_at=_now(),
        iterations=m.iteration, final=_final(m), samples=outcome.samples,
    )
    setup = manifest.get("timings_s", {}).get("setup", 0.0)
    manifest["timings_s"] = {
        "setup": setup,
        "training": round(max(0.0, outcome.seconds - m.testing_seconds), 3),
        "testing": round(m.testing_seconds, 3),
        "total": round(time.monotonic() - t0, 3),
    }
    if m.started and m.last_time:
        manifest["timings_s"]["solving"] = round((m.last_time - m.started).total_seconds(), 3)
    rundir.write_manifest(run_dir, manifest)
    return TrainResult(run_dir, outcome, manifest)


def _final(m: Metrics) -> dict:
    out = {"iteration": m.iteration, "train_loss": m.latest("loss", -1)}
    for net, rows in sorted(m.test.items()):
        if rows:
            out[f"test{net}"] = {k: v for k, v in rows[-1].items() if k not in ("Seconds", "LearningRate")}
    return out


def newest_solverstate(run_dir: Path) -> Path | None:
    states = list((run_dir / generate.SNAPSHOTS).glob("*.solverstate"))
    return max(states, key=_iteration_of, default=None)


def _iteration_of(path: Path) -> int:
    try:
        return int(path.stem.rsplit("_iter_", 1)[1])
    except (IndexError, ValueError):
        return -1


def _solver_message(engine: EngineInfo):
    from caffetool.engine import import_caffe  # noqa: PLC0415

    return import_caffe(engine).proto.caffe_pb2.SolverParameter()


def _manifest(engine: EngineInfo, run_dir: Path, model: str, dataset: layout.Dataset,
              chosen: devices.Devices, started: str) -> dict:
    return {
        "name": run_dir.name,
        "status": "setting-up",
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "model": model,
        "dataset": {"name": dataset.name, "path": str(dataset.path), "backend": dataset.backend,
                    "files": dataset.manifest.get("files"), "counts": {s: dataset.count(s) for s in ("train", "test")}},
        "device": {"gpu": chosen.gpu, "label": chosen.label, "flag": chosen.flag},
        "engine": {"prefix": str(engine.prefix), "manifest": engine.manifest},
        "host": _host(engine),
        "threads": {k: os.environ.get(k) for k in THREAD_VARIABLES},
        "caffetool": {"version": caffetool.__version__, "git_commit": _git_commit()},
        "started_at": started,
    }


def _host(engine: EngineInfo) -> dict:
    cpu = None
    try:
        cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                    if line.startswith("model name")), None)
    except OSError:
        pass
    return {"hostname": socket.gethostname(), "platform": platform.platform(), "cpu": cpu,
            "cpus": os.cpu_count(), "gpus": engine.gpus}


def _git_commit() -> str | None:
    root = Path(caffetool.__file__).resolve().parents[1]
    try:
        done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).astimezone().isoformat(timespec="seconds")


def reparse(run_dir: Path) -> Metrics:
    """Metrics of a run from its caffe.log (for reports and train.parse)."""
    log = run_dir / runner.LOG
    if not log.exists():
        raise CaffetoolError(f"{log} does not exist")
    return parse_file(log)
