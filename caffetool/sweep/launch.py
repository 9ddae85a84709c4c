"""A sweep from start to its record: checked, placed on Ray, stopped cleanly, resumable.

:func:`start` checks everything (the search space, the metric, the scheduler, the resources) before
Ray is touched, claims ``runs/<sweep>/`` and writes its plan to ``sweep.json``; then it connects
to a Ray cluster (``--address``) or starts a local one for the sweep alone, and runs Ray Tune's
``Tuner`` with one :class:`~caffetool.sweep.trial.CaffeTrial` per point of the space, each holding
``--cpus-per-trial`` CPUs or ``--gpus-per-trial`` GPUs, at most ``--max-concurrent`` at once. Tune's
own state goes to ``runs/<sweep>/tune/``; each trial's run to ``runs/<sweep>/trial-NNNNN/``.

Ctrl-C (or SIGTERM) stops the sweep in order (:mod:`caffetool.sweep.cluster`): every running
trial snapshots and records ``interrupted``, Tune saves its state, and a local Ray is shut down,
taking its workers with it (and Caffe with them: a run's Caffe dies with its parent). A second
Ctrl-C stops at once. :func:`resume` continues an interrupted sweep with ``Tuner.restore``:
unfinished trials continue their runs from their snapshots; finished, stopped and failed trials
stay as they are.

Limits: on a cluster the runs directory should be one shared folder (NFS or alike) for
``sweep.report`` to see every trial's run; without one, each trial's run stays on its node and the
report lists a trial whose run it cannot see with its parameters only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from caffetool import track
from caffetool.choices import Limit, bounded, choose
from caffetool.data import lookup
from caffetool.engine import EngineInfo, import_caffe
from caffetool.errors import ConfigError, RunError
from caffetool.nets import prototxt, solvers
from caffetool.runs import rundir
from caffetool.sweep import cluster, search, searchspace, sweeprecord, tracked

SCHEDULERS = ("fifo", "asha")
MODES = ("max", "min")
REDUCTION_FACTOR = 4  # ASHA's default (Li et al., "A System for Massively Parallel Hyperparameter Tuning")
TESTS_PER_TRIAL = 5  # a sweep's default test_interval: so many tests in a trial, for ASHA to compare
CPUS = Limit("a number of CPUs", 0, 1024, low_open=True)
GPUS = Limit("a number of GPUs", 0, 64)
SAMPLES = Limit("a number of samples", 1, 100_000, kind=int)
CONCURRENT = Limit("a number of trials", 1, 100_000, kind=int)
GRACE = Limit("an iteration count", 1, 2**31 - 1, kind=int)


@dataclass
class SweepOutcome:
    sweep_dir: Path
    status: str  # finished, interrupted
    seconds: float
    trials: list[dict[str, Any]]


def check(plan: sweeprecord.Plan, engine: EngineInfo) -> searchspace.Space:
    """Everything about ``plan`` that can be checked without Ray; fills in its settled numbers."""
    plan.metric = searchspace.parse_metric(plan.metric).name
    plan.mode = choose(plan.mode, MODES, "--mode")
    plan.scheduler = choose(plan.scheduler, SCHEDULERS, "--scheduler")
    plan.samples = int(bounded(plan.samples, "--samples", SAMPLES) or 1)
    plan.max_concurrent = bounded(plan.max_concurrent, "--max-concurrent", CONCURRENT)  # type: ignore[assignment]
    plan.cpus_per_trial = float(bounded(plan.cpus_per_trial, "--cpus-per-trial", CPUS) or 1)
    plan.gpus_per_trial = float(bounded(plan.gpus_per_trial, "--gpus-per-trial", GPUS) or 0)
    if plan.gpus_per_trial and engine.cpu_only:
        raise ConfigError(f"--gpus-per-trial {plan.gpus_per_trial:g} asks for GPUs, but the engine at "
                          f"{engine.prefix} was built CPU-only; use --cpus-per-trial")
    if plan.solver is not None and not Path(plan.solver).is_file():
        raise ConfigError(f"--solver {plan.solver} does not exist")
    if (plan.tracking_uri or "").strip() and plan.tracking_uri.strip().lower() != track.target.OFF:
        track.target.check_sqlite(plan.tracking_uri.strip())  # before Ray starts and the sweep's folder is made
    if plan.address is None:
        _fits_here(plan)
    project_nets = _check_project(plan, engine) if plan.solver is not None else None
    _check_metric(plan, engine, project_nets)
    space = searchspace.build(plan.params, plan.fixed)
    plan.search, plan.seed = search.settle(plan.search, plan.seed, plan.samples, space)
    if plan.samples > 1 and plan.search == "random" and not space.sampled:
        raise ConfigError("--samples draws from ranges (log:, uniform:, int:); this sweep has only grids "
                          "(--search grid --samples N repeats the grid N times)")
    plan.max_iter = max(_max_iter(plan, engine, trial) for trial in searchspace.corners(space))
    if plan.max_iter < 1:
        raise ConfigError(f"{plan.solver}: max_iter {plan.max_iter} trains nothing; set max_iter (or --max-iter) "
                          "to 1 or more")
    metric = searchspace.parse_metric(plan.metric)
    tested = plan.fixed.get("test_interval") or any(p.name == "test_interval" for p in space.params)
    if plan.scheduler == "asha" and metric.net >= 0 and not tested and plan.solver is None:
        interval = max(1, plan.max_iter // TESTS_PER_TRIAL)
        plan.fixed["test_interval"] = str(interval)
        if not plan.fixed.get("display") and all(p.name != "display" for p in space.params):
            # A test's row is whole at Caffe's next log event: a display line at each test makes
            # it reach the scheduler at once rather than up to a display interval later.
            plan.fixed["display"] = str(min(int(solvers.LENET_RECIPE["display"]), interval))
    if plan.grace is not None:
        plan.grace = int(bounded(plan.grace, "--grace", GRACE))  # type: ignore[arg-type]
        if plan.grace >= plan.max_iter:
            raise ConfigError(f"--grace {plan.grace} must be below the trials' {plan.max_iter} iterations")
    return space


def _fits_here(plan: sweeprecord.Plan) -> None:
    """A trial of a local sweep must fit this machine, or Ray would keep it pending for ever."""
    cpus = os.cpu_count() or 1
    if plan.cpus_per_trial > cpus:
        raise ConfigError(f"--cpus-per-trial {plan.cpus_per_trial:g} is more than this machine's {cpus} CPUs; a "
                          f"trial runs on one machine: give {cpus} or fewer (or --address a cluster with larger nodes)")


def _check_project(plan: sweeprecord.Plan, engine: EngineInfo) -> tuple[Any, list[Any]]:
    """The user's solver as every trial will load it, before Ray starts: its fields, its nets, the
    databases they read and their Python layers' modules (a sweep whose every trial would fail on
    the same file is refused once, naming it). Its train net and test nets are returned."""
    from caffetool.nets import check, project  # noqa: PLC0415

    caffe_pb2 = import_caffe(engine).proto.caffe_pb2
    loaded = project.load(plan.solver, engine, caffe_pb2, cwd=Path(plan.cwd))
    if project.has_python_layers(loaded):
        check.python_layers(engine, Path(plan.cwd), str(plan.solver))
    return loaded.train_net, loaded.test_nets


def _check_metric(plan: sweeprecord.Plan, engine: EngineInfo, project_nets: tuple[Any, list[Any]] | None) -> None:
    """A ``--metric`` the trials' nets do not output is refused before Ray starts: otherwise every
    trial trains to its end and then fails on it. ``project_nets``: a ``--solver``'s train and test
    nets; else the model's train/test net, as trials build it."""
    from caffetool.nets import builders, declaration, state  # noqa: PLC0415

    metric = searchspace.parse_metric(plan.metric)
    caffe = import_caffe(engine)
    if project_nets is None:
        model = declaration.get(plan.model, plan.models_dir)
        net = builders.train_val(caffe, model, builders.shape_of(model), builders.DataSource("train", "test"),
                                 *model.batch)
        project_nets = (net, [net])
    train, tests = project_nets
    pb = caffe.proto.caffe_pb2
    if metric.net < 0:
        where, outputs = "the train net", state.outputs(train, pb.TRAIN)
    elif metric.net >= len(tests):
        named = ("no test net; use train/OUTPUT" if not tests else "one test net: test/OUTPUT (or test0/OUTPUT)"
                 if len(tests) == 1 else f"{len(tests)} test nets: test0/OUTPUT to test{len(tests) - 1}/OUTPUT")
        raise ConfigError(f"--metric {plan.metric}: the trials have {named}")
    else:
        where, outputs = f"test net #{metric.net}", state.outputs(tests[metric.net], pb.TEST)
    if metric.output not in outputs:
        raise ConfigError(f"--metric {plan.metric}: {where} outputs {', '.join(outputs) or 'nothing'}, not "
                          f"{metric.output!r}")


def _max_iter(plan: sweeprecord.Plan, engine: EngineInfo, params: dict[str, Any]) -> int:
    """The iterations a trial with ``params`` runs: the flags', or the user's solver file's."""
    given = params.get("max_iter", plan.fixed.get("max_iter"))
    if given not in (None, ""):
        return int(given)
    if plan.solver is None:
        return int(solvers.settle(searchspace.options(plan.fixed, params))["max_iter"])
    caffe_pb2 = import_caffe(engine).proto.caffe_pb2
    return int(prototxt.read(Path(plan.solver), caffe_pb2.SolverParameter()).max_iter)


def start(plan: sweeprecord.Plan, engine: EngineInfo, runs_dir: Path, say: Callable[[str], None] = print) -> SweepOutcome:
    """Run the sweep ``plan`` in ``runs_dir/<name>`` to its end (or to Ctrl-C)."""
    space = check(plan, engine)
    if plan.solver is None and plan.address is None:
        # Fetched once here, so the trials of a local sweep do not all fetch at once.
        lookup.find(plan.dataset, plan.data_dir, fetch_missing=True, say=say)

    def begin() -> Path:
        sweep_dir = rundir.claim(runs_dir.absolute(), plan.name)
        plan.name = sweep_dir.name
        sweeprecord.update(sweep_dir, plan, status="running")
        say(f"sweep {plan.name}: {_describe(plan, space)}")
        return sweep_dir

    return _run(plan, begin, say, lambda sweep_dir, trainable: _tuner(plan, space, sweep_dir, trainable, say))


def resume(sweep_dir: Path, engine: EngineInfo, say: Callable[[str], None] = print,
           address: str | None = None) -> SweepOutcome:
    """Continue the interrupted sweep in ``sweep_dir`` (Ray Tune's restore)."""
    plan = sweeprecord.read_plan(sweep_dir)
    if address is not None:
        plan.address = address
    if not (sweep_dir / sweeprecord.TUNE_DIR).is_dir():
        raise RunError(f"{sweep_dir} has no Ray Tune state ({sweeprecord.TUNE_DIR}/) to resume from")

    def begin() -> Path:
        sweeprecord.update(sweep_dir, plan, status="running")
        say(f"resuming sweep {plan.name}")
        return sweep_dir

    def restored(sweep_dir: Path, trainable: Any) -> Any:
        from ray import tune  # noqa: PLC0415

        return tune.Tuner.restore(str(sweep_dir / sweeprecord.TUNE_DIR), trainable=trainable,
                                  resume_unfinished=True, resume_errored=False, restart_errored=False)

    return _run(plan, begin, say, restored)


def _run(plan: sweeprecord.Plan, begin: Callable[[], Path], say: Callable[[str], None],
         make_tuner: Callable[[Path, Any], Any]) -> SweepOutcome:
    """Connect to Ray, check that a trial fits one of its nodes, then ``begin`` the sweep (its folder
    and record, its MLflow run) and run Tune to its end."""
    from caffetool.sweep import hparams, leaderboard  # noqa: PLC0415

    t0 = time.monotonic()
    with cluster.connected(plan.address, say) as local:
        cluster.check_fits(plan.cpus_per_trial, plan.gpus_per_trial)
        sweep_dir = begin()
        tracking = tracked.SweepRun(track.resolve(plan.tracking_uri, plan.experiment, sweep_dir.parent), plan,
                                    sweep_dir, say)

        def stopped_at_once() -> None:  # what was running resumes from its last snapshot
            tracking.abandon()
            sweeprecord.update(sweep_dir, plan, status="interrupted", seconds=round(time.monotonic() - t0, 3))

        try:
            with cluster.interruptible(plan.name, say, local, stopped_at_once) as interrupted:
                from caffetool.sweep.trial import NAMESPACE, SweepFlags, flags_name  # noqa: PLC0415

                ready = time.monotonic()
                name = flags_name(plan.name)
                interrupted.flags = SweepFlags.options(name=name, namespace=NAMESPACE).remote()  # type: ignore[attr-defined]
                tuner = make_tuner(sweep_dir, _trainable(plan, sweep_dir, name, tracking))
                results = tuner.fit()
                tune_trials = _tune_trials(results)
                tuned = time.monotonic()
        except KeyboardInterrupt:
            stopped_at_once()
            raise
    status = "interrupted" if interrupted.is_set else "finished"
    seconds = round(time.monotonic() - t0, 3)
    timings = {"ray_start": round(ready - t0, 3), "tune": round(tuned - ready, 3),
               "ray_stop": round(time.monotonic() - tuned, 3), "total": seconds}
    sweeprecord.update(sweep_dir, plan, status=status, seconds=seconds, timings_s=timings, trials=tune_trials)
    trials = leaderboard.write(sweep_dir)
    tracking.finish(status, trials, hparams.metric_tag(plan.metric))
    return SweepOutcome(sweep_dir, status, seconds, trials)


def _trainable(plan: sweeprecord.Plan, sweep_dir: Path, flags: str, tracking: tracked.SweepRun) -> Any:
    from ray import tune  # noqa: PLC0415

    from caffetool.sweep.trial import CaffeTrial, TrialSpec, spec_dict  # noqa: PLC0415

    spec = TrialSpec(sweep=plan.name, sweep_dir=str(sweep_dir), metric=plan.metric, fixed=plan.fixed,
                     model=plan.model, dataset=plan.dataset, data_dir=plan.data_dir, models_dir=plan.models_dir,
                     solver=plan.solver, cwd=plan.cwd, engine_prefix=plan.engine_prefix, cpus=plan.cpus_per_trial,
                     gpus=plan.gpus_per_trial, flags=flags, judged=plan.scheduler != "fifo",
                     tracking=tracking.trials())
    resources = {"cpu": plan.cpus_per_trial, "gpu": plan.gpus_per_trial}
    return tune.with_resources(tune.with_parameters(CaffeTrial, spec=spec_dict(spec)), resources)


def _tuner(plan: sweeprecord.Plan, space: searchspace.Space, sweep_dir: Path, trainable: Any, say: Callable[[str], None]) -> Any:
    from ray import tune  # noqa: PLC0415
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler  # noqa: PLC0415

    from caffetool.sweep.trial import ITERATIONS, TrialNames  # noqa: PLC0415

    if plan.scheduler == "asha":
        grace = plan.grace or max(1, plan.max_iter // TESTS_PER_TRIAL)
        scheduler: Any = ASHAScheduler(time_attr=ITERATIONS, max_t=plan.max_iter, grace_period=grace,
                                       reduction_factor=REDUCTION_FACTOR, stop_last_trials=False)
    else:
        scheduler = FIFOScheduler()
    names = TrialNames(sweep_dir)
    config = tune.TuneConfig(metric=plan.metric, mode=plan.mode, scheduler=scheduler, num_samples=plan.samples,
                             search_alg=search.algorithm(plan.search, plan.seed, plan.samples, plan.metric, plan.mode),
                             max_concurrent_trials=plan.max_concurrent, reuse_actors=True,
                             trial_name_creator=names, trial_dirname_creator=names)
    run = tune.RunConfig(name=sweeprecord.TUNE_DIR, storage_path=str(sweep_dir), verbose=0,
                         callbacks=[_progress(plan, say)],
                         failure_config=tune.FailureConfig(max_failures=0, fail_fast=False))
    return tune.Tuner(trainable, param_space=search.param_space(plan.search, space), tune_config=config,
                      run_config=run)


def _progress(plan: sweeprecord.Plan, say: Callable[[str], None]) -> Any:
    """A Tune callback that says one line as each trial starts and ends."""
    from ray import tune  # noqa: PLC0415

    from caffetool.sweep.trial import ITERATIONS  # noqa: PLC0415

    def params(trial: Any) -> str:
        return ", ".join(f"{k}={v}" for k, v in trial.config.items())

    class Progress(tune.Callback):
        def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            say(f"{trial}: started ({params(trial)})")

        def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            last = trial.last_result or {}
            value = last.get(plan.metric)
            figure = f"{plan.metric} {value:.4f} at iteration {last.get(ITERATIONS)}" \
                if isinstance(value, float) else "no figure"
            say(f"{trial}: {last.get('status', 'stopped early')}, {figure}")

        def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            say(f"{trial}: failed")

    return Progress()


def _tune_trials(results: Any) -> list[dict[str, Any]]:
    """Each trial as Tune saw it: its run, parameters, state and error."""
    out = []
    for result in results:
        trial_id = (result.metrics or {}).get("trial_id")
        name = Path(result.path).name  # the trial's folder (TrialNames) is its run's name
        error = result.error
        out.append({"trial": name, "trial_id": trial_id, "params": result.config,
                    "error": _error_line(error) if error else None})
    return sorted(out, key=lambda t: t["trial"])


def _error_line(error: BaseException) -> str:
    """The first line that says why a trial failed (Ray wraps it in its own error's text)."""
    cause = getattr(error, "cause", None) or error
    text = str(cause).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    wanted = [line for line in lines if "Error:" in line or "Refused" in line]
    return (wanted[-1] if wanted else lines[-1] if lines else type(error).__name__).strip()


def _describe(plan: sweeprecord.Plan, space: searchspace.Space) -> str:
    count = search.trials(plan.search, plan.samples, space)
    per = f"{plan.gpus_per_trial:g} GPU" if plan.gpus_per_trial else f"{plan.cpus_per_trial:g} CPU"
    sched = f"ASHA (grace {plan.grace or max(1, plan.max_iter // TESTS_PER_TRIAL)})" if plan.scheduler == "asha" \
        else "FIFO"
    what = plan.solver or f"{plan.model} on {plan.dataset}"
    return (f"{count} trial(s) of {what}, {plan.max_iter} iterations at most, {per} each, {plan.mode} "
            f"{plan.metric}, {search.describe(plan.search, plan.seed, plan.samples)}, {sched}")
