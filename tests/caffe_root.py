"""A Caffe root in a test's folder: BVLC's example files from the engine, caffetool's LMDBs at the
paths those files name, and a real ``caffe train`` run from there, as a user runs it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from types import ModuleType

from caffetool.data.layout import Dataset
from caffetool.engine import EngineInfo
from caffetool.engine.locate import caffe_env
from caffetool.nets import prototxt

EXAMPLES = Path("share/caffe/examples/mnist")
AUTOENCODER = "examples/mnist/mnist_autoencoder.prototxt"
AUTOENCODER_SOLVER = "examples/mnist/mnist_autoencoder_solver.prototxt"


def lay_out(root: Path, engine: EngineInfo, data: Dataset) -> Path:
    """``root`` with ``examples/mnist`` holding BVLC's files unchanged and the Fashion-MNIST LMDBs
    as ``mnist_train_lmdb`` and ``mnist_test_lmdb``."""
    folder = root / "examples/mnist"
    shutil.copytree(engine.prefix / EXAMPLES, folder)
    for split in ("train", "test"):
        (folder / f"mnist_{split}_lmdb").symlink_to(data.db(split), target_is_directory=True)
    return root


def shorten_solver(root: Path, name: str, caffe_pb2: ModuleType, **fields: int | list[int]) -> Path:
    """A copy of the solver ``name`` beside it (``short_<name>``), on the CPU, with ``fields`` changed."""
    solver = prototxt.read(root / name, caffe_pb2.SolverParameter())
    solver.solver_mode = caffe_pb2.SolverParameter.CPU
    for key, value in fields.items():
        if isinstance(value, list):
            del getattr(solver, key)[:]
            getattr(solver, key).extend(value)
        else:
            setattr(solver, key, value)
    short = root / Path(name).with_name(f"short_{Path(name).name}")
    short.write_text(prototxt.to_text(solver))
    return short


def caffe_train(engine: EngineInfo, root: Path, solver: Path) -> Path:
    """``caffe train -solver SOLVER`` from ``root``; its log is kept as ``root/train.log``."""
    done = subprocess.run([str(engine.caffe), "train", f"-solver={solver.relative_to(root)}"], cwd=root,
                          capture_output=True, text=True, env=caffe_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    log = root / "train.log"
    log.write_text(done.stderr)
    return log


def autoencoder_log(engine: EngineInfo, caffe: ModuleType, data: Dataset, root: Path) -> tuple[Path, Path]:
    """BVLC's MNIST autoencoder trained for 30 iterations, tested every 20 on its two test nets:
    the log and the solver it was trained with."""
    lay_out(root, engine, data)
    solver = shorten_solver(root, AUTOENCODER_SOLVER, caffe.proto.caffe_pb2, max_iter=30, test_interval=20,
                            display=10, test_iter=[5, 3])
    return caffe_train(engine, root, solver), solver
