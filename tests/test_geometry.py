"""Caffe's spatial sizes (:mod:`caffetool.layers.geometry`) against the real engine, case by odd case.

Each case is one layer on Input blobs, built by pycaffe in ``tmp_path``. Its top's shape, as the
engine gives it, must be the table's, geometry's, the memory estimate's (its own graph, as
:mod:`caffetool.memory.netgraph` builds it) and, for the layers the export converts, the exported ONNX
model's when onnxruntime runs it — whose values must also be Caffe's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format

from caffetool.errors import NetError
from caffetool.export import onnxnet, request
from caffetool.memory import netgraph
from caffetool.layers import geometry

FILLER = 'weight_filler { type: "gaussian" std: 1 } bias_filler { type: "gaussian" std: 1 }'
EXPORTED = ("Convolution", "Deconvolution", "Pooling", "Crop")
HUGE = 1e30


@dataclass(frozen=True)
class Case:
    inputs: dict[str, tuple[int, ...]]
    type: str
    param: str  # the text of the layer's parameter message (``convolution_param {...}`` ...)
    top: tuple[int, ...]  # the shape the engine gives the layer's top


def pool(shape: tuple[int, ...], window: str, top: tuple[int, ...], method: str = "MAX") -> Case:
    return Case({"data": shape}, "Pooling", f"pooling_param {{ pool: {method} {window} }}", top)


def conv(shape: tuple[int, ...], window: str, top: tuple[int, ...], kind: str = "Convolution") -> Case:
    return Case({"data": shape}, kind, f"convolution_param {{ num_output: 3 {window} {FILLER} }}", top)


CASES = {
    # pooling: Caffe drops a last window that starts in the padding on BOTH axes when EITHER is padded
    "pool-7x7-k2-s4-pad-h-only": pool((1, 2, 7, 7), "kernel_size: 2 stride: 4 pad_h: 1 pad_w: 0", (1, 2, 2, 2)),
    "pool-7x9-k2-s4-pad-w-only": pool((1, 2, 7, 9), "kernel_size: 2 stride: 4 pad_h: 0 pad_w: 1", (1, 2, 2, 3)),
    "pool-9x7-k2-s4-pad-h-only": pool((1, 2, 9, 7), "kernel_size: 2 stride: 4 pad_h: 1 pad_w: 0", (1, 2, 3, 2)),
    "pool-7x9-k2-s2-p1-drops-last": pool((1, 2, 7, 9), "kernel_size: 2 stride: 2 pad: 1", (1, 2, 4, 5), "AVE"),
    "pool-10x10-k3-s2-p1-ceil": pool((1, 2, 10, 10), "kernel_size: 3 stride: 2 pad: 1", (1, 2, 6, 6), "AVE"),
    "pool-10x10-k3-s2-p1-floor": pool((1, 2, 10, 10), "kernel_size: 3 stride: 2 pad: 1 round_mode: FLOOR",
                                      (1, 2, 5, 5), "AVE"),
    "pool-8x8-k3-s2-ceil": pool((1, 2, 8, 8), "kernel_size: 3 stride: 2 round_mode: CEIL", (1, 2, 4, 4)),
    "pool-8x8-k3-s2-floor": pool((1, 2, 8, 8), "kernel_size: 3 stride: 2 round_mode: FLOOR", (1, 2, 3, 3)),
    "pool-exact-fit-k4-s4": pool((1, 2, 8, 8), "kernel_size: 4 stride: 4", (1, 2, 2, 2)),
    "pool-stride-above-kernel": pool((1, 2, 8, 9), "kernel_size: 2 stride: 3", (1, 2, 3, 4)),
    "pool-kernel-over-input": pool((1, 2, 3, 3), "kernel_size: 4 stride: 2", (1, 2, 1, 1)),
    "pool-kernel-over-padded-input": pool((1, 2, 3, 3), "kernel_size: 6 stride: 2 pad: 1", (1, 2, 1, 1), "AVE"),
    "pool-rectangular": pool((1, 2, 7, 8), "kernel_h: 3 kernel_w: 2 stride_h: 2 stride_w: 3", (1, 2, 3, 3)),
    "pool-global-ave": pool((1, 2, 5, 7), "global_pooling: true", (1, 2, 1, 1), "AVE"),
    "pool-global-max": pool((1, 2, 1, 9), "global_pooling: true", (1, 2, 1, 1)),
    "pool-1xN": pool((1, 2, 1, 9), "kernel_size: 3 stride: 2 pad: 1", (1, 2, 1, 5)),
    # convolution: C++ int division truncates toward zero, so an overhang shorter than the stride counts
    "conv-dilated": conv((1, 2, 9, 9), "kernel_size: 3 dilation: 3 pad: 1 stride: 2", (1, 3, 3, 3)),
    "conv-dilation-per-axis": conv((1, 2, 9, 10), "kernel_size: 3 dilation: 2 dilation: 1 pad: 1",
                                   (1, 3, 7, 10)),
    "conv-rectangular": conv((1, 2, 6, 7), "kernel_h: 5 kernel_w: 2 stride_h: 1 stride_w: 3 pad_w: 1",
                             (1, 3, 2, 3)),
    "conv-listed-per-axis": conv((1, 2, 7, 8), "kernel_size: 3 kernel_size: 2 stride: 1 stride: 2 pad: 0 pad: 1",
                                 (1, 3, 5, 5)),
    "conv-exact-fit": conv((1, 2, 7, 7), "kernel_size: 7", (1, 3, 1, 1)),
    "conv-kernel-over-input": conv((1, 2, 3, 5), "kernel_size: 4 stride: 2", (1, 3, 1, 1)),
    "conv-kernel-over-padded-input": conv((1, 2, 3, 5), "kernel_h: 5 kernel_w: 2 stride: 4 pad_h: 0 pad_w: 1",
                                          (1, 3, 1, 2)),
    "conv-1xN": conv((1, 2, 1, 9), "kernel_h: 1 kernel_w: 3 stride: 2", (1, 3, 1, 4)),
    "conv-1d": conv((1, 2, 9), "kernel_size: 3 stride: 2 pad: 1", (1, 3, 5)),
    "conv-3d": conv((1, 2, 3, 4, 5), "kernel_size: 4 stride: 3 pad: 1", (1, 3, 1, 1, 2)),
    # deconvolution: the convolution's rule solved for its input
    "deconv-pad-stride-dilation": conv((1, 2, 3, 5), "kernel_size: 3 stride: 2 pad: 1 dilation: 2",
                                       (1, 3, 7, 11), "Deconvolution"),
    "deconv-rectangular": conv((1, 2, 4, 3), "kernel_h: 2 kernel_w: 4 stride_h: 3 stride_w: 1 pad_h: 1 pad_w: 0",
                               (1, 3, 9, 6), "Deconvolution"),
    "deconv-1xN": conv((1, 2, 1, 6), "kernel_size: 2 stride: 2", (1, 3, 2, 12), "Deconvolution"),
    # the other layers that size a top from a window
    "im2col-dilated": Case({"data": (1, 2, 5, 6)}, "Im2col",
                           "convolution_param { kernel_size: 3 stride: 2 pad: 1 dilation: 2 }", (1, 18, 2, 2)),
    "spp-3-levels": Case({"data": (1, 2, 7, 10)}, "SPP", "spp_param { pyramid_height: 3 pool: MAX }", (1, 42)),
    "crop-two-offsets": Case({"data": (1, 3, 8, 8), "ref": (1, 3, 5, 6)}, "Crop",
                             "crop_param { axis: 2 offset: 1 offset: 2 }", (1, 3, 5, 6)),
    "crop-from-channels": Case({"data": (1, 4, 6, 6), "ref": (1, 2, 3, 3)}, "Crop",
                               "crop_param { axis: 1 offset: 1 }", (1, 2, 3, 3)),
}


def prototxt(case: Case) -> str:
    text = "".join(f'layer {{ name: "{name}" type: "Input" top: "{name}" input_param {{ shape {{ '
                   + " ".join(f"dim: {d}" for d in shape) + " } } }\n" for name, shape in case.inputs.items())
    bottoms = "".join(f'bottom: "{name}" ' for name in case.inputs)
    return text + f'layer {{ name: "l" type: "{case.type}" {bottoms}top: "top" {case.param} }}\n'


def geometry_top(layer: Any, bottoms: list[tuple[int, ...]]) -> tuple[int, ...]:
    """The layer's top as geometry sizes it (the channels and batch as each layer keeps them)."""
    n, c, size = bottoms[0][0], bottoms[0][1], bottoms[0][2:]
    if layer.type in ("Convolution", "Deconvolution", "Im2col"):
        w = geometry.conv_window(layer.convolution_param, len(size))
        spatial = (geometry.deconv_output if layer.type == "Deconvolution" else geometry.conv_output)(size, w)
        channels = c * math.prod(w.kernel) if layer.type == "Im2col" else layer.convolution_param.num_output
        return (n, channels, *spatial)
    if layer.type == "Pooling":
        p = layer.pooling_param
        return (n, c, *geometry.pool_output(size, geometry.pool_window(p, size), geometry.rounds_up(p)))
    if layer.type == "SPP":
        levels = range(layer.spp_param.pyramid_height)
        return (n, sum(c * math.prod(geometry.pool_output(size, geometry.spp_window(i, size))) for i in levels))
    assert layer.type == "Crop"
    axis = layer.crop_param.axis % len(bottoms[0])
    return geometry.crop(bottoms[0], bottoms[1], axis, layer.crop_param.offset)[0]


def exported_top(net_param: Any, net: Any, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """The exported model's top, as onnxruntime computes it for ``feeds``."""
    import onnxruntime

    model = onnxnet.convert(net_param, net, request.DEFAULT_OPSET, None, "geometry").model
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(["top"], feeds)[0]


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_every_copy_of_a_size_is_the_engines(caffe, tmp_path, case):
    path = tmp_path / "net.prototxt"
    path.write_text(prototxt(case))
    net = caffe.Net(str(path), caffe.TEST)
    rng = np.random.default_rng(0)
    feeds = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in case.inputs.items()}
    for name, x in feeds.items():
        net.blobs[name].data[...] = x
    net.forward()
    engine = tuple(net.blobs["top"].data.shape)
    assert engine == case.top

    net_param = text_format.Parse(prototxt(case), caffe.proto.caffe_pb2.NetParameter())
    assert geometry_top(net_param.layer[-1], list(case.inputs.values())) == engine
    shapes = netgraph.build(net_param, "train", None, None).shapes
    assert {blob.split("@")[0]: shape for blob, shape in shapes.items()}["top"] == engine

    if case.type in EXPORTED:
        got = exported_top(net_param, net, feeds)
        assert got.shape == engine
        want = net.blobs["top"].data
        ordinary = np.abs(want[np.abs(want) < HUGE])  # not a max over an empty window (-FLT_MAX)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(ordinary.max(initial=1.0)))


# --- reading the window as Caffe does -------------------------------------------------------------

def conv_param(caffe: Any, text: str) -> Any:
    return text_format.Parse(text, caffe.proto.caffe_pb2.ConvolutionParameter())


def test_a_field_given_once_covers_every_axis_and_defaults_fill_the_rest(caffe):
    w = geometry.conv_window(conv_param(caffe, "kernel_size: 3 dilation: 2"), 3)
    assert w == geometry.Window(kernel=(3, 3, 3), stride=(1, 1, 1), pad=(0, 0, 0), dilation=(2, 2, 2))
    w = geometry.conv_window(conv_param(caffe, "kernel_size: 3 kernel_size: 2 pad_w: 1 stride_h: 2"), 2)
    assert w == geometry.Window(kernel=(3, 2), stride=(2, 0), pad=(0, 1), dilation=(1, 1))


@pytest.mark.parametrize("text, spatial, message", [
    ("kernel_size: 3 kernel_size: 2", 3,
     "kernel_size must be specified once, or once per spatial dimension (kernel_size specified 2 times; "
     "3 spatial dims)"),
    ("stride: 1", 2, "kernel_size must be specified once, or once per spatial dimension (kernel_size specified "
                     "0 times; 2 spatial dims)"),
    ("kernel_size: 3 dilation: 1 dilation: 2 dilation: 1", 2,
     "dilation must be specified once, or once per spatial dimension (dilation specified 3 times; 2 spatial dims)"),
    ("kernel_h: 3 kernel_w: 3", 3, "kernel_h & kernel_w can only be used for 2D convolution (this one has 3 "
                                   "spatial axes)"),
])
def test_a_window_caffe_cannot_read_is_refused_with_caffes_words(caffe, text, spatial, message):
    with pytest.raises(NetError) as refused:
        geometry.conv_window(conv_param(caffe, text), spatial)
    assert str(refused.value) == message


def test_crop_offsets_must_cover_every_axis_from_axis_on():
    assert geometry.crop((1, 3, 8, 8), (1, 1, 5, 6), 2, [1, 2]) == ((1, 3, 5, 6), (0, 0, 1, 2))
    with pytest.raises(NetError) as refused:
        geometry.crop((1, 3, 8, 8), (1, 1, 5, 6), 1, [1, 2])
    assert str(refused.value) == ("number of offset values specified must be equal to the number of dimensions "
                                  "following axis (2 offsets, 3 dimensions from axis 1)")


def test_sizes_round_as_caffes_ints_and_floats_do():
    """conv: C++ division truncates toward zero (-1 / 2 is 0: one output); pooling: float ceil/floor."""
    assert geometry.conv_size(3, 4, 2, 0) == 1 and geometry.conv_size(3, 4, 1, 0) == 0
    assert geometry.conv_size(3, 6, 2, 0) == 0  # -3 / 2 is -1
    assert geometry.pooled_size(3, 4, 2, 0, ceil=True, padded=False) == 1
    assert geometry.pooled_size(3, 4, 2, 0, ceil=False, padded=False) == 0
    assert geometry.pooled_size(7, 2, 4, 0, ceil=True, padded=False) == 3
    assert geometry.pooled_size(7, 2, 4, 0, ceil=True, padded=True) == 2  # the other axis is padded
    assert geometry.deconv_size(3, 3, 2, 1, 2) == 7
