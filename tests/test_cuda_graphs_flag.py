"""``--no-cuda-graphs``: the solver flag that writes ``cuda_graphs: false`` (engine patch 0014's field)
into the solver of a run, generated or the user's own, and that a run left at the default keeps out
of its solver, so the file stays one stock BVLC Caffe reads.

The engine here is a CPU build, where the field changes nothing: one short real training (10
iterations, then resumed to 20) shows the flag reaches ``caffe train`` and that the run keeps it;
the rest is read from the files caffetool writes, parsed by the engine's own ``caffe_pb2``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from caffetool.nets import project, prototxt, solvers
from caffetool.runs.folder import RunFolder
from caffetool.sweep import searchspace
from caffetool.tasks.solver_flags import given
from tests.caffe_root import lay_out

CAFFETOOL = Path(sys.executable).parent / "caffetool"
LENET_SOLVER = "examples/mnist/lenet_solver.prototxt"
QUICK = ("--test-iter", "2", "--display", "5")


def caffetool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(CAFFETOOL), *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def succeeded(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def solver_of(path: Path, caffe) -> object:
    return prototxt.read(path, caffe.proto.caffe_pb2.SolverParameter())


def test_the_tasks_show_the_switch_and_keep_their_short_flags(tmp_path):
    for task in ("train", "model.generate"):  # sweep's: tests/test_sweep.py
        shown = " ".join(succeeded(caffetool(task, "--help", cwd=tmp_path)).split()).replace("- ", "-")
        assert "--[no-]cuda-graphs CUDA graphs on a GPU (default on): --no-cuda-graphs runs every call" in shown, task
    # The switch goes last in the signature: the flags after the solver's keep their short letters.
    assert "-c STRING, --tracking-uri=STRING" in caffetool("train", "--help", cwd=tmp_path).stdout


def test_train_without_graphs_writes_it_and_resume_keeps_it(caffe, fashion_data, tmp_path):
    data_dir, runs = fashion_data.path.parent, tmp_path / "runs"
    succeeded(caffetool("train", "--no-cuda-graphs", "--max-iter", "10", "--snapshot", "10", "--test-interval", "10",
                        *QUICK, "--data-dir", str(data_dir), "--runs-dir", str(runs), "--name", "plain", cwd=tmp_path))
    folder = RunFolder(runs / "plain")
    solver = solver_of(folder.solver, caffe)
    assert solver.HasField("cuda_graphs") and solver.cuda_graphs is False and solver.max_iter == 10

    out = succeeded(caffetool("train.resume", "plain", "--max-iter", "20", "--runs-dir", str(runs), cwd=tmp_path))
    assert "iterations: 20" in out
    solver = solver_of(folder.solver, caffe)
    assert solver.HasField("cuda_graphs") and solver.cuda_graphs is False and solver.max_iter == 20


def test_model_generate_writes_the_field_only_when_graphs_are_off(caffe, fashion_data, tmp_path):
    base = ("model.generate", "--model", "lenet", "--dataset", "fashion-mnist",
            "--data-dir", str(fashion_data.path.parent), "--max-iter", "10")
    succeeded(caffetool(*base, "--out", str(tmp_path / "on"), cwd=tmp_path))
    succeeded(caffetool(*base, "--no-cuda-graphs", "--out", str(tmp_path / "off"), cwd=tmp_path))
    assert "cuda_graphs" not in (tmp_path / "on" / "solver.prototxt").read_text()
    assert solver_of(tmp_path / "on" / "solver.prototxt", caffe).cuda_graphs is True  # the engine's default
    off = solver_of(tmp_path / "off" / "solver.prototxt", caffe)
    assert off.HasField("cuda_graphs") and off.cuda_graphs is False


@pytest.mark.parametrize(("file_says", "flag_on", "written"), [
    ("", True, None),  # nothing in the file, no flag: the copy says nothing either
    ("", False, False),  # --no-cuda-graphs over the user's file
    ("cuda_graphs: false\n", True, False),  # the file's own choice stays
])
def test_a_users_solver_gets_the_flag_and_keeps_its_own_choice(engine, caffe, fashion_data, tmp_path,
                                                               file_says, flag_on, written):
    root = lay_out(tmp_path / "caffe", engine, fashion_data)
    with (root / LENET_SOLVER).open("a") as f:
        f.write(file_says)
    pb2 = caffe.proto.caffe_pb2
    loaded = project.load(LENET_SOLVER, engine, pb2, cwd=root)
    project.override(loaded, solvers.SolverOptions.from_flags(cuda_graphs=flag_on), False, pb2)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    path = project.write(loaded, run_dir, pb2)
    solver = solver_of(path, caffe)
    if written is None:
        assert "cuda_graphs" not in path.read_text()
    else:
        assert solver.HasField("cuda_graphs") and solver.cuda_graphs is written


def test_a_sweep_fixes_the_switch_only_when_it_is_off():
    flags = {"base_lr": None, "max_iter": "10", "stepvalue": [], "cuda_graphs": True}
    assert given(flags) == {"max_iter": "10"}
    fixed = given({**flags, "cuda_graphs": False})
    assert fixed == {"max_iter": "10", "cuda_graphs": False}
    assert searchspace.options(fixed, {"base_lr": 0.1}).cuda_graphs is False
    assert searchspace.options(given(flags), {"base_lr": 0.1}).cuda_graphs is True
