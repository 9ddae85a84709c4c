"""The Invoke task layer: wiring only. Each module is one collection; logic lives in caffetool."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from invoke import Collection, Context, Exit

from caffetool import apt
from caffetool.choices import shell_words, writable_folder
from caffetool.data.preference import Prefetch
from caffetool.engine import cpu_threads, locate, smoke
from caffetool.engine.install import install
from caffetool.nets.solvers import SolverOptions
from caffetool.tasks import (
    data,
    demo,
    docker,
    engine,
    evaluate,
    export,
    memory,
    model,
    notebook,
    rayhead,
    settings,
    sweep,
    track,
    train,
    upgrade,
)
from caffetool.tasks._common import pick, reported, task
from caffetool.tasks.settings import TASK_DEFAULTS, TEST_PACKAGES
from caffetool.train import session
from caffetool.train.session import TrainRequest

# The suite runs in this many pytest-xdist lanes at most, one core each (tests/conftest.py groups the
# modules that share the machine's Ray, apt and Docker into one lane, longest first): on CI's
# 2 cores, pytest took 1,293 s in 2 lanes against 2,096-2,363 s in one (benchmarks/RESULTS.md).
TEST_LANES = 2


@task(help={"args": "extra pytest arguments, e.g. \"-k engine -x\" (\"-n 0\": one lane)"})
def test(c: Context, args: str = "") -> None:
    """Run the test suite (installs the engine first if it is missing)."""
    pytest_args = shell_words(args, "--args")
    engine.report(install(prefix=pick(None, c.engine.prefix)))
    if installed := apt.install_packages(TEST_PACKAGES):
        print(f"installed for the tests: {' '.join(installed)}")
    code = subprocess.call([sys.executable, "-m", "pytest", *lane_options(pytest_args), *pytest_args])
    if code:
        raise Exit(code=code)


def lane_options(pytest_args: list[str]) -> list[str]:
    """xdist's options for :data:`TEST_LANES` lanes, unless the arguments say how to distribute."""
    lanes = min(TEST_LANES, cpu_threads.available())
    if lanes < 2 or any(arg.startswith(("-n", "--numprocesses", "--dist")) or arg == "no:xdist"
                        for arg in pytest_args):
        return []
    return ["-n", str(lanes), "--dist", "loadgroup"]


# The quickstart's first training: 2,000 iterations of the LeNet recipe, about 30 s on 2 cores and
# within a point or two of the full run's accuracy; the recipe's 10,000 are one flag away.
QUICK_ITERATIONS = 2000
NEXT_STEPS = (
    ("caffetool demo.serve --run {run}", "the model behind a web page and an inference API"),
    ("caffetool evaluate {run}", "accuracy, top-5 and the confusion matrix, as `caffe test` computes them"),
    ("caffetool export {run}", "an ONNX model, checked against Caffe layer by layer"),
    ("caffetool quickstart --max-iter 10000", "the LeNet recipe's full 10,000 iterations"),
)


@task(help={"max_iter": f"training iterations (default {QUICK_ITERATIONS:,}; the LeNet recipe's full run: 10000)"})
def quickstart(c: Context, max_iter: str | None = None) -> None:
    """The main job end to end: engine, data (MNIST, else Fashion-MNIST), LeNet trained and timed."""
    options = SolverOptions.from_flags(max_iter=max_iter or str(QUICK_ITERATIONS))
    writable_folder(c.data.dir, setting="data.dir")
    writable_folder(c.runs.dir, setting="runs.dir")
    prefetch = Prefetch(c.data.dir)  # the data set is fetched and converted while the engine compiles
    try:
        result = install(prefix=pick(None, c.engine.prefix))
        engine.report(result)
        run = smoke.tiny_training(result.engine)
        print(f"engine check: {run.iterations} iterations in {run.seconds:.2f} s, "
              f"loss {run.first_loss:.4f} -> {run.last_loss:.4f}")
    finally:
        prefetch.settle()
    dataset = prefetch.dataset()
    print(f"data: {dataset.name}, {dataset.count('train')} train + {dataset.count('test')} test "
          f"images in {dataset.path}")
    request = TrainRequest(model="lenet", dataset=dataset.name, options=options, data_dir=c.data.dir,
                           runs_dir=c.runs.dir, models_dir=c.model.dir)
    trained = session.train(locate(c.engine.prefix, probe=False, gpus=True), request)
    train.finish(trained)
    steps = [(command.format(run=trained.run_dir.name), what) for command, what in NEXT_STEPS]
    width = max(len(command) for command, _ in steps)
    print("next:")
    for command, what in steps:
        print(f"  {command:<{width}}  {what}")


def check_project_settings(folder: Path) -> None:
    """The settings a command starts from, as tasks.py (in ``folder``) loads or ``caffetool`` starts:
    the invoke.yaml files, checked (Invoke merges them next, and would show a broken one as a
    traceback), and the environment's thread counts, bounded by this machine's cores with a warning
    for each value capped or ignored (:func:`caffetool.engine.cpu_threads.settle`)."""
    with reported():
        settings.check_config_files(folder)
    for warning in cpu_threads.settle():
        print(warning, file=sys.stderr)


def check_runtime_settings(path: str, origin: str) -> None:
    """The runtime settings file (``-f FILE``, ``INVOKE_RUNTIME_CONFIG``), checked before Invoke loads it."""
    with reported():
        settings.check_runtime_file(path, origin)


ns = Collection(test, quickstart)
ns.add_collection(engine.ns)
ns.add_collection(data.ns)
ns.add_collection(model.ns)
ns.add_collection(train.ns)
ns.add_collection(track.ns)
ns.add_collection(sweep.ns)
ns.add_collection(rayhead.ns)
ns.add_collection(demo.ns)
ns.add_collection(evaluate.ns)
ns.add_collection(export.ns)
ns.add_collection(memory.ns)
ns.add_collection(docker.ns)
ns.add_collection(upgrade.ns)
ns.add_collection(notebook.ns)
ns.configure(TASK_DEFAULTS)
