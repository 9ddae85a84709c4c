"""The Invoke task layer: wiring only. Each module is one collection; logic lives in caffetool."""

from __future__ import annotations

import shlex
import subprocess
import sys

from invoke import Collection, Exit

from caffetool.config import TASK_DEFAULTS, TEST_PACKAGES
from caffetool import apt
from caffetool.engine import install as engine_install
from caffetool.engine import smoke
from caffetool.nets.solver import SolverOptions
from caffetool.quickstart import prepare_data
from caffetool.train import session
from caffetool.train.session import TrainRequest
from caffetool.tasks import data, demo, docker, engine, memory, model, train
from caffetool.tasks._common import pick, task


@task(help={"args": "extra pytest arguments, e.g. \"-k engine -x\""})
def test(c, args=""):
    """Run the test suite (installs the engine first if it is missing)."""
    engine.report(engine_install.install(prefix=pick(None, c.engine.prefix)))
    if installed := apt.install_packages(TEST_PACKAGES):
        print(f"installed for the tests: {' '.join(installed)}")
    code = subprocess.call([sys.executable, "-m", "pytest", *shlex.split(args)])
    if code:
        raise Exit(code=code)


@task(help={"max_iter": "training iterations (default: the LeNet recipe's 10,000)"})
def quickstart(c, max_iter=None):
    """The main job end to end: engine, data (MNIST, else Fashion-MNIST), LeNet trained and timed."""
    result = engine_install.install(prefix=pick(None, c.engine.prefix))
    engine.report(result)
    run = smoke.tiny_training(result.engine)
    print(f"engine check: {run.iterations} iterations in {run.seconds:.2f} s, "
          f"loss {run.first_loss:.4f} -> {run.last_loss:.4f}")
    dataset = prepare_data(c.data.dir)
    print(f"data: {dataset.name}, {dataset.count('train')} train + {dataset.count('test')} test "
          f"images in {dataset.path}")
    options = SolverOptions(max_iter=None if max_iter is None else int(max_iter))
    request = TrainRequest(model="lenet", dataset=dataset.name, options=options, data_dir=c.data.dir,
                           runs_dir=c.runs.dir, models_dir=c.model.dir)
    trained = session.train(train.locate_with_gpus(c.engine.prefix), request)
    train.finish(trained)
    print(f"demo-ready: invoke demo.serve --run {trained.run_dir.name}")


ns = Collection(test, quickstart)
ns.add_collection(engine.ns)
ns.add_collection(data.ns)
ns.add_collection(model.ns)
ns.add_collection(train.ns)
ns.add_collection(demo.ns)
ns.add_collection(memory.ns)
ns.add_collection(docker.ns)
ns.configure(TASK_DEFAULTS)
