"""``caffetool sweep``, ``sweep.resume`` and ``sweep.report``: many trainings at once on Ray Tune."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from invoke import Collection, Exit

from caffetool import extras
from caffetool.choices import input_file
from caffetool.engine import locate
from caffetool.errors import RunError
from caffetool.sweep import launch, leaderboard, sweeprecord
from caffetool.tasks._common import chosen_folder, pick, task
from caffetool.tasks.solver_flags import given, solver_help, takes_solver_flags
from caffetool.tasks.train import TRACKING_HELP

SWEEP_HELP = {
    "param": "NAME=V1,V2,... (grid) or NAME=log:LO..HI, uniform:LO..HI, int:LO..HI (sampled); repeatable",
    "metric": "what to optimize: test/OUTPUT, testK/OUTPUT or train/OUTPUT (default test/accuracy)",
    "mode": "max or min the metric (default max)", "scheduler": "fifo or asha (early stopping)",
    "grace": "ASHA: iterations every trial runs before it may be stopped (default a fifth of max_iter)",
    "samples": "random: draws from the ranges per grid point; optuna: the number of trials (default 1)",
    "search": "grid, random (the default with ranges) or optuna (Optuna's TPE learns from earlier trials)",
    "seed": "seed of the search's draws: the same seed draws the same trials",
    "max_concurrent": "trials running at once (default: as many as the resources hold)",
    "gpus_per_trial": "GPUs per trial (Ray sets each trial's visible GPUs)",
    "cpus_per_trial": "CPUs per trial on the CPU (its BLAS/OpenMP threads; default 1)",
    "address": "an existing Ray cluster: auto or HOST:PORT (default: a local Ray for this sweep)",
    "name": "sweep name (default: a timestamp)", "model": "model name (invoke model.list)",
    "dataset": "data set (fetched if missing on each node)", "solver": "your own solver.prototxt instead of --model",
    "batch_size": "training batch size", "test_batch_size": "test batch size", "data_dir": "where data sets are",
    "runs_dir": "where runs go", **TRACKING_HELP, **solver_help(without=("mode",)),
}


@task(default=True, iterable=["param", "stepvalue"], auto_shortflags=False, help=SWEEP_HELP)
@takes_solver_flags(without=("mode",))
def run(c: Any, param: list[str] | None = None, metric: str = "test/accuracy", mode: str = "max",
        scheduler: str = "fifo", grace: str | None = None, samples: str | None = None, search: str | None = None,
        seed: str | None = None, max_concurrent: str | None = None, gpus_per_trial: str | None = None,
        cpus_per_trial: str | None = None, address: str | None = None, name: str | None = None,
        model: str = "lenet", dataset: str | None = None, solver: str | None = None, batch_size: str | None = None,
        test_batch_size: str | None = None, data_dir: str | None = None, runs_dir: str | None = None,
        tracking_uri: str | None = None, experiment: str | None = None, *, solver_flags: dict[str, Any]) -> None:
    """Sweep training settings on Ray Tune: one trial per GPU or per few cores, ASHA early stopping."""
    extras.need("sweep", "caffetool sweep")
    # --mode here is max|min, not the solver's
    fixed = given({**solver_flags, "batch_size": batch_size, "test_batch_size": test_batch_size})
    plan = sweeprecord.Plan(
        name=name or "", params=list(param or []), metric=metric, mode=mode, scheduler=scheduler, grace=grace,
        samples=samples or 1, search=search or "", seed=seed, max_concurrent=max_concurrent, cpus_per_trial=cpus_per_trial or 1,
        gpus_per_trial=gpus_per_trial or 0, address=address, model=model, dataset=pick(dataset, c.data.dataset),
        data_dir=str(chosen_folder(data_dir, c.data.dir, "--data-dir", "data.dir")),
        models_dir=c.model.dir, solver=str(input_file(solver, "--solver").absolute()) if solver else None,
        fixed=fixed, engine_prefix=c.engine.prefix, tracking_uri=pick(tracking_uri, c.tracking.uri),
        experiment=pick(experiment, c.tracking.experiment))
    runs = chosen_folder(runs_dir, c.runs.dir, "--runs-dir", "runs.dir")
    outcome = launch.start(plan, locate(c.engine.prefix, probe=False, gpus=True), runs)
    finish(outcome, plan.metric)


@task(help={"name": "sweep name or directory", "address": "the Ray cluster to use (default: a local Ray)",
            "runs_dir": "where runs are"})
def resume(c: Any, name: str, address: str | None = None, runs_dir: str | None = None) -> None:
    """Continue an interrupted sweep (Ray Tune's restore): unfinished trials continue from their snapshots."""
    extras.need("sweep", "caffetool sweep.resume")
    sweep_dir = sweeprecord.find(Path(pick(runs_dir, c.runs.dir)), name)
    outcome = launch.resume(sweep_dir, locate(c.engine.prefix, probe=False, gpus=True), address=address)
    finish(outcome, sweeprecord.read_plan(sweep_dir).metric)


@task(name="report", help={"name": "sweep name or directory", "runs_dir": "where runs are"})
def report_(c: Any, name: str, runs_dir: str | None = None) -> None:
    """A sweep's results: results.csv, sweep.json and plots/, printed best first."""
    sweep_dir = sweeprecord.find(Path(pick(runs_dir, c.runs.dir)), name)
    rows = leaderboard.write(sweep_dir)
    print(leaderboard.text(rows, sweeprecord.read_plan(sweep_dir).metric))
    print(f"results:    {sweep_dir / sweeprecord.RESULTS} (plots in {sweep_dir / sweeprecord.PLOTS})")


def finish(outcome: launch.SweepOutcome, metric: str) -> None:
    """The sweep's table and where its record is; an interrupted sweep exits 130."""
    print(leaderboard.text(outcome.trials, metric))
    print(f"sweep:      {outcome.sweep_dir} — {outcome.status}, {len(outcome.trials)} trial(s) in "
          f"{outcome.seconds:.1f} s")
    print(f"results:    {outcome.sweep_dir / sweeprecord.RESULTS} (plots in {outcome.sweep_dir / sweeprecord.PLOTS})")
    if outcome.status == "interrupted":
        print(f"continue:   caffetool sweep.resume {outcome.sweep_dir.name}")
        raise Exit(code=130)
    if outcome.trials and all(r["status"] == "failed" for r in outcome.trials):
        raise RunError(f"every trial of sweep {outcome.sweep_dir.name} failed ({len(outcome.trials)} of "
                       f"{len(outcome.trials)}); the first: {outcome.trials[0].get('message') or 'no message'}")


ns = Collection("sweep", run, resume, report_)
