"""``invoke model.*``: generate and list nets and solvers."""

from __future__ import annotations

from pathlib import Path

from invoke import Collection

from caffetool.data import layout, registry
from caffetool.engine import locate
from caffetool.nets import generate as net_generate
from caffetool.nets import model as models
from caffetool.nets import solver
from caffetool.nets.listing import list_models
from caffetool.tasks._common import pick, task

SOLVER_HELP = {
    "solver": f"solver type: {', '.join(solver.SOLVER_TYPES)}",
    "base_lr": "base learning rate", "lr_policy": f"lr policy: {', '.join(solver.LR_POLICIES)}",
    "gamma": "lr policy gamma", "power": "lr policy power", "stepsize": "iterations per lr step",
    "stepvalue": "iteration of an lr drop (multistep; repeatable)", "momentum": "momentum (beta1 for Adam)",
    "momentum2": "Adam's beta2", "delta": "numerical stability term", "rms_decay": "RMSProp decay",
    "weight_decay": "L2 weight decay", "max_iter": "training iterations", "iter_size": "gradient accumulation: batches per update",
    "random_seed": "seed for reproducible runs", "test_iter": "test batches per test (default: whole test set)",
    "test_interval": "iterations between tests", "snapshot": "iterations between snapshots",
    "display": "iterations between log lines", "mode": "cpu or gpu",
}


def solver_options(solver_type, base_lr, lr_policy, gamma, power, stepsize, stepvalue, momentum, momentum2,
                   delta, rms_decay, weight_decay, max_iter, iter_size, random_seed, test_iter,
                   test_interval, snapshot, display, mode) -> solver.SolverOptions:
    """Flags (strings from the command line, None when absent) → SolverOptions."""
    def num(value, kind=float):
        return None if value in (None, "") else kind(value)

    return solver.SolverOptions(
        type=solver_type, base_lr=num(base_lr), lr_policy=lr_policy or None, gamma=num(gamma),
        power=num(power), stepsize=num(stepsize, int), stepvalue=[int(v) for v in stepvalue or []],
        momentum=num(momentum), momentum2=num(momentum2), delta=num(delta), rms_decay=num(rms_decay),
        weight_decay=num(weight_decay), max_iter=num(max_iter, int), iter_size=int(iter_size or 1),
        random_seed=num(random_seed, int), test_iter=num(test_iter, int),
        test_interval=num(test_interval, int), snapshot=num(snapshot, int), display=num(display, int),
        mode=mode,
    )


@task(iterable=["stepvalue"], help={
    "model": "model name (invoke model.list)", "net": "your own train/test prototxt instead of --model",
    "dataset": "data set (fetched with data.fetch)", "batch_size": "training batch size",
    "test_batch_size": "test batch size", "out": "output directory (default: runs/generated/<model>)",
    "force": "replace existing files in --out", "data_dir": "where data sets are", **SOLVER_HELP,
})
def generate(c, model=None, net=None, dataset=None, batch_size=None, test_batch_size=None, solver="SGD",
             base_lr=None, lr_policy=None, gamma=None, power=None, stepsize=None, stepvalue=None,
             momentum=None, momentum2=None, delta=None, rms_decay=None, weight_decay=None, max_iter=None,
             iter_size=1, random_seed=None, test_iter=None, test_interval=None, snapshot=None,
             display=None, mode="cpu", out=None, force=False, data_dir=None):
    """Write train_val.prototxt, deploy.prototxt and solver.prototxt, validated by Caffe."""
    options = solver_options(solver, base_lr, lr_policy, gamma, power, stepsize, stepvalue, momentum,
                             momentum2, delta, rms_decay, weight_decay, max_iter, iter_size, random_seed,
                             test_iter, test_interval, snapshot, display, mode)
    spec = registry.get(pick(dataset, c.data.dataset))
    chosen = models.get(model, c.model.dir) if model else None
    ds = layout.load(spec, pick(data_dir, c.data.dir))
    target = Path(out or Path("runs") / "generated" / (chosen.name if chosen else Path(net).stem))
    result = net_generate.generate(locate(c.engine.prefix, probe=False), chosen, ds, target.absolute(), options,
                                   None if batch_size is None else int(batch_size),
                                   None if test_batch_size is None else int(test_batch_size),
                                   Path(net) if net else None, force)
    train = result.report["train"]
    print(f"wrote {', '.join(p.name for p in result.files.values())} to {result.out}")
    print(f"Caffe built the train net ({train['layers']} layers, {train['params']:,} parameters), "
          f"the test net and {'the deploy net' if result.report['deploy'] else 'no deploy net'}")


@task(name="list", help={"models_dir": "folder of model declarations (default: model.dir)"})
def list_(c, models_dir=None):
    """The models with input shape, parameter count and layer count (built by Caffe)."""
    rows = list_models(locate(c.engine.prefix, probe=False), pick(models_dir, c.model.dir))
    print(f"{'model':<11} {'input':<12} {'parameters':>12} {'layers':>7}  description")
    for r in rows:
        print(f"{r['name']:<11} {r['input']:<12} {r['params']:>12,} {r['layers']:>7}  {r['title']}")


ns = Collection("model", generate, list_)
