"""A run's snapshots: listed by iteration, and trusted only once complete (real snapshots of a real run)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from caffetool.data.layout import Dataset
from caffetool.engine import EngineInfo
from caffetool.nets.solvers import SolverOptions
from caffetool.runs import snapshots
from caffetool.train import session


@pytest.fixture(scope="module")
def snapshotted(engine: EngineInfo, fashion_data: Dataset, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A LeNet run with snapshots at iterations 10 and 20 (SGD)."""
    request = session.TrainRequest(dataset="fashion-mnist", data_dir=fashion_data.path.parent,
                                   runs_dir=tmp_path_factory.mktemp("runs"), name="snaps",
                                   options=SolverOptions(max_iter=20, snapshot=10, test_interval=20, test_iter=1,
                                                         display=10))
    result = session.train(engine, request, say=lambda _: None, progress=False)
    assert result.outcome.status == "finished", result.outcome.message
    return result.run_dir


@pytest.fixture
def run(snapshotted: Path, tmp_path: Path) -> Path:
    """A copy of the run to damage."""
    copy = tmp_path / "run"
    shutil.copytree(snapshotted, copy)
    return copy


def test_iteration_of_snapshot_names():
    assert snapshots.iteration_of("snapshots/lenet_iter_200.caffemodel") == 200
    assert snapshots.iteration_of("my_net_iter_3_iter_45.solverstate") == 45
    assert snapshots.iteration_of("lenet_iter_200.caffemodel.h5") is None
    assert snapshots.iteration_of("lenet.caffemodel") is None
    assert snapshots.iteration_of("lenet_iter_x.solverstate") is None


def test_listing_pairs_files_by_iteration_in_numeric_order(run):
    (run / "snapshots" / "lenet_iter_100.caffemodel").write_bytes(b"")
    (run / "snapshots" / "notes.txt").write_text("not a snapshot")
    listed = snapshots.listing(run)
    assert [s.iteration for s in listed] == [10, 20, 100]
    assert listed[1] == snapshots.Snapshot(20, run / "snapshots" / "lenet_iter_20.caffemodel",
                                           run / "snapshots" / "lenet_iter_20.solverstate")
    assert listed[2].state is None and listed[2].name == "lenet_iter_100.caffemodel"
    assert snapshots.listing(run / "nothing-here") == []


def test_complete_snapshots_pass(run, caffe):
    pb = caffe.proto.caffe_pb2
    assert [snapshots.problem(run, s, pb) for s in snapshots.listing(run)] == [None, None]
    assert snapshots.newest_complete(run, pb).iteration == 20
    assert snapshots.newest_weights(run, pb) == run / "snapshots" / "lenet_iter_20.caffemodel"


def test_a_cut_short_solverstate_is_skipped(run, caffe):
    state = run / "snapshots" / "lenet_iter_20.solverstate"
    state.write_bytes(state.read_bytes()[:12288])  # what a full tmpfs left behind
    heard = []
    chosen = snapshots.newest_complete(run, caffe.proto.caffe_pb2, skipped=lambda s, why: heard.append((s.name, why)))
    assert chosen.iteration == 10
    assert heard == [("lenet_iter_20.solverstate", "lenet_iter_20.solverstate is cut short or damaged")]


def test_an_empty_solverstate_is_not_trusted(run, caffe):
    (run / "snapshots" / "lenet_iter_20.solverstate").write_bytes(b"")  # parses: a state of nothing
    why = snapshots.problem(run, snapshots.listing(run)[-1], caffe.proto.caffe_pb2)
    assert why == "lenet_iter_20.solverstate is for iteration 0"


def test_history_length_is_checked_against_the_net_and_solver(run, caffe):
    pb = caffe.proto.caffe_pb2
    newest = snapshots.listing(run)[-1]
    state = pb.SolverState()
    state.ParseFromString(newest.state.read_bytes())
    del state.history[-1]  # a state cut exactly between two blobs
    newest.state.write_bytes(state.SerializeToString())
    assert snapshots.problem(run, newest, pb) == (
        "lenet_iter_20.solverstate holds 7 history blobs where SGD keeps 8 for this net: it is cut short")
    assert snapshots.problem(run, snapshots.listing(run)[0], pb, "Adam") == (
        "lenet_iter_10.solverstate holds 8 history blobs where Adam keeps 16 for this net: it is cut short")


def test_weights_missing_or_cut_short(run, caffe):
    pb = caffe.proto.caffe_pb2
    weights = run / "snapshots" / "lenet_iter_20.caffemodel"
    weights.write_bytes(weights.read_bytes()[:100000])
    assert snapshots.problem(run, snapshots.listing(run)[-1], pb) == "lenet_iter_20.caffemodel is cut short or damaged"
    assert snapshots.newest_weights(run, pb) == run / "snapshots" / "lenet_iter_10.caffemodel"
    weights.unlink()
    assert snapshots.problem(run, snapshots.listing(run)[-1], pb) == (
        "its weights snapshots/lenet_iter_20.caffemodel are missing")
    assert snapshots.newest_complete(run, pb).iteration == 10


def test_without_the_engine_weights_count_once_their_state_exists(run):
    """Caffe writes the state after the weights: weights without a state may be cut short."""
    (run / "snapshots" / "lenet_iter_20.solverstate").unlink()
    assert snapshots.newest_weights(run) == run / "snapshots" / "lenet_iter_10.caffemodel"


def test_shared_parameters_count_once(caffe):
    pb = caffe.proto.caffe_pb2
    net = pb.NetParameter()
    for name in ("ip_a", "ip_b"):
        layer = net.layer.add(name=name, type="InnerProduct")
        layer.param.add(name="shared_w")
        layer.param.add()  # an unnamed bias: each layer owns its own
        layer.blobs.add().shape.dim.extend([10, 4])
        layer.blobs.add().shape.dim.extend([10])
    assert snapshots.learnable_shapes(net) == [[10, 4], [10], [10]]
