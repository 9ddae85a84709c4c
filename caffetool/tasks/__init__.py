"""The Invoke task layer: wiring only. Each module is one collection; logic lives in caffetool."""

from __future__ import annotations

import shlex
import subprocess
import sys

from invoke import Collection, Exit

from caffetool.config import TASK_DEFAULTS
from caffetool.engine import install as engine_install
from caffetool.engine import smoke
from caffetool.tasks import engine
from caffetool.tasks._common import pick, task


@task(help={"args": "extra pytest arguments, e.g. \"-k engine -x\""})
def test(c, args=""):
    """Run the test suite (installs the engine first if it is missing)."""
    engine.report(engine_install.install(prefix=pick(None, c.engine.prefix)))
    code = subprocess.call([sys.executable, "-m", "pytest", *shlex.split(args)])
    if code:
        raise Exit(code=code)


@task
def quickstart(c):
    """The main job end to end: install the engine, then prove it with a tiny training run."""
    result = engine_install.install(prefix=pick(None, c.engine.prefix))
    engine.report(result)
    run = smoke.tiny_training(result.engine)
    print(f"tiny training: {run.iterations} iterations in {run.seconds:.2f} s, "
          f"loss {run.first_loss:.4f} -> {run.last_loss:.4f}")


ns = Collection(test, quickstart)
ns.add_collection(engine.ns)
ns.configure(TASK_DEFAULTS)
