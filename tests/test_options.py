"""Every numeric option of the model, train and memory tasks, typed wrong, through Invoke's real
command line: one ``Error: ...`` line naming the flag and the value, exit code 1, no traceback, and
nothing created."""

from __future__ import annotations

import pytest

from .test_tasks_engine import invoke

BAD_NUMBERS = [
    (["model.generate", "--model", "lenet", "--base-lr", "abc"], "--base-lr 'abc' is not a number"),
    (["model.generate", "--model", "lenet", "--max-iter", "1.5"], "--max-iter '1.5' is not a whole number"),
    (["model.generate", "--model", "lenet", "--batch-size", "x"], "--batch-size 'x' is not a number"),
    (["model.generate", "--model", "lenet", "--stepvalue", "ten"], "--stepvalue 'ten' is not a number"),
    (["model.generate", "--model", "lenet", "--momentum", "inf"], "--momentum 'inf' is not a finite number"),
    (["memory.estimate", "--model", "lenet", "--batch-size", "-5"], "--batch-size must be at least 1, got -5"),
    (["memory.estimate", "--model", "lenet", "--iter-size", "abc"], "--iter-size 'abc' is not a number"),
    (["memory.fit", "--model", "lenet", "--gpu", "K40", "--batch-size", "1.5"],
     "--batch-size '1.5' is not a whole number"),
    (["memory.measure", "--model", "lenet", "--classes", "0"], "--classes must be at least 1, got 0"),
    (["train.time", "--iterations", "x"], "--iterations 'x' is not a number"),
    (["train.time", "--top", "0"], "--top must be at least 1, got 0"),
    (["train.resume", "any", "--max-iter", "abc"], "--max-iter 'abc' is not a number"),
    (["train.test", "any", "--iterations", "-1"], "--iterations must be at least 1, got -1"),
    (["memory.estimate", "--model", "lenet", "--threads", "two"], "--threads 'two' is not a number"),
    (["train.resume", "any", "--threads", "0"], "--threads must be a number of CPU threads from 1 to 4096, got 0"),
]


@pytest.mark.parametrize("args,message", BAD_NUMBERS, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_a_bad_number_is_an_error_line_not_a_traceback(args, message, tmp_path):
    done = invoke(*args)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr + done.stdout
    assert done.stderr.strip() == f"Error: {message}"


OUT_OF_RANGE = [
    (["--iter-size", "0"], "--iter-size must be a number of batches from 1 to 2147483647, got 0"),
    (["--momentum", "-1"], "--momentum must be a decay factor from 0 to just below 1, got -1.0"),
    (["--gamma", "-5"], "--gamma must be an lr factor above 0, got -5.0"),
    (["--weight-decay", "-1"], "--weight-decay must be a penalty of 0 or more, got -1.0"),
    (["--test-iter", "0"], "--test-iter must be a number of batches from 1 to 2147483647, got 0"),
    (["--threads", "5000"], "--threads must be a number of CPU threads from 1 to 4096, got 5000"),
    (["--lr-policy", "step", "--gamma", "0.1", "--stepsize", "0"],
     "--stepsize must be an iteration count from 1 to 2147483647, got 0"),
]


@pytest.mark.parametrize("flags,message", OUT_OF_RANGE)
def test_train_refuses_solver_values_before_a_run_directory_exists(flags, message, tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    done = invoke("train", "--runs-dir", str(runs), "--data-dir", str(tmp_path / "data"), "--name", "r", *flags)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip() == f"Error: {message}"
    assert list(tmp_path.iterdir()) == [runs] and list(runs.iterdir()) == []  # no run, no data fetched


def test_generate_refuses_solver_values_before_writing(tmp_path):
    done = invoke("model.generate", "--model", "lenet", "--out", str(tmp_path / "out"), "--iter-size", "0")
    assert done.returncode == 1
    assert done.stderr.strip() == "Error: --iter-size must be a number of batches from 1 to 2147483647, got 0"
    assert not (tmp_path / "out").exists()


@pytest.mark.engine
def test_names_are_taken_in_any_case(fashion_data, tmp_path):
    done = invoke("model.generate", "--model", "lenet", "--dataset", "fashion-mnist", "--type", "adam",
                  "--mode", "CPU", "--data-dir", str(fashion_data.path.parent), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert 'type: "Adam"' in (tmp_path / "out" / "solver.prototxt").read_text()
    done = invoke("memory.estimate", "--model", "lenet", "--type", "ADAM", "--phase", "Train", "--json")
    assert done.returncode == 0, done.stderr
    assert '"solver": "Adam"' in done.stdout
