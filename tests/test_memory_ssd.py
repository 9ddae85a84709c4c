"""The SSD fork's layers (Normalize, Permute, PriorBox, DetectionOutput) in the memory estimator, against
the real engine: OpenCV's res10 face detector as published, and a small training net of the same
layers whose losses make them back-propagate.

What the engine allocates is ``memory.measure``'s figure (malloc's count after the solver is built, its
TEST net has run once and one training step is done): a deploy net is both the solver's TRAIN net and
its TEST net, which alone holds res10's DetectionOutput (``include { phase: TEST }``).
"""

from __future__ import annotations

import re
from pathlib import Path

import cv2
import numpy as np
import pytest

from benchmarks import facedetector
from caffetool.layers import catalogue
from caffetool.memory import batches, estimator, measuring, netgraph
from caffetool.nets import prototxt
from tests.test_cli import CAFFETOOL, run
from tests.test_memory_layers import FILLER, IMAGES, TOLERANCE, conv, dummy, engine_shapes, layer, parse

SSD_TYPES = {"Normalize", "Permute", "PriorBox", "DetectionOutput"}
NO_IMAGES = (1, 1, 1)  # the nets read no LMDB; measure() still makes one, as small as can be


@pytest.fixture(scope="module")
def res10(tmp_path_factory) -> tuple[Path, Path]:
    """res10's deploy.prototxt and caffemodel, verified, in a folder of this module's own."""
    return facedetector.files(tmp_path_factory.mktemp("res10"))


def deploy(caffe, path: Path, batch: int):
    net = prototxt.read(path, caffe.proto.caffe_pb2.NetParameter())
    batches.set_batch(net, batch)
    return net


@pytest.mark.parametrize("batch", [1, 4])
def test_res10_is_estimated_within_two_percent_of_the_engine(caffe, engine, res10, batch):
    net = deploy(caffe, res10[0], batch)
    e = estimator.estimate(net, estimator.Options(batch=batch), res10[0].read_text(), str(res10[0]))
    assert not e.lower_bound and not e.unmodelled
    assert {r.type for r in e.test_rows} >= SSD_TYPES
    got = measuring.measure(engine, caffe, net, "SGD", NO_IMAGES, 1)["allocated"]
    error = (e.total - got) / got
    print(f"res10 batch {batch}: estimate {e.total:,} measured {got:,} error {100 * error:+.2f}%")
    assert abs(error) <= TOLERANCE


def forward(caffe, net, weights: Path, folder: Path, batch: int) -> dict:
    """Blob shapes of ``net`` with the published weights after a forward pass on ``batch`` copies of the
    astronaut photo, and its parameters' shapes."""
    path = folder / "deploy.prototxt"
    path.write_text(str(net))
    engine_net = caffe.Net(str(path), str(weights), caffe.TEST)
    image = cv2.imread(str(facedetector.photo("astronaut", folder)))
    engine_net.blobs["data"].data[...] = np.repeat(facedetector.blob(image), batch, axis=0)
    engine_net.forward()
    return ({name: tuple(b.data.shape) for name, b in engine_net.blobs.items()},
            {name: [tuple(p.data.shape) for p in params] for name, params in engine_net.params.items()})


@pytest.mark.parametrize("batch", [1, 4])
def test_res10_blobs_have_the_engines_shapes_after_a_forward_pass(caffe, res10, tmp_path, batch):
    """Every blob of the TEST net and every parameter as the engine shapes them running the published
    weights on the astronaut photo. DetectionOutput's rows are what forward keeps, at most the
    estimate's ``keep_top_k`` (200) per image; with an NMS threshold of 1, which suppresses nothing,
    the engine keeps exactly that many."""
    net = deploy(caffe, res10[0], batch)
    g = netgraph.build(net, "test", None, batch)
    ours = {blob.split("@")[0]: shape for blob, shape in g.shapes.items()}
    assert {n.type for n in g.nodes} >= SSD_TYPES
    assert ours["detection_out"] == (1, 1, 200 * batch, 7)
    blobs, params = forward(caffe, net, res10[1], tmp_path, batch)
    assert {n.name: n.info.params for n in g.nodes if n.info.params} == params
    found = blobs.pop("detection_out")
    assert found[:2] == (1, 1) and found[3] == 7 and batch <= found[2] < 200 * batch
    assert {name: shape for name, shape in ours.items() if name != "detection_out"} == blobs
    out = next(layer for layer in net.layer if layer.type == "DetectionOutput")
    out.detection_output_param.nms_param.nms_threshold = 1.0
    blobs, _ = forward(caffe, net, res10[1], tmp_path, batch)
    assert ours == blobs


def test_detection_rows_are_bounded_by_what_forward_may_keep(caffe):
    """keep_top_k caps the rows; without it, top_k per class but the background; without either,
    every prior of every such class; one row per image when nothing can be kept."""
    priors, classes, num = 100, 3, 2
    bottoms = [(num, priors * 4), (num, priors * classes), (1, 2, priors * 4)]

    def rows(top_k: int | None = 40, keep_top_k: int = 50, background: int = 0) -> int:
        out = caffe.proto.caffe_pb2.LayerParameter(name="out", type="DetectionOutput")
        p = out.detection_output_param
        p.num_classes, p.keep_top_k, p.background_label_id = classes, keep_top_k, background
        if top_k is not None:
            p.nms_param.top_k = top_k
        info = catalogue.translation("DetectionOutput", "memory")(out, bottoms, "test")
        assert info.tops[0][:2] == (1, 1) and info.tops[0][3] == 7
        return info.tops[0][2]

    assert rows() == num * 50
    assert rows(keep_top_k=-1) == num * (classes - 1) * 40
    assert rows(keep_top_k=-1, background=-1) == num * classes * 40
    assert rows(top_k=None, keep_top_k=-1) == num * (classes - 1) * priors
    assert rows(top_k=500, keep_top_k=-1) == num * (classes - 1) * priors
    assert rows(top_k=0) == rows(keep_top_k=0) == num


# Normalize over each position's channels with a scale per channel, and over each whole item with one
# shared scale; on the input itself (no gradient to pass on, only its scale learns) and inside the net.
# Permute in another order and in the identity order (which shares data and gradient); PriorBox with a
# loss of its own, so that it back-propagates its zero gradient into the feature map.
PRIORS = 32 * 32 * 4 * 4  # cells x (a square, sqrt(min x max), ratio 2 and its flip) x 4 coordinates
TRAIN_NET = (IMAGES + dummy({"prior_target": ((1, 2, PRIORS), "constant 0")}).replace('name: "data"',
                                                                                     'name: "target_data"')
             + layer("norm0", "Normalize", ["data"], ["norm0"],
                     "norm_param { across_spatial: false channel_shared: true }")
             + conv("conv", "norm0", "conv")
             + layer("norm1", "Normalize", ["conv"], ["norm1"],
                     'norm_param { across_spatial: false channel_shared: false scale_filler { type: "constant" '
                     "value: 20 } }")
             + layer("norm2", "Normalize", ["norm1"], ["norm2"])
             + layer("perm", "Permute", ["norm2"], ["perm"], "permute_param { order: 0 order: 2 order: 3 order: 1 }")
             + layer("same", "Permute", ["perm"], ["same"], "permute_param { order: 0 }")
             + layer("fc", "InnerProduct", ["same"], ["fc"], f"inner_product_param {{ num_output: 4 {FILLER} }}")
             + layer("loss", "SoftmaxWithLoss", ["fc", "label"], ["loss"])
             + layer("prior", "PriorBox", ["conv", "data"], ["prior"],
                     "prior_box_param { min_size: 8 max_size: 16 aspect_ratio: 2 flip: true clip: true "
                     "variance: 0.1 variance: 0.1 variance: 0.2 variance: 0.2 }")
             + layer("prior_loss", "EuclideanLoss", ["prior", "prior_target"], ["prior_loss"]))


@pytest.mark.parametrize("solver", ["SGD", "Adam"])
def test_a_training_net_of_ssd_layers_is_estimated_within_two_percent(caffe, engine, solver):
    net = parse(caffe, TRAIN_NET)
    e = estimator.estimate(net, estimator.Options(solver=solver))
    assert not e.lower_bound and not e.unmodelled
    backward = {n.name for n in netgraph.build(net, "train", None, None).nodes if n.need_backward}
    assert {"norm0", "norm1", "norm2", "perm", "same", "prior"} <= backward
    got = measuring.measure(engine, caffe, net, solver, NO_IMAGES, 4)["allocated"]
    error = (e.total - got) / got
    print(f"ssd training net {solver}: estimate {e.total:,} measured {got:,} error {100 * error:+.2f}%")
    assert abs(error) <= TOLERANCE


def test_the_training_nets_shapes_and_parameters_are_the_engines(caffe, tmp_path):
    """Tops and parameters as the engine builds them: a shared scale is a blob of no axes."""
    blobs, params = engine_shapes(caffe, TRAIN_NET, tmp_path)
    g = netgraph.build(parse(caffe, TRAIN_NET), "train", None, None)
    assert {blob.split("@")[0]: shape for blob, shape in g.shapes.items()} == blobs
    assert {n.name: n.info.params for n in g.nodes if n.info.params} == params
    assert params["norm0"] == params["norm2"] == [()] and params["norm1"] == [(16,)]
    assert blobs["prior"] == (1, 2, PRIORS)


def test_buffers_follow_the_steps_that_touch_them(caffe):
    """``dot_`` only where a gradient goes to Normalize's input (not on the data itself); the
    identity Permute's top is its bottom's blob, data and gradient."""
    net = parse(caffe, TRAIN_NET)
    e = estimator.estimate(net, estimator.Options(test_net=False))
    row = {r.layer: r for r in e.rows}
    n, c, h, w = 8, 16, 32, 32
    assert row["norm0"].scratch_bytes == 4 * (n * h * w + c)  # norm_, channel_ones_
    assert row["norm1"].scratch_bytes == 4 * (2 * n * h * w + c)  # and dot_
    assert row["norm2"].scratch_bytes == 4 * (2 * n + c)
    assert row["same"].data_bytes == row["same"].diff_bytes == 0 < row["perm"].data_bytes
    assert row["prior"].scratch_bytes == 4 * (2 * 4 + 4)  # box_sizes_, variance_


@pytest.mark.parametrize("flags", [("--phase", "test"), ()])
def test_the_memory_commands_model_every_layer_of_res10(res10, tmp_path, flags):
    done = run(CAFFETOOL, "memory.estimate", "--net", str(res10[0]), *flags, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "not modelled" not in done.stdout and "lower bound" not in done.stdout
    assert re.search(r"^conv4_3_norm +Normalize +1x128x38x38 ", done.stdout, re.M)
    if flags:  # training lists the TRAIN net's layers, which res10's DetectionOutput is not one of
        assert re.search(r"^detection_out +DetectionOutput +1x1x200x7 ", done.stdout, re.M)


def test_memory_measure_on_res10_agrees_with_its_estimate(res10, tmp_path):
    done = run(CAFFETOOL, "memory.measure", "--net", str(res10[0]), "--batch-size", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "deploy, batch 2, SGD, CPU:" in done.stdout and "at least" not in done.stdout
    error = float(re.search(r"error +([-+][\d.]+)%", done.stdout).group(1))
    assert abs(error) <= 2.0, done.stdout


@pytest.mark.parametrize("inputs", ['input_shape { dim: 2 dim: 3 dim: 20 dim: 20 }',
                                    "input_dim: 2 input_dim: 3 input_dim: 20 input_dim: 20"])
def test_a_nets_own_inputs_are_the_input_layer_caffe_upgrades_them_to(caffe, tmp_path, inputs):
    """Deploy files of Caffe's first years (res10's among them) declare their input with the net's own
    ``input`` fields, which the engine turns into an Input layer named "input"."""
    text = f'input: "data" {inputs}\n' + conv("conv", "data", "conv") + layer(
        "norm", "Normalize", ["conv"], ["norm"])
    blobs, params = engine_shapes(caffe, text, tmp_path)
    g = netgraph.build(parse(caffe, text), "test", None, None)
    assert [n.name for n in g.nodes] == ["input", "conv", "norm"]
    assert {blob.split("@")[0]: shape for blob, shape in g.shapes.items()} == blobs
    assert {n.name: n.info.params for n in g.nodes if n.info.params} == params
