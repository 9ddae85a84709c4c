"""``caffetool evaluate``: a trained classifier over its whole test database, with its confusion matrix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from invoke import Collection

from caffetool.backends import devices, dispatch
from caffetool.choices import choose, count, input_file
from caffetool.engine import locate
from caffetool.errors import RunError
from caffetool.inference import records
from caffetool.runs import runrecord
from caffetool.tasks._common import pick, task


@task(default=True, positional=["run"], help={
    "run": "run name or directory", "weights": ".caffemodel (default: the run's newest)",
    "split": "test (default) or train: the database of that phase's Data layer",
    "top": "k of the top-k accuracy (default 5, or every class of a net of fewer)", "backend": dispatch.help_text(),
    "batch_size": "records per forward pass (default: the data layer's batch_size)",
    "caffe_test": "also run `caffe test` over the same records to compare (default; --no-caffe-test skips)",
    "gpu": "cpu (default), auto or one GPU id: where the caffe or pytorch backend and `caffe test` run",
    "runs_dir": "where runs are"})
def run(c: Any, run: str, weights: str | None = None, split: str = "test", top: str | None = None, backend: str = "caffe",
        batch_size: str | None = None, caffe_test: bool = True, gpu: str = "cpu", runs_dir: str | None = None) -> None:
    """Evaluate a run: top-1/top-k, confusion matrix, per-class figures, mistakes, checked against caffe test."""
    from caffetool.evaluation import evaluator  # noqa: PLC0415 - matplotlib only when evaluating

    k = count(top, "--top")
    size = count(batch_size, "--batch-size")
    split = choose(split, records.SPLITS, "--split")
    backend = choose(backend, dispatch.BACKENDS, "--backend")
    run_dir = runrecord.find(Path(pick(runs_dir, c.runs.dir)), run)
    chosen = input_file(weights, "--weights").absolute() if weights else None
    engine = locate(c.engine.prefix, probe=False, gpus=gpu.strip().lower() != "cpu")
    device = devices.for_pycaffe(engine, gpu)
    result = evaluator.evaluate(engine, run_dir, chosen, split, k, backend, size, caffe_test, device=device)
    for line in result.lines():
        print(line)
    if (why := result.disagreement()) is not None:
        raise RunError(why)


ns = Collection("evaluate", run)
