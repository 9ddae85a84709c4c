"""``caffetool quickstart`` as the README's first command runs it, from a folder of its own: the
engine (installed already, so only checked), the data set fetched on a thread while that happens, a
short LeNet training, and a summary whose next commands are real tasks that take this run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from caffetool.tasks import NEXT_STEPS

CAFFETOOL = Path(sys.executable).parent / "caffetool"
pytestmark = pytest.mark.engine


def caffetool(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVOKE_")}
    return subprocess.run([str(CAFFETOOL), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def test_quickstart_trains_and_names_the_next_commands(tmp_path: Path) -> None:
    done = caffetool("quickstart", "--max-iter", "200", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    out = done.stdout
    # the data set's lines come after the engine's, though it was fetched meanwhile
    assert out.index("engine check:") < out.index("data: fashion-mnist, 60000 train + 10000 test images in "
                                                  f"{tmp_path / 'data'}")
    assert "status:     finished" in out and "iterations: 200 " in out
    assert re.search(r"^final test: iteration 200: accuracy 0\.\d+", out, re.M), out
    run = Path(re.search(r"^run:\s+(\S+)$", out, re.M)[1])
    assert run.parent == tmp_path / "runs" and (run / "snapshots" / "lenet_iter_200.caffemodel").is_file()

    steps = out[out.index("\nnext:\n"):].splitlines()[2:]
    commands = [line.split("  ")[1].strip() for line in steps]
    assert commands == [command.format(run=run.name) for command, _ in NEXT_STEPS]
    for command in commands:  # each one is a task that takes what the summary gives it
        name, *args = command.split()[1:]
        helped = caffetool("--help", name, cwd=tmp_path, timeout=60)
        assert helped.returncode == 0, helped.stderr
        flags = [a for a in args if a.startswith("--")]
        assert all(f in helped.stdout for f in flags), (command, helped.stdout)
    evaluated = caffetool("evaluate", run.name, cwd=tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr
    assert re.search(r"^top-1:\s+0\.\d+", evaluated.stdout, re.M), evaluated.stdout

