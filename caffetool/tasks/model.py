"""``caffetool model.*``: generate and list nets and solvers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from invoke import Collection, Context

from caffetool.choices import count, writable_folder
from caffetool.data import lookup
from caffetool.engine import locate
from caffetool.errors import ConfigError
from caffetool.nets import declaration, generate, prototxt
from caffetool.nets.listing import list_models
from caffetool.nets.solvers import SolverOptions
from caffetool.tasks._common import pick, task
from caffetool.tasks.solver_flags import solver_help, takes_solver_flags


@task(name="generate", iterable=["stepvalue"], help={
    "model": "model name (invoke model.list)", "net": "your own train/test prototxt instead of --model",
    "dataset": "data set (fetched with data.fetch), or a folder made by data.images", "batch_size": "training batch size",
    "test_batch_size": "test batch size", "out": "output directory (default: <runs.dir>/generated/<model>)",
    "force": "replace existing files in --out", "data_dir": "where data sets are", **solver_help(),
})
@takes_solver_flags()
def generate_(c: Context, model: str | None = None, net: str | None = None, dataset: str | None = None,
             batch_size: str | None = None, test_batch_size: str | None = None, out: str | None = None,
             force: bool = False, data_dir: str | None = None, *, solver_flags: dict[str, Any]) -> None:
    """Write train_val.prototxt, deploy.prototxt and solver.prototxt, validated by Caffe."""
    options = SolverOptions.from_flags(**solver_flags)
    batch, test_batch = count(batch_size, "--batch-size"), count(test_batch_size, "--test-batch-size")
    if bool(model) == bool(net):
        raise ConfigError("give exactly one of --model NAME or --net FILE")
    if net:
        prototxt.read_text(Path(net))  # a wrong file is named before the data set is opened
    chosen = declaration.get(model, c.model.dir) if model else None
    name = chosen.name if chosen else Path(net).stem
    target = writable_folder(out or Path(c.runs.dir) / "generated" / name, "--out")
    ds = lookup.find(pick(dataset, c.data.dataset), pick(data_dir, c.data.dir))
    result = generate.generate(locate(c.engine.prefix, probe=False), chosen, ds, target, options,
                                   batch, test_batch, Path(net) if net else None, force)
    train = result.report["train"]
    print(f"wrote {', '.join(p.name for p in result.files.values())} to {result.out}")
    print(f"Caffe built the train net ({train['layers']} layers, {train['params']:,} parameters), "
          f"the test net and {'the deploy net' if result.report['deploy'] else 'no deploy net'}")


@task(name="list", help={"models_dir": "folder of model declarations (default: model.dir)"})
def list_(c: Context, models_dir: str | None = None) -> None:
    """The models with input shape, parameter count and layer count (built by Caffe)."""
    rows = list_models(locate(c.engine.prefix, probe=False), pick(models_dir, c.model.dir))
    print(f"{'model':<11} {'input':<12} {'parameters':>12} {'layers':>7}  description")
    for r in rows:
        print(f"{r['name']:<11} {r['input']:<12} {r['params']:>12,} {r['layers']:>7}  {r['title']}")


ns = Collection("model", generate_, list_)
