"""Every CPU thread count within the cores this process may use: ``--threads`` past them refused,
an environment's value past them capped and one that is no count ignored, each said on stderr, and a
user's ``CAFFE_ADAPT_THREADS=0`` kept (:mod:`caffetool.engine.cpu_threads`)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from caffetool.engine import cpu_threads
from caffetool.errors import ConfigError

from .test_cli import CAFFETOOL

CORES = cpu_threads.available()
CLEAN = {name: "" for name in (*cpu_threads.VARIABLES, cpu_threads.ADAPT)}


def test_an_environments_counts_are_capped_or_ignored_with_a_warning_each():
    env = {"OMP_NUM_THREADS": "10000", "OPENBLAS_NUM_THREADS": "abc", "MKL_NUM_THREADS": "-1",
           cpu_threads.ADAPT: "yes", "OTHER": "kept"}
    warnings = cpu_threads.settle(env)
    assert env == {"OMP_NUM_THREADS": str(CORES), "OTHER": "kept"}
    assert warnings == [
        f"Warning: OMP_NUM_THREADS=10000 is capped at {CORES}: this process may use {CORES} core(s), "
        "and more threads than cores only wait for each other",
        f"Warning: OPENBLAS_NUM_THREADS=abc is ignored: it must be a number of threads from 1 to {CORES} "
        "(the cores this process may use); the default applies",
        f"Warning: MKL_NUM_THREADS=-1 is ignored: it must be a number of threads from 1 to {CORES} "
        "(the cores this process may use); the default applies",
        "Warning: CAFFE_ADAPT_THREADS=yes is ignored: it must be 1 (the thread count follows the CPU) "
        "or 0 (it stays fixed)"]
    for value in ("0", "1٢", "9" * 5000, "2,x"):  # zero, a non-ASCII digit, past int()'s own limit, a bad level
        env = {"OMP_NUM_THREADS": value}
        assert len(cpu_threads.settle(env)) == 1 and env == {}
    env = {"OMP_NUM_THREADS": f"{CORES},{CORES + 7}", cpu_threads.ADAPT: "0"}  # nested levels, each capped
    assert len(cpu_threads.settle(env)) == 1 and env["OMP_NUM_THREADS"] == f"{CORES},{CORES}"
    env = {"OMP_NUM_THREADS": str(CORES), cpu_threads.ADAPT: "1"}
    assert cpu_threads.settle(env) == [] and env == {"OMP_NUM_THREADS": str(CORES), cpu_threads.ADAPT: "1"}


def test_a_count_is_never_past_the_cores_and_a_users_adapt_0_is_kept():
    with pytest.raises(ConfigError, match=rf"^--threads must be from 1 to {CORES} \(the cores this process may use"):
        cpu_threads.apply(CORES + 1, {})
    with pytest.raises(ConfigError, match=rf"got {CORES + 1}$"):
        cpu_threads.of_engine({"openmp": True}, CORES + 1, {})
    env = {"OMP_NUM_THREADS": "10000"}  # not settled: still capped where the count is used
    assert cpu_threads.apply(None, env) == CORES and env["MKL_NUM_THREADS"] == str(CORES)
    assert cpu_threads.of_engine({"openmp": True}, None, {"OMP_NUM_THREADS": "10000"}) == CORES
    env = {cpu_threads.ADAPT: "0"}  # the user's: the budget, fixed
    assert cpu_threads.apply(None, env) == cpu_threads.budget() and env[cpu_threads.ADAPT] == "0"
    assert not cpu_threads.adaptive(env)


def caffetool(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    full = {key: value for key, value in os.environ.items() if not key.startswith("INVOKE_")}
    full = {key: value for key, value in {**full, **CLEAN, **env}.items() if value != ""}
    return subprocess.run([str(CAFFETOOL), *args], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env=full, stdin=subprocess.DEVNULL)


def test_threads_past_the_cores_are_refused_before_anything_runs(tmp_path):
    done = caffetool("train", "--threads", str(CORES + 1), "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert done.returncode == 1, done
    assert done.stderr == (f"Error: --threads must be from 1 to {CORES} (the cores this process may use; more "
                           f"threads than cores only wait for each other), got {CORES + 1}\n")
    assert list(tmp_path.iterdir()) == []
    done = caffetool("memory.estimate", "--model", "lenet", "--threads", str(CORES + 1), cwd=tmp_path)
    assert done.returncode == 1 and done.stderr.startswith("Error: --threads must be from 1 to"), done


def test_the_list_says_which_value_of_the_environment_it_capped(tmp_path):
    done = caffetool("--list", cwd=tmp_path, OMP_NUM_THREADS="10000", CAFFE_ADAPT_THREADS="maybe")
    assert done.returncode == 0, done
    assert done.stderr.splitlines() == [
        f"Warning: OMP_NUM_THREADS=10000 is capped at {CORES}: this process may use {CORES} core(s), "
        "and more threads than cores only wait for each other",
        "Warning: CAFFE_ADAPT_THREADS=maybe is ignored: it must be 1 (the thread count follows the CPU) "
        "or 0 (it stays fixed)"]


@pytest.mark.engine
@pytest.mark.parametrize("env,threads,adapt,warned", [
    ({"OMP_NUM_THREADS": "10000"}, CORES, "0", "is capped at"),
    ({cpu_threads.ADAPT: "0"}, None, "0", None),
])
def test_training_runs_within_the_cores_whatever_the_environment_says(fashion_data, tmp_path, env, threads, adapt,
                                                                      warned):
    runs = tmp_path / "runs"
    done = caffetool("train", "--dataset", "fashion-mnist", "--data-dir", str(fashion_data.path.parent), "--runs-dir",
                     str(runs), "--name", "t", "--max-iter", "20", "--test-interval", "20", "--test-iter", "2",
                     cwd=tmp_path, **env)
    assert done.returncode == 0, done.stderr[-2000:]
    warnings = [line for line in done.stderr.splitlines() if line.startswith("Warning:")]
    assert warnings == ([] if warned is None else [warnings[0]]) and (warned is None or warned in warnings[0])
    recorded = json.loads((runs / "t" / "manifest.json").read_text())["threads"]
    wanted = str(threads or cpu_threads.budget())
    assert all(recorded[name] == wanted for name in cpu_threads.VARIABLES), recorded
    assert recorded[cpu_threads.ADAPT] == adapt, recorded
    assert recorded["plan"]["adaptive"] == (adapt == "1"), recorded
    assert all(1 <= n <= CORES for _, n in recorded["resized"]), recorded
