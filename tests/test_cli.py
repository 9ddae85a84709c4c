"""The installed ``caffetool`` command, run as a user runs it: from a folder that is not the checkout.

It must find its tasks without ``tasks.py``, read an ``invoke.yaml`` in the current directory (and
refuse a broken one by name), resolve relative paths against that directory, and report every error
as one ``Error: ...`` line with exit code 1. ``invoke`` inside the checkout keeps working.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import PROJECT

BIN = Path(sys.executable).parent
CAFFETOOL = BIN / "caffetool"


def run(command: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The real command in ``cwd``, with no INVOKE_* settings of the caller's leaking in."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("INVOKE_")}
    return subprocess.run([str(command), *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env=env, stdin=subprocess.DEVNULL)


def refused(done: subprocess.CompletedProcess, message: str) -> None:
    """Exit code 1, exactly one ``Error: message`` line, no traceback."""
    assert done.returncode == 1, done
    assert done.stderr == f"Error: {message}\n"
    assert "Traceback" not in done.stdout + done.stderr


def test_lists_the_tasks_from_any_folder(tmp_path: Path) -> None:
    done = run(CAFFETOOL, "--list", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for name in ("quickstart", "train.run (train)", "train.resume", "model.generate", "memory.estimate", "engine.info"):
        assert f"  {name} " in done.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.engine
def test_runs_a_task_with_the_type_in_any_case(tmp_path: Path) -> None:
    for spelling in ("adam", "ADAM"):
        done = run(CAFFETOOL, "memory.estimate", "--model", "lenet", "--batch-size", "8", "--type", spelling,
                   "--json", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert '"solver": "Adam"' in done.stdout


@pytest.mark.engine
def test_a_wrong_flag_or_task_is_one_error_line(tmp_path: Path) -> None:
    refused(run(CAFFETOOL, "memory.estimate", "--model", "lenet", "--bogus", cwd=tmp_path),
            "No idea what '--bogus' is!")
    refused(run(CAFFETOOL, "no.such.task", cwd=tmp_path), "No idea what 'no.such.task' is!")
    refused(run(CAFFETOOL, "memory.estimate", "--model", "lenet", "--type", "Lion", cwd=tmp_path),
            "unknown --type 'Lion'; choose one of: SGD, Nesterov, AdaGrad, RMSProp, AdaDelta, Adam")


def test_relative_flags_mean_the_current_folder(tmp_path: Path) -> None:
    refused(run(CAFFETOOL, "data.info", "--data-dir", "mine", cwd=tmp_path),
            f"data set fashion-mnist not found in {tmp_path / 'mine'} — run `caffetool data.fetch --dataset fashion-mnist`")


def test_reads_invoke_yaml_in_the_current_folder(tmp_path: Path) -> None:
    (tmp_path / "invoke.yaml").write_text("data:\n  dir: lab/data\n")
    refused(run(CAFFETOOL, "data.info", cwd=tmp_path),
            f"data set fashion-mnist not found in {tmp_path / 'lab/data'} — run `caffetool data.fetch --dataset fashion-mnist`")


def test_refuses_a_broken_invoke_yaml_by_name(tmp_path: Path) -> None:
    settings = tmp_path / "invoke.yaml"
    settings.write_text("runs:\n  dir: 5\n")
    refused(run(CAFFETOOL, "--list", cwd=tmp_path), "invoke.yaml: runs.dir: must be text (a folder), got 5")
    settings.write_text("data: [1\n")
    refused(run(CAFFETOOL, "--list", cwd=tmp_path),
            f"invoke.yaml: line 2, column 1: expected ',' or ']', but got '<stream end>'; fix {settings}")
    settings.write_text("data:\n  folder: x\n")
    refused(run(CAFFETOOL, "engine.info", cwd=tmp_path),
            "invoke.yaml: data.folder: unknown setting; data takes dir, dataset")


def test_invoke_in_the_checkout_still_works() -> None:
    done = run(BIN / "invoke", "--list", cwd=PROJECT)
    assert done.returncode == 0, done.stderr
    assert "  memory.estimate " in done.stdout and "  train.run (train) " in done.stdout
