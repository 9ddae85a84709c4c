"""caffetool.nets.project: a user's own solver and nets, copied into a run directory and trained there
with the real ``caffe train``, the user's folder untouched."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import cv2
import numpy as np
import pytest

from caffetool.checksum import sha256_file
from caffetool.engine.locate import caffe_env
from caffetool.errors import ConfigError, DataError, NetError, RunError
from caffetool.inference import modelfiles
from caffetool.nets import project
from caffetool.nets.solvers import SolverOptions
from caffetool.serving import classifier
from caffetool.train import session
from tests.caffe_root import AUTOENCODER_SOLVER, lay_out
from tests.conftest import PROJECT

LENET_SOLVER = "examples/mnist/lenet_solver.prototxt"

V1_NET = """name: "OldNet"
layers { name: "data" type: DATA top: "data" top: "label"
  data_param { source: "db/train_lmdb" backend: LMDB batch_size: 16 }
  transform_param { scale: 0.00390625 } include { phase: TRAIN } }
layers { name: "data" type: DATA top: "data" top: "label"
  data_param { source: "db/test_lmdb" backend: LMDB batch_size: 16 }
  transform_param { scale: 0.00390625 } include { phase: TEST } }
layers { name: "ip" type: INNER_PRODUCT bottom: "data" top: "ip"
  inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layers { name: "loss" type: SOFTMAX_LOSS bottom: "ip" bottom: "label" top: "loss" }
"""

V1_SOLVER = """net: "old/net.prototxt"
test_iter: 2
test_interval: 10
base_lr: 0.01
momentum: 0.9
lr_policy: "fixed"
max_iter: 10
snapshot_prefix: "old/snap"
solver_mode: CPU
solver_type: NESTEROV
"""


def tree_hash(root: Path) -> dict[str, str]:
    """Every file under ``root`` with its sha256, and every link with its target."""
    seen: dict[str, str] = {}
    for folder, dirs, names in os.walk(root):
        for name in [*dirs, *names]:
            path = Path(folder) / name
            if path.is_symlink():
                seen[str(path)] = "-> " + os.readlink(path)
            elif path.is_file():
                seen[str(path)] = sha256_file(path)
    return seen


def caffe_train(engine, solver: Path, cwd: Path) -> str:
    """``caffe train -solver SOLVER`` from ``cwd``; its log."""
    done = subprocess.run([str(engine.caffe), "train", f"-solver={solver}"], cwd=cwd, capture_output=True,
                          text=True, env=caffe_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stderr


def test_bvlc_lenet_trains_from_its_run_directory(engine, caffe, fashion_data, tmp_path: Path) -> None:
    root = lay_out(tmp_path / "caffe", engine, fashion_data)
    before = tree_hash(root)
    pb2 = caffe.proto.caffe_pb2
    loaded = project.load(LENET_SOLVER, engine, pb2, cwd=root)
    assert loaded.notices == []
    assert loaded.original.max_iter == 10000
    loaded.solver.max_iter, loaded.solver.test_interval, loaded.solver.test_iter[0] = 20, 20, 2
    loaded.solver.solver_mode = pb2.SolverParameter.CPU
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    solver = project.write(loaded, run_dir, pb2)
    log = caffe_train(engine, solver, tmp_path)
    assert "Iteration 20, Testing net (#0)" in log
    assert sorted(p.name for p in (run_dir / "snapshots").iterdir()) == [
        "lenet_iter_20.caffemodel", "lenet_iter_20.solverstate"]
    assert tree_hash(root) == before
    mnist = root / "examples/mnist"
    assert project.checksums(loaded.reads) == {
        str(mnist / "lenet_solver.prototxt"): sha256_file(mnist / "lenet_solver.prototxt"),
        str(mnist / "lenet_train_test.prototxt"): sha256_file(mnist / "lenet_train_test.prototxt"),
        str(fashion_data.db("train").resolve() / "data.mdb"): sha256_file(fashion_data.db("train") / "data.mdb"),
        str(fashion_data.db("test").resolve() / "data.mdb"): sha256_file(fashion_data.db("test") / "data.mdb"),
    }


def test_old_formats_are_upgraded_with_a_notice(engine, caffe, fashion_data, tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "db").mkdir()
    for split in ("train", "test"):
        (tmp_path / f"db/{split}_lmdb").symlink_to(fashion_data.db(split), target_is_directory=True)
    (tmp_path / "old/net.prototxt").write_text(V1_NET)
    (tmp_path / "old/solver.prototxt").write_text(V1_SOLVER)
    pb2 = caffe.proto.caffe_pb2
    loaded = project.load("old/solver.prototxt", engine, pb2, cwd=tmp_path)
    assert loaded.notices == [
        "old/solver.prototxt: old solver format upgraded with the engine's upgrade_solver_proto_text",
        "old/net.prototxt: old net format upgraded with the engine's upgrade_net_proto_text",
    ]
    assert loaded.solver.type == "Nesterov"
    assert [layer.type for layer in loaded.train_net.layer] == ["Data", "Data", "InnerProduct", "SoftmaxWithLoss"]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    log = caffe_train(engine, project.write(loaded, run_dir, pb2), run_dir)
    assert "Optimization Done." in log
    assert (run_dir / "snapshots/snap_iter_10.caffemodel").is_file()
    assert not list((tmp_path / "old").glob("snap*"))


@pytest.mark.parametrize("missing, error, message", [
    ("old/solver.prototxt", NetError, "solver not found: {root}/old/solver.prototxt"),
    ("old/net.prototxt", NetError, "net not found: {root}/old/net.prototxt"),
    ("db/train_lmdb", DataError, "data's source not found: {root}/db/train_lmdb"),
])
def test_a_missing_file_is_named(engine, caffe, tmp_path: Path, missing: str, error: type[Exception],
                                 message: str) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "db/train_lmdb").mkdir(parents=True)
    (tmp_path / "db/test_lmdb").mkdir(parents=True)
    (tmp_path / "db/test_lmdb/data.mdb").write_bytes(b"x")
    (tmp_path / "db/train_lmdb/data.mdb").write_bytes(b"x")
    (tmp_path / "old/net.prototxt").write_text(V1_NET)
    (tmp_path / "old/solver.prototxt").write_text(V1_SOLVER)
    target = tmp_path / missing
    if target.is_dir():
        for member in target.iterdir():
            member.unlink()
        target.rmdir()
    else:
        target.unlink()
    with pytest.raises(error) as caught:
        project.load("old/solver.prototxt", engine, caffe.proto.caffe_pb2, cwd=tmp_path)
    assert str(caught.value) == message.format(root=tmp_path.resolve())


def test_train_solver_runs_bvlc_lenet_from_the_caffe_root(engine, caffe, fashion_data, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    root = lay_out(tmp_path / "caffe", engine, fashion_data)
    monkeypatch.chdir(root)
    before = tree_hash(root)
    said: list[str] = []
    request = session.TrainRequest(solver=LENET_SOLVER, runs_dir=tmp_path / "my runs", name="mine", gpu="cpu",
                                   options=SolverOptions(max_iter=60, test_iter=5))  # a space in its snapshots' paths
    result = session.train(engine, request, say=said.append, progress=False)
    assert result.outcome.status == "finished"
    assert said == ["lenet_solver.prototxt asks for solver_mode: GPU; training on the CPU",
                    "run mine: examples/mnist/lenet_solver.prototxt, 60 iterations, CPU",
                    "testing the weights of iteration 60: test net #0 (5 batches)"]
    m = result.manifest
    assert m.iterations == 60
    assert m.final["test0"]["NumIters"] == 60
    mnist = root / "examples/mnist"
    assert m.project["files_sha256"][str(mnist / "lenet_train_test.prototxt")] == sha256_file(
        mnist / "lenet_train_test.prototxt")
    assert "max_iter: 10000" in m.project["original_solver"]
    assert "max_iter: 60" in m.project["effective_solver"]
    assert (result.run_dir / "snapshots/lenet_iter_60.caffemodel").is_file()
    deploy = caffe.Net(str(result.run_dir / "deploy.prototxt"),
                       str(result.run_dir / "snapshots/lenet_iter_60.caffemodel"), caffe.TEST)
    assert deploy.blobs["data"].data.shape == (1, 1, 28, 28)
    assert deploy.outputs == ["prob"] and deploy.blobs["prob"].data.shape == (1, 10)
    served = classifier.load(engine, modelfiles.from_run(result.run_dir))  # no --labels: classes by index
    assert served.labels == [str(i) for i in range(10)]
    image = cv2.imencode(".png", np.full((28, 28), 255, np.uint8))[1].tobytes()
    assert {t["label"] for t in served.classify(image, top=10)["top"]} == set(served.labels)
    assert tree_hash(root) == before
    resumed = session.resume(engine, result.run_dir, max_iter=80, progress=False, say=said.append)
    assert resumed.outcome.status == "finished"
    assert resumed.manifest.iterations == 80
    assert tree_hash(root) == before


def test_a_net_that_is_no_classifier_gets_no_deploy(engine, caffe, fashion_data, tmp_path: Path) -> None:
    root = lay_out(tmp_path / "caffe", engine, fashion_data)
    pb2 = caffe.proto.caffe_pb2
    autoencoder = project.load(AUTOENCODER_SOLVER, engine, pb2, cwd=root)
    assert project.deploy(autoencoder.train_net, pb2) is None
    assert len(autoencoder.test_nets) == 2
    lenet = project.load(LENET_SOLVER, engine, pb2, cwd=root)
    assert [layer.type for layer in project.deploy(lenet.train_net, pb2).layer] == [
        "Input", "Convolution", "Pooling", "Convolution", "Pooling", "InnerProduct", "ReLU", "InnerProduct",
        "Softmax"]


def test_the_command_names_a_missing_net(engine, caffe, tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "old/solver.prototxt").write_text(V1_SOLVER)
    done = subprocess.run([str(PROJECT / ".venv/bin/caffetool"), "train", "--solver", "old/solver.prototxt"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == f"Error: net not found: {tmp_path.resolve()}/old/net.prototxt"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old"]


def test_the_demo_says_a_run_without_a_deploy_net_is_no_classifier(engine, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "snapshots").mkdir(parents=True)
    (run_dir / "train_net.prototxt").write_text('name: "autoencoder"\n')
    files = modelfiles.ModelFiles(run_dir / "deploy.prototxt", run_dir / "snapshots/x_iter_1.caffemodel",
                                  run_dir / "labels.txt", run=run_dir)
    with pytest.raises(RunError) as caught:
        classifier.load(engine, files)
    assert str(caught.value) == (f"{run_dir} trained a net that is not a classifier (no SoftmaxWithLoss), so it "
                                 "has no deploy net to serve; train it again with --deploy FILE")


@pytest.mark.parametrize("flag, expected", [(None, "Nesterov"), ("sgd", "SGD"), ("Adam", "Adam")])
def test_type_replaces_the_files_only_when_given(engine, caffe, fashion_data, tmp_path: Path,
                                                  flag: str | None, expected: str) -> None:
    """An absent --type keeps the solver file's (upgraded) type; a given one, even SGD, wins."""
    (tmp_path / "old").mkdir()
    (tmp_path / "db").mkdir()
    for split in ("train", "test"):
        (tmp_path / f"db/{split}_lmdb").symlink_to(fashion_data.db(split), target_is_directory=True)
    (tmp_path / "old" / "net.prototxt").write_text(V1_NET)
    (tmp_path / "old" / "solver.prototxt").write_text(V1_SOLVER)
    pb2 = caffe.proto.caffe_pb2
    loaded = project.load("old/solver.prototxt", engine, pb2, cwd=tmp_path)
    project.override(loaded, SolverOptions.from_flags(type=flag), False, pb2, type_given=flag is not None)
    assert loaded.solver.type == expected


def test_a_gpu_run_checks_the_users_net_against_gpu_memory_first(engine, caffe, fashion_data, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPU here: a stand-in GPU (devices.choose and preflight.gpu_memory replaced) of 420 MiB, 20 MiB
    once the 400 MiB reserve is kept, which BVLC's LeNet at batch 64 does not fit."""
    from caffetool.backends import devices
    from caffetool.train import preflight  # noqa: PLC0415

    root = lay_out(tmp_path / "caffe", engine, fashion_data)
    monkeypatch.chdir(root)
    loaded = project.load(LENET_SOLVER, engine, caffe.proto.caffe_pb2)
    assert project.data_shape(loaded.train_net, caffe.proto.caffe_pb2) == (1, 28, 28)
    monkeypatch.setattr(session.devices, "choose",
                        lambda engine, request: devices.Devices(["-gpu", "0"], "GPU 0 (1 x stand-in)", True))
    monkeypatch.setattr(preflight, "gpu_memory", lambda: [420 * 2**20])
    request = session.TrainRequest(solver=LENET_SOLVER, runs_dir=tmp_path / "runs", name="big")
    with pytest.raises(ConfigError) as refused:
        session.train(engine, request, say=lambda _: None, progress=False)
    fits = int(re.search(r"the largest batch that fits is (\d+) — use --batch-size \1 with --iter-size",
                         str(refused.value)).group(1))
    assert 1 <= fits < 64 and "more than the 0.02 GiB available (0.4 GiB less 400 MiB kept free)" in str(refused.value)
    assert not (tmp_path / "runs" / "big").exists()


def test_batch_size_flags_replace_the_data_layers_batches(engine, caffe, fashion_data, tmp_path: Path) -> None:
    root = lay_out(tmp_path / "caffe", engine, fashion_data)
    pb2 = caffe.proto.caffe_pb2
    loaded = project.load(LENET_SOLVER, engine, pb2, cwd=root)
    project.set_batches(loaded, 16, 25, pb2)
    train = {layer.name + str(layer.include[0].phase): layer.data_param.batch_size for layer in loaded.train_net.layer
             if layer.type == "Data"}
    assert train == {"mnist0": 16, "mnist1": 100}  # the TRAIN layer's batch, BVLC's TEST batch kept in the train net
    assert [layer.data_param.batch_size for layer in loaded.test_nets[0].layer
            if layer.type == "Data" and layer.include[0].phase == pb2.TEST] == [25]
