"""The memory benchmark's nets (benchmarks/memory_nets.py) build and train in the real engine.

Each net is written with a solver in tmp_path and stepped once in pycaffe, in a child process so
that a Caffe ``CHECK`` failure fails its own test with Caffe's message instead of ending pytest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import memory_nets
from caffetool.proc import last_lines

CHILD = r"""
import json, math, sys
import caffe
caffe.set_mode_cpu()
solver = caffe.get_solver(sys.argv[1])
solver.step(1)
net = solver.net
losses = {name: float(net.blobs[name].data.sum()) for name, w in net.blob_loss_weights.items() if w}
print(json.dumps({"types": [layer.type for layer in net.layers],
                  "test_types": [layer.type for layer in solver.test_nets[0].layers],
                  "shapes": {name: list(blob.data.shape) for name, blob in net.blobs.items()},
                  "losses": losses}))
"""

SOLVER = 'net: "net.prototxt" base_lr: 0.001 lr_policy: "fixed" max_iter: 1 test_iter: 1 test_interval: 1000 ' \
         'momentum: 0.9 snapshot_after_train: false solver_mode: CPU type: "Adam"'

# Layer types the benchmark promises to cover (issue 13), each in at least one net.
COVERED = {
    "Convolution", "BatchNorm", "Scale", "ReLU", "Eltwise", "Pooling", "InnerProduct", "SoftmaxWithLoss",
    "Concat", "LRN", "Dropout", "Deconvolution", "Crop", "LSTM", "RNN", "Embed", "Slice", "PReLU", "ELU",
    "Sigmoid", "TanH", "AbsVal", "BNLL", "Power", "Exp", "Log", "Reshape", "Flatten", "Tile", "Reduction",
    "Bias", "ArgMax", "Threshold", "SPP", "Im2col", "SigmoidCrossEntropyLoss", "EuclideanLoss", "HingeLoss",
    "ContrastiveLoss", "InfogainLoss", "MultinomialLogisticLoss", "Softmax", "Accuracy",
}


def declared(net, phase: int) -> list[str]:
    """Layer types of ``net`` (a NetParameter) in ``phase``, in order."""
    def included(layer) -> bool:
        return all(r.phase == phase for r in layer.include if r.HasField("phase"))
    return [layer.type for layer in net.layer if included(layer)]


def step(engine, net, folder: Path) -> dict:
    """``net`` and an Adam solver written in ``folder``, built and stepped once by pycaffe."""
    (folder / "net.prototxt").write_text(str(net))
    (folder / "solver.prototxt").write_text(SOLVER)
    env = {**os.environ, "GLOG_minloglevel": "2",
           "PYTHONPATH": os.pathsep.join([str(engine.python_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", CHILD, "solver.prototxt"], cwd=folder, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, last_lines(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("bench", memory_nets.NETS, ids=lambda b: b.name)
def test_the_engine_builds_and_steps_each_net(caffe, engine, tmp_path, bench):
    net = bench.build(caffe, 2)
    got = step(engine, net, tmp_path)
    # Caffe adds Split layers where a blob feeds several layers; every declared layer is built.
    assert [t for t in got["types"] if t != "Split"] == declared(net, 0)
    assert [t for t in got["test_types"] if t != "Split"] == declared(net, 1)
    assert got["shapes"][net.layer[0].top[0]][0] == 2
    if "cont_sentence" in got["shapes"]:  # sequences are laid out T x N
        assert got["shapes"]["cont_sentence"] == [20, 2]
    assert got["losses"] and all(abs(v) < float("inf") for v in got["losses"].values()), got["losses"]


def test_the_nets_cover_the_promised_layer_types(caffe):
    built = [bench.build(caffe, 2) for bench in memory_nets.NETS]
    types = {t for net in built for phase in (0, 1) for t in declared(net, phase)}
    assert COVERED - types == set()


def test_batch_size_is_the_builders_parameter(caffe):
    small, large = (memory_nets.resnet50(caffe, b) for b in (2, 5))
    assert [list(s.dim) for s in small.layer[0].dummy_data_param.shape] == [[2, 3, 64, 64], [2]]
    assert [list(s.dim) for s in large.layer[0].dummy_data_param.shape] == [[5, 3, 64, 64], [5]]


def test_an_unknown_net_is_named_with_the_known_ones():
    with pytest.raises(KeyError, match="no benchmark net 'alexnet'; known: resnet50, googlenet"):
        memory_nets.get("alexnet")
