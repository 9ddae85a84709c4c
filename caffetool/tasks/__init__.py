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
from caffetool.quickstart import prepare_data
from caffetool.tasks import data, engine, model
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


@task
def quickstart(c):
    """The main job end to end: engine, data set (MNIST, else Fashion-MNIST), tiny training."""
    result = engine_install.install(prefix=pick(None, c.engine.prefix))
    engine.report(result)
    run = smoke.tiny_training(result.engine)
    print(f"tiny training: {run.iterations} iterations in {run.seconds:.2f} s, "
          f"loss {run.first_loss:.4f} -> {run.last_loss:.4f}")
    dataset = prepare_data(c.data.dir)
    print(f"data: {dataset.name}, {dataset.count('train')} train + {dataset.count('test')} test "
          f"images in {dataset.path}")


ns = Collection(test, quickstart)
ns.add_collection(engine.ns)
ns.add_collection(data.ns)
ns.add_collection(model.ns)
ns.configure(TASK_DEFAULTS)
