"""``caffetool train``, ``train.resume`` and ``train.test``: a run directory from setup to its complete record.

Setup reuses the data and model layers (a missing data set is fetched, the three prototxt files
are generated and validated into the run directory); then the runner trains, and the manifest,
``metrics.csv``/``metrics.json``, ``plots/`` and the TensorBoard events are written — during the
run and at its end, the manifest first, so the outcome is on record even when the disk is too full
for the rest. A finished run's test nets are measured at its last iteration before the end is
recorded (:mod:`caffetool.train.final_test`). While the run trains, its manifest names this process
as the owner (:mod:`caffetool.runs.ownership`). A run given a tracking target is also logged to MLflow
as it trains (:mod:`caffetool.track`); a resumed one goes on in the MLflow run its manifest names.
"""

from __future__ import annotations

import datetime as dt
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from caffetool import extras, fsio, track
from caffetool.data import layout, lookup
from caffetool.engine import EngineInfo, cpu_threads, cudnn_settings, import_caffe
from caffetool.engine.locate import caffe_env
from caffetool.errors import CaffeRefused, CaffetoolError, ConfigError, PythonLayerError, RunError
from caffetool.nets import check, declaration, generate, project, prototxt, solvers, testnets
from caffetool.runs import final_figures, metrics_io, ownership, rundir, runrecord, snapshots
from caffetool.runs.folder import RunFolder
from caffetool.runs.logparse import LogParser, Metrics, parse_file
from caffetool.track.live import LiveRun
from caffetool.backends import devices
from caffetool.train import final_test, runevents, runner

# What the engine's CPU speed depends on, recorded as Caffe gets it (caffe_env adds the BLAS kernels).
THREAD_VARIABLES = (*cpu_threads.VARIABLES, cpu_threads.ADAPT, *cpu_threads.USER_PLACEMENT, "OPENBLAS_CORETYPE",
                    "MKL_DISABLE_FAST_MM", "MKL_CBWR")


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
    solver: str | Path | None = None  # the user's own solver.prototxt, relative to the working directory
    deploy: str | Path | None = None
    labels: str | Path | None = None
    type_given: bool = False  # --type was on the command line: it replaces the solver file's type
    # For a caller that drives the run from another thread (a sweep's trial): the metrics after
    # every line of Caffe's output, a stop to ask for (snapshot, then stop), more for the manifest.
    on_metrics: runner.OnMetrics | None = None
    stop: runner.StopRequest | None = None
    record: dict[str, Any] | None = None
    # Where the run is logged in MLflow (a sweep's trial: as a child of the sweep's run); None: nowhere.
    tracking: track.TrackingTarget | None = None


@dataclass
class TrainResult:
    run_dir: Path
    outcome: runner.RunOutcome
    manifest: runrecord.Manifest
    weights: Path | None = None  # the newest complete .caffemodel, for the summary


@dataclass
class TestRecord:
    weights: Path
    net: int  # the test net's place in the solver
    batches: int
    outputs: dict[str, float]


def train(engine: EngineInfo, req: TrainRequest, say: Callable[[str], None] = print,
          progress: bool = True) -> TrainResult:
    started, t0 = runrecord.now(), time.monotonic()
    chosen = devices.choose(engine, req.gpu)  # refused here, before anything is created
    if chosen.notice:
        say(chosen.notice)
    options = req.options or solvers.SolverOptions()
    options.mode = "gpu" if chosen.gpu else "cpu"
    if req.solver is not None:
        return _train_project(engine, req, chosen, options, say, progress, started, t0)
    model = declaration.get(req.model, req.models_dir)
    if req.weights and not Path(req.weights).is_file():
        raise ConfigError(f"--weights {req.weights} does not exist")
    dataset = lookup.find(req.dataset, req.data_dir, fetch_missing=True, say=say, progress=progress)
    caffe_pb2 = import_caffe(engine).proto.caffe_pb2
    with rundir.released_on_failure(rundir.claim(Path(req.runs_dir).absolute(), req.name)) as run_dir:
        # Caffe validates the files as the first step of the run (see _train_and_record).
        generated = generate.generate(engine, model, dataset, run_dir, options, req.batch, req.test_batch,
                                      validate=False)
        shutil.copyfile(dataset.labels_file, RunFolder(run_dir).labels)
        solver_msg = prototxt.read(generated.files[generate.SOLVER], caffe_pb2.SolverParameter())
        if chosen.gpu:
            _preflight(engine, prototxt.read(generated.files[generate.TRAIN_VAL], caffe_pb2.NetParameter()), dataset.shape,
                       options.type, options.iter_size, say)
        if req.weights:
            _check_weights(engine, run_dir, Path(req.weights), say)
        argv = runner.caffe_train_argv(engine, generate.SOLVER, chosen.flag,
                                       str(Path(req.weights).absolute()) if req.weights else None)
        record = _open_record(engine, run_dir, model.name, dataset, chosen, started, t0, req, argv, solver_msg,
                              options.type)
    say(f"run {run_dir.name}: {model.name} on {dataset.name}, {solver_msg.max_iter} iterations, {chosen.label}")
    result = _train_and_record(argv, record, solver_msg.max_iter, progress, t0, caffe_pb2, say,
                               engine=engine, on_metrics=req.on_metrics, stop=req.stop, tracking=req.tracking)
    return _started(result, "the generated net")


def _train_project(engine: EngineInfo, req: TrainRequest, chosen: devices.Devices, options: solvers.SolverOptions,
                   say: Callable[[str], None], progress: bool, started: str, t0: float) -> TrainResult:
    """Train the user's own solver (``--solver FILE``) from copies in a new run directory."""
    if req.weights and not Path(req.weights).is_file():
        raise ConfigError(f"--weights {req.weights} does not exist")
    for flag, given in (("--labels", req.labels), ("--deploy", req.deploy)):
        if given and not Path(given).is_file():
            raise ConfigError(f"{flag} {given} does not exist")
    caffe_pb2 = import_caffe(engine).proto.caffe_pb2
    if req.deploy:
        project.check_deploy(Path(req.deploy), caffe_pb2)
    loaded = project.load(req.solver, engine, caffe_pb2)
    device_notice = project.override(loaded, options, chosen.gpu, caffe_pb2, req.type_given)
    project.set_batches(loaded, req.batch, req.test_batch, caffe_pb2)
    project.check(loaded, caffe_pb2)
    for notice in [*loaded.notices, *([device_notice] if device_notice and not chosen.notice else [])]:
        say(notice)
    files = project.checksums(loaded.reads + [Path(p) for p in (req.weights, req.deploy, req.labels) if p])
    shape = project.data_shape(loaded.train_net, caffe_pb2)
    if project.has_python_layers(loaded):
        check.python_layers(engine, Path.cwd(), str(loaded.source))
    if chosen.gpu and shape is None and any(layer.type == "Data" for layer in loaded.train_net.layer):
        say("no memory check before training: the size of the Data layer's images is unknown (encoded records)")
    elif chosen.gpu:
        tests = tuple(project.with_test_state(net, loaded.solver, i, caffe_pb2)
                      for i, net in enumerate(loaded.test_nets))
        _preflight(engine, loaded.train_net, shape, loaded.solver.type, loaded.solver.iter_size, say, tests)
    with rundir.released_on_failure(rundir.claim(Path(req.runs_dir).absolute(), req.name)) as run_dir:
        project.write(loaded, run_dir, caffe_pb2)
        derived = None if req.deploy else project.deploy(loaded.train_net, caffe_pb2)
        if req.deploy:
            shutil.copyfile(req.deploy, RunFolder(run_dir).deploy)
        elif derived is not None:
            fsio.write_atomic(RunFolder(run_dir).deploy, prototxt.to_text(derived))
        if req.labels:
            shutil.copyfile(req.labels, RunFolder(run_dir).labels)
        if req.weights:
            _check_weights(engine, run_dir, Path(req.weights), say)
        argv = runner.caffe_train_argv(engine, generate.SOLVER, chosen.flag,
                                       str(Path(req.weights).absolute()) if req.weights else None)
        s = loaded.solver
        record = _open_record(engine, run_dir, Path(req.solver).stem, None, chosen, started, t0, req, argv, s,
                              s.type or "SGD", project={
                                  "solver": str(loaded.source), "cwd": str(Path.cwd()), "files_sha256": files,
                                  "original_solver": prototxt.to_text(loaded.original),
                                  "effective_solver": prototxt.to_text(loaded.solver)})
    say(f"run {run_dir.name}: {req.solver}, {s.max_iter} iterations, {chosen.label}")
    result = _train_and_record(argv, record, s.max_iter, progress, t0, caffe_pb2, say, engine=engine,
                               on_metrics=req.on_metrics, stop=req.stop, tracking=req.tracking)
    return _started(result, str(req.solver))


def _check_weights(engine: EngineInfo, run_dir: Path, weights: Path, say: Callable[[str], None],
                   complete: bool = False) -> None:
    """Refuse ``weights`` that hold nothing for the run's train net (Caffe would train from scratch
    without a word, :mod:`caffetool.nets.weights`); name the layers that start from their fillers."""
    fresh = check.validate(engine, run_dir, generate.SOLVER, weights=str(weights.absolute()), complete=complete)["fresh"]
    if fresh:
        say(f"{weights.name} has no weights for {', '.join(fresh)}: {'it starts' if len(fresh) == 1 else 'they start'} "
            "from the net's fillers")


class NothingToResume(RunError):
    """A run stopped before its first complete snapshot: there is nothing to continue from."""


def _started(result: TrainResult, what: str) -> TrainResult:
    """``result``, unless Caffe refused ``what`` before its first iteration: that is a validation
    failure (a ``CHECK`` that failed), and the run never started, so its directory goes. A Caffe
    that crashed while setting up (a Python layer's exception, a signal) is a failed run: its
    record and ``caffe.log`` stay for the user to read."""
    m = result.outcome.metrics
    if result.outcome.status == "failed" and m.started is None:
        if m.fatal:
            rundir.release(result.run_dir)
            raise CaffeRefused(f"Caffe refused {what}: {m.fatal}")
        raise RunError(f"{result.outcome.message}\nthe run's record and caffe.log are in {result.run_dir}")
    return result


def _preflight(engine: EngineInfo, net: Any, shape: tuple[int, int, int] | None, solver_type: str, iter_size: int,
               say: Callable[[str], None], test_nets: tuple[Any, ...] | None = None) -> None:
    """The memory check of a GPU run (:mod:`caffetool.train.preflight`) on each visible GPU, with the
    solver's test nets when they are given (a ``--solver`` run's, with their states), keeping free
    what the engine's context takes on the GPU (:mod:`caffetool.memory.reserve`)."""
    from caffetool.memory import estimator  # noqa: PLC0415
    from caffetool.train import preflight  # noqa: PLC0415

    options = estimator.Options(solver=solver_type or "SGD", mode="gpu", input_shape=shape, iter_size=iter_size,
                          test_nets=test_nets)
    capacities = preflight.gpu_memory()
    if capacities:
        from caffetool.memory import reserve  # noqa: PLC0415

        preflight.check(net, options, capacities, reserve.reserve(engine, say=say), say=say)


def resume(engine: EngineInfo, run_dir: Path, max_iter: int | None = None, progress: bool = True,
           say: Callable[[str], None] = print, *, on_metrics: runner.OnMetrics | None = None,
           stop: runner.StopRequest | None = None, record: dict[str, Any] | None = None,
           tracking: track.TrackingTarget | None = None) -> TrainResult:
    """Continue ``run_dir`` from its newest complete snapshot; output appends to caffe.log.

    A run left ``running`` by a process that is gone is taken over; one whose process still
    trains it is refused. ``on_metrics``, ``stop``, ``record`` and ``tracking`` are
    :class:`TrainRequest`'s (``record`` replaces those entries of the manifest); with tracking on, the
    run goes on in the store and MLflow run its manifest names (:func:`caffetool.track.continued`).
    """
    t0 = time.monotonic()
    manifest = ownership.own(run_dir)
    run = runrecord.Record(run_dir, manifest)
    caffe_pb2 = import_caffe(engine).proto.caffe_pb2
    solver_file = RunFolder(run_dir).solver
    msg = prototxt.read(solver_file, caffe_pb2.SolverParameter())
    start = snapshots.newest_complete(run_dir, caffe_pb2, msg.type or "SGD",
                                      skipped=lambda snap, why: say(f"not resuming from {snap.name}: {why}"))
    if start is None or start.state is None:
        raise NothingToResume(f"{run_dir} has no complete .solverstate snapshot to resume from")
    if max_iter is not None:
        msg.max_iter = max_iter
        fsio.write_atomic(solver_file, prototxt.to_text(msg), RunError)
    chosen = devices.choose(engine, "auto" if manifest.device.get("gpu") else "cpu")
    state = str(start.state.relative_to(run_dir))
    argv = runner.caffe_train_argv(engine, generate.SOLVER, chosen.flag, snapshot=state)
    resumed = {"at": runrecord.now(), "from": state, "max_iter": msg.max_iter, "caffe_command": argv}
    run.update(resumes=[*manifest.resumes, resumed], **(record or {}))
    say(f"resuming {run_dir.name} from {start.state.name} up to iteration {msg.max_iter}")
    target, continue_run = track.continued(tracking, manifest.tracking or None)
    return _train_and_record(argv, run, msg.max_iter, progress, t0, caffe_pb2, say, resumed=True,
                             engine=engine, on_metrics=on_metrics, stop=stop, tracking=target,
                             continue_run=continue_run)


def test(engine: EngineInfo, run_dir: Path, weights: str | Path | None = None,
         batches: int | None = None) -> list[TestRecord]:
    """``caffe test`` on every test net of a run's solver, on its newest complete weights (or
    ``weights``), recorded in its manifest.

    ``batches`` defaults to each test net's ``test_iter``, the number the run itself tested it on.
    """
    manifest = ownership.settle(run_dir)
    caffe_pb2 = import_caffe(engine).proto.caffe_pb2
    chosen_weights = Path(weights) if weights else snapshots.newest_weights(run_dir, caffe_pb2)
    if chosen_weights is None:
        raise RunError(f"{run_dir} has no .caffemodel yet; give --weights FILE")
    if weights:
        _check_weights(engine, run_dir, chosen_weights, print, complete=True)
    nets = testnets.test_nets(RunFolder(run_dir).solver, run_dir, caffe_pb2)
    if not nets:
        raise RunError(f"{RunFolder(run_dir).solver} has no test net (no test_iter); nothing to test")
    chosen = devices.choose(engine, "auto" if manifest.device.get("gpu") else "cpu")
    records = []
    for t in nets:
        result = final_test.caffe_test_net(engine, run_dir, t, chosen_weights.absolute(), chosen.flag, batches)
        final_test.keep_log(run_dir, f"train.test of test net #{t.index} on {chosen_weights.name}", result.log)
        records.append(TestRecord(chosen_weights, t.index, result.batches, result.outputs))
    at = dt.datetime.now().isoformat(timespec="seconds")
    runrecord.update(run_dir, lambda manifest: manifest.tests.extend(
        {"at": at, "weights": str(chosen_weights), "net": r.net, "batches": r.batches, "outputs": r.outputs}
        for r in records))
    return records


def _train_and_record(argv: list[str], record: runrecord.Record, max_iter: int, progress: bool,
                      t0: float, caffe_pb2: ModuleType, say: Callable[[str], None],
                      resumed: bool = False, *, engine: EngineInfo,
                      on_metrics: runner.OnMetrics | None = None,
                      stop: runner.StopRequest | None = None, tracking: track.TrackingTarget | None = None,
                      continue_run: str | None = None) -> TrainResult:
    """Trains with ``argv``, then measures the test nets at the last iteration where Caffe did not
    (:mod:`caffetool.train.final_test`) and records it all: manifest, metrics, plots, TensorBoard, and
    with ``tracking`` MLflow (``continue_run``: the MLflow run of an earlier session). The manifest is
    written when the run starts, when it ends (first, so the outcome is on record even on a full disk)
    and once the final test figures are in."""
    run_dir, manifest = record.run_dir, record.data
    parser = LogParser()
    if resumed and RunFolder(run_dir).log.exists():
        with open(RunFolder(run_dir).log, errors="replace") as f:
            for line in f:
                parser.feed(line)
        parser.metrics.fatal = parser.metrics.diverged_at = None  # how an earlier session ended is not this one's
        final_figures.restore(parser.metrics, manifest.final)
    record.update(status="running")
    ownership.keep_room(run_dir)
    title = f"{run_dir.name}: {manifest.model or 'net'} on {manifest.dataset.get('name', 'its data')}"
    events: runevents.RunEvents | None = None
    if tracking is not None and extras.missing("mlflow") is not None:
        say(f"note: {run_dir.name} is not tracked: MLflow is not installed here ({extras.install_command('mlflow')} "
            f"tracks every training; `caffetool track.import {run_dir.name}` then logs this one)")
        tracking = None
    tracker = LiveRun(tracking, run_dir, parser.metrics, caffe_pb2, say, continue_run) if tracking else None
    try:
        events = runevents.RunEvents(RunFolder(run_dir).tensorboard, parser.metrics)
        outcome = runner.run(argv, run_dir, max_iter, progress, parser=parser, events=events,
                             on_update=lambda metrics: _write_outputs(metrics, run_dir, title),
                             on_metrics=on_metrics, stop=stop, tracker=tracker)
    except RunError as e:  # Caffe could not even start, or its events could not be written
        if events is not None:
            events.discard()
        ownership.give_back_room(run_dir)
        record.update(status="failed", exit_code=None, message=str(e), ended_at=runrecord.now())
        if tracker is not None:
            tracker.finish(None)
        raise
    finally:
        ownership.give_back_room(run_dir)
    m = outcome.metrics
    if outcome.status == "failed" and not m.fatal and not m.python_error and _python_abort(run_dir):
        outcome = _named_python_error(engine, run_dir, outcome)
    timings = {
        "setup": manifest.timings_s.get("setup", 0.0),
        "training": round(max(0.0, outcome.seconds - m.testing_seconds), 3),
        "testing": round(m.testing_seconds, 3),
        "total": round(time.monotonic() - t0, 3),
    }
    if m.started and m.last_time:
        timings["solving"] = round((m.last_time - m.started).total_seconds(), 3)
    record.update(status=outcome.status, exit_code=outcome.exit_code, message=outcome.message,
                  ended_at=runrecord.now(), iterations=m.iteration, final=final_figures.last_figures(m),
                  samples=outcome.samples, timings_s=timings,
                  threads=manifest.threads | {"resized": [list(r) for r in m.threads]})
    if outcome.status == "finished":
        final = _measure_final(engine, argv, run_dir, m, caffe_pb2, say)
        record.update(final=final_figures.last_figures(m) | final.record(),
                      timings_s=timings | {"final_test": final.seconds, "total": round(time.monotonic() - t0, 3)})
    try:
        _write_outputs(m, run_dir, title)
    except RunError as e:
        say(f"the run's outcome is recorded, but not its metrics and plots: {e}")
    try:
        events.update(m)
        events.close()
    except RunError as e:
        events.discard()
        say(f"the run's outcome is recorded, but not all of its TensorBoard events: {e}")
    weights = snapshots.newest_weights(run_dir, caffe_pb2)
    if tracker is not None:
        _end_tracking(tracker, record, m, weights)
    return TrainResult(run_dir, outcome, record.data, weights)


def _end_tracking(tracker: LiveRun, record: runrecord.Record, m: Metrics, weights: Path | None) -> None:
    """The end of the run in MLflow; a run Caffe refused before its first iteration (whose folder
    :func:`_started` removes) is removed there too."""
    if record.data.status == "failed" and m.started is None and m.fatal:
        tracker.discard()
        return
    tracker.update(m)
    tracked = tracker.finish(weights)
    if tracked is not None and record.data.tracking != tracked:
        try:
            record.update(tracking=tracked)
        except RunError:
            pass  # the run is tracked; only its manifest does not say so


def _python_abort(run_dir: Path) -> bool:
    """Whether the log ends with libcaffe's abort on a Python exception that Caffe did not print."""
    try:
        with open(RunFolder(run_dir).log, "rb") as f:
            f.seek(max(0, f.seek(0, 2) - 16384))
            return runner.PYTHON_ABORT.encode() in f.read()
    except OSError:
        return False


def _named_python_error(engine: EngineInfo, run_dir: Path, outcome: runner.RunOutcome) -> runner.RunOutcome:
    """``outcome`` with the Python layer's exception named: Caffe aborts without printing one raised in
    a layer's ``setup`` or passes, so the run's nets are built again in pycaffe (a child, as Caffe
    runs them), where the exception reaches Python and its last line is read."""
    try:
        check.validate(engine, run_dir, generate.SOLVER)
    except PythonLayerError as e:
        outcome.metrics.python_error = e.error
        outcome.message = runner.python_layer_failure(e.error, outcome.exit_code or 0)
    except CaffetoolError:
        pass  # the nets build in pycaffe: the run's own message stands
    return outcome


def _measure_final(engine: EngineInfo, argv: list[str], run_dir: Path, m: Metrics, caffe_pb2: ModuleType,
                   say: Callable[[str], None]) -> final_test.Final:
    """The test nets at the last iteration, on the solver and devices ``argv`` trained with."""
    solver = run_dir / runrecord.flag_value(argv, "solver")
    gpus = runrecord.flag_value(argv, "gpu")
    return final_test.measure(engine, run_dir, solver, m, ["-gpu", gpus] if gpus else [], caffe_pb2, say)


def _write_outputs(metrics: Metrics, run_dir: Path, title: str) -> None:
    """metrics.csv, metrics.json and the plots, from what the log has shown so far."""
    metrics_io.write_csv(metrics, RunFolder(run_dir).metrics_csv)
    metrics_io.write_json(metrics, RunFolder(run_dir).metrics_json)
    if metrics.train or metrics.test:
        from caffetool.train import plots  # noqa: PLC0415 - matplotlib costs 0.3 s to import

        plots.write_plots(metrics, RunFolder(run_dir).plots, title)


def _open_record(engine: EngineInfo, run_dir: Path, model: str, dataset: layout.Dataset | None,
                 chosen: devices.Devices, started: str, t0: float, req: TrainRequest, argv: list[str], solver: Any,
                 solver_type: str, **extra: Any) -> runrecord.Record:
    """The run's first manifest (:func:`caffetool.runs.runrecord.new`), for both kinds of run: what
    trains it, the request's own entries, this process as its owner; written before Caffe starts."""
    data = runrecord.new(
        engine.record(), engine.gpus, run_dir, model,
        {"name": dataset.name, "path": str(dataset.path), "backend": dataset.backend,
         "files": dataset.manifest.get("files"), "counts": {s: dataset.count(s) for s in ("train", "test")}}
        if dataset else {"name": "its data"},
        {"gpu": chosen.gpu, "label": chosen.label, "flag": chosen.flag,
         "cudnn": cudnn_settings.in_force(caffe_env()) if chosen.gpu and engine.manifest["options"].get("use_cudnn") else None},
        {k: caffe_env().get(k) for k in THREAD_VARIABLES} | {"plan": _thread_plan()}, started)
    data.set(**(req.record or {}))
    data.set(caffe_command=argv, **extra,
                solver={"type": solver_type, "max_iter": solver.max_iter, "base_lr": solver.base_lr,
                        "lr_policy": solver.lr_policy},
                timings_s={"setup": round(time.monotonic() - t0, 3)})
    ownership.take(run_dir, data)
    record = runrecord.Record(run_dir, data)
    runrecord.write(run_dir, data)
    return record


def _thread_plan() -> dict[str, Any]:
    """How the run's thread count is decided, for its manifest: fixed, or following the CPU it gets
    (the cores it may use, a container's quota, and what else runs: :mod:`caffetool.engine.cpu_threads`)."""
    env = caffe_env()
    return {"adaptive": cpu_threads.adaptive(env), "cores": cpu_threads.available(),
            "quota": cpu_threads.quota_cores(), "budget": cpu_threads.budget()}


def reparse(run_dir: Path) -> Metrics:
    """Metrics of a run from its caffe.log (for reports and train.parse)."""
    log = RunFolder(run_dir).log
    if not log.exists():
        raise RunError(f"{log} does not exist")
    return parse_file(log)
