"""The installed ``caffetool`` command, run as a user runs it: from a folder that is not the checkout.

It must find its tasks without ``tasks.py``, read an ``invoke.yaml`` in the current directory (and
refuse a broken one by name), resolve relative paths against that directory, and report every error
as one ``Error: ...`` line with exit code 1. ``invoke`` inside the checkout keeps working.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
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


LAUGHS = "".join(f"{k}: &{k} [{', '.join([f'*{p}'] * 9) if p else ', '.join(['lol'] * 9)}]\n"
                 for p, k in zip(["", *"abcdef"], "abcdefg"))


def test_settings_files_and_variables_that_would_mislead_are_refused_by_name(tmp_path: Path) -> None:
    """A runtime file that is no settings file or is broken, a broken ~/.invoke.yaml, a "billion
    laughs" file, sections of task groups that have no settings, an empty folder setting, a folder
    variable that is a file, and a model folder that declares no model: one Error line each."""
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "bad.yaml").write_text("data: [1\n")
    data_home = os.environ.get("XDG_DATA_HOME", str(Path.home() / ".local" / "share"))  # the engine stays found
    cache_home = os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))

    def with_env(*args: str, **env: str) -> subprocess.CompletedProcess:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("INVOKE_")}
        return subprocess.run([str(CAFFETOOL), *args], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              env={**clean, "HOME": str(home), "XDG_DATA_HOME": data_home, "XDG_CACHE_HOME": cache_home,
                                   **env}, stdin=subprocess.DEVNULL)

    refused(with_env("model.list", INVOKE_RUNTIME_CONFIG="/etc/passwd"),
            "INVOKE_RUNTIME_CONFIG /etc/passwd: a settings file is YAML or JSON, named *.yaml, *.yml or *.json "
            "(or Python, *.py)")
    bad = tmp_path / "bad.yaml"
    why = f"{bad}: line 2, column 1: expected ',' or ']', but got '<stream end>'; fix {bad}"
    refused(with_env("model.list", INVOKE_RUNTIME_CONFIG=str(bad)), why)
    refused(with_env("-f", str(bad), "model.list"), why)
    (home / ".invoke.yaml").write_text("data: {dir: [\n")
    user = home / ".invoke.yaml"
    refused(with_env("model.list"),
            f"{user}: line 2, column 1: expected the node content, but found '<stream end>'; fix {user}")
    user.unlink()
    (tmp_path / "invoke.yaml").write_text(LAUGHS)
    start = time.monotonic()
    refused(with_env("model.list"), "invoke.yaml: its YAML aliases expand to 6,053,451 values, over the limit of "
                                    f"100,000 (caffetool's settings are a few); fix {tmp_path / 'invoke.yaml'}")
    assert time.monotonic() - start < 10
    for section in ("sweep: 5", "docker: {image: 3}"):
        (tmp_path / "invoke.yaml").write_text(section + "\n")
        name = section.split(":")[0]
        refused(with_env("model.list"), f"invoke.yaml: {name}: caffetool has no {name} settings (its settings are "
                                        f"engine, data, model, runs, tracking; a {name} task takes flags); remove the section")
    (tmp_path / "invoke.yaml").unlink()
    (home / ".invoke.yaml").write_text("docker: {image: 3}\n")  # another project's section: not caffetool's
    assert with_env("model.list").returncode == 0
    refused(with_env("data.info", INVOKE_DATA_DIR=""),
            "INVOKE_DATA_DIR: data.dir: is empty; give a folder, or unset it for the default")
    refused(with_env("train", "--max-iter", "1", INVOKE_RUNS_DIR="/dev/null"),
            "INVOKE_RUNS_DIR /dev/null is a file, not a folder; set INVOKE_RUNS_DIR (or unset it and set runs.dir "
            "in invoke.yaml) to a folder you can write to")
    refused(with_env("model.list", INVOKE_MODEL_DIR=str(home)),
            f"model directory {home} holds no model declarations (*.py files that define MODEL = Model(...)); set "
            "model.dir or pass --models-dir to such a folder")
