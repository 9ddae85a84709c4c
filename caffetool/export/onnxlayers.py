"""Each Caffe layer type as ONNX operators, computing what BVLC Caffe 1.0's forward pass computes.

One function per layer type, found in :data:`CONVERTERS`; the types ONNX cannot hold are in
:data:`REFUSED` with the reason. Every function receives the layer (:class:`Layer`: its parameter,
its input and output names, the shapes Caffe gave its blobs, its learned blobs as pycaffe holds
them) and writes nodes whose outputs are exactly the layer's top names.

Where ONNX and Caffe differ the conversion follows Caffe, from its sources (``src/caffe/layers``):

- Convolutions and pooling: :mod:`.spatial` (Caffe's pooled sizes and windows, exactly).
- LRN, BatchNorm and MVN: :mod:`.normalization`.
- ArgMax: Caffe's ``partial_sort`` of (value, index) pairs puts the larger index first among equal
  values; ONNX's TopK the smaller. The axis is reversed around TopK, so ties resolve as in Caffe.
- Dropout is the identity (Caffe scales at training time).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import TensorProto, numpy_helper

from caffetool.export.caffelayer import Layer, axis_of
from caffetool.export.normalization import batch_norm, lrn, mvn
from caffetool.export.onnxgraph import OnnxGraph
from caffetool.export.spatial import convolution, deconvolution, pooling
from caffetool.nets import geometry

PROD, SUM, EMAX = 0, 1, 2  # EltwiseParameter.EltwiseOp
REDUCTIONS = {1: "ReduceSum", 2: "ReduceL1", 3: "ReduceSumSquare", 4: "ReduceMean"}  # ReductionParameter


# --- inner product, embedding ---------------------------------------------------------------------

def inner_product(g: OnnxGraph, l: Layer) -> None:
    p = l.param.inner_product_param
    rank = len(l.bottom_shapes[0])
    axis = axis_of(p.axis, rank)
    weight = l.blobs[0] if p.transpose else l.blobs[0].T  # as (inputs, outputs)
    bias = l.blobs[1].reshape(-1) if p.bias_term else None
    if axis == 1:
        x = l.bottoms[0] if rank == 2 else g.op1("Flatten", [l.bottoms[0]], l.name, axis=1)
        inputs = [x, g.const(f"{l.name}/weight", np.ascontiguousarray(l.blobs[0]))]
        if bias is not None:
            inputs.append(g.const(f"{l.name}/bias", bias))
        g.op1("Gemm", inputs, l.name, l.tops[0], transB=0 if p.transpose else 1)
        return
    x = g.op1("Reshape", [l.bottoms[0], g.ints(f"{l.name}/shape", [0] * axis + [-1])], l.name)
    if bias is None:
        g.op1("MatMul", [x, g.const(f"{l.name}/weight", np.ascontiguousarray(weight))], l.name, l.tops[0])
        return
    y = g.op1("MatMul", [x, g.const(f"{l.name}/weight", np.ascontiguousarray(weight))], l.name)
    g.op1("Add", [y, g.const(f"{l.name}/bias", bias)], l.name, l.tops[0])


def embed(g: OnnxGraph, l: Layer) -> None:
    """Caffe casts each input value to an int index (truncation, as ONNX's Cast)."""
    index = g.op1("Cast", [l.bottoms[0]], l.name, to=TensorProto.INT64)
    if not l.param.embed_param.bias_term:
        g.op1("Gather", [g.const(f"{l.name}/weight", l.blobs[0]), index], l.name, l.tops[0], axis=0)
        return
    rows = g.op1("Gather", [g.const(f"{l.name}/weight", l.blobs[0]), index], l.name, axis=0)
    g.op1("Add", [rows, g.const(f"{l.name}/bias", l.blobs[1].reshape(-1))], l.name, l.tops[0])


# --- element-wise ---------------------------------------------------------------------------------

def relu(g: OnnxGraph, l: Layer) -> None:
    slope = l.param.relu_param.negative_slope
    if slope:
        g.op1("LeakyRelu", [l.bottoms[0]], l.name, l.tops[0], alpha=float(slope))
    else:
        g.op1("Relu", [l.bottoms[0]], l.name, l.tops[0])


def prelu(g: OnnxGraph, l: Layer) -> None:
    rank = len(l.bottom_shapes[0])
    slope = l.blobs[0].reshape(-1)
    if slope.size > 1:
        slope = slope.reshape([-1] + [1] * (rank - 2))
    g.op1("PRelu", [l.bottoms[0], g.const(f"{l.name}/slope", slope)], l.name, l.tops[0])


def unary(op_type: str, **attrs_of: Callable[[Any], Any]) -> Callable[[OnnxGraph, Layer], None]:
    """A layer that is one ONNX operator; ``attrs_of`` read its attributes from the LayerParameter."""
    def convert(g: OnnxGraph, l: Layer) -> None:
        g.op1(op_type, [l.bottoms[0]], l.name, l.tops[0], **{k: f(l.param) for k, f in attrs_of.items()})
    return convert


def _affine(g: OnnxGraph, l: Layer, x: str, scale: float, shift: float) -> str:
    """``shift + scale * x`` with the operators that are not identities."""
    if scale != 1:
        x = g.op1("Mul", [x, g.const(f"{l.name}/scale", scale)], l.name)
    if shift != 0:
        x = g.op1("Add", [x, g.const(f"{l.name}/shift", shift)], l.name)
    return x


def _finish(g: OnnxGraph, l: Layer, x: str) -> None:
    """Name ``x`` as the layer's top (an Identity only when no operator was needed)."""
    if x == l.bottoms[0]:
        g.op1("Identity", [x], l.name, l.tops[0])
    else:
        g.nodes[-1].output[0] = l.tops[0]


def power(g: OnnxGraph, l: Layer) -> None:
    """``(shift + scale * x) ^ power``; Caffe fills a constant when the power or the scale is 0."""
    p = l.param.power_param
    if p.power == 0 or p.scale == 0:
        value = 1.0 if p.power == 0 else float(np.float32(p.shift) ** np.float32(p.power))
        shape = g.op1("Shape", [l.bottoms[0]], l.name)
        g.op1("ConstantOfShape", [shape], l.name, l.tops[0],
              value=numpy_helper.from_array(np.array([value], np.float32)))
        return
    x = _affine(g, l, l.bottoms[0], p.scale, p.shift)
    if p.power != 1:
        x = g.op1("Pow", [x, g.const(f"{l.name}/power", p.power)], l.name)
    _finish(g, l, x)


def exp(g: OnnxGraph, l: Layer) -> None:
    """``base ^ (shift + scale * x)`` as Caffe computes it: ``base^shift * exp(scale * ln(base) * x)``."""
    p = l.param.exp_param
    log_base = 1.0 if p.base == -1 else math.log(p.base)
    x = _affine(g, l, l.bottoms[0], p.scale * log_base, 0)
    x = g.op1("Exp", [x], l.name)
    outer = 1.0 if p.shift == 0 else (math.exp(p.shift) if p.base == -1 else p.base ** p.shift)
    if outer != 1:
        x = g.op1("Mul", [x, g.const(f"{l.name}/outer", outer)], l.name)
    _finish(g, l, x)


def log(g: OnnxGraph, l: Layer) -> None:
    """``log_base(shift + scale * x)``."""
    p = l.param.log_param
    x = g.op1("Log", [_affine(g, l, l.bottoms[0], p.scale, p.shift)], l.name)
    if p.base != -1:
        x = g.op1("Mul", [x, g.const(f"{l.name}/base", 1.0 / math.log(p.base))], l.name)
    _finish(g, l, x)


def threshold(g: OnnxGraph, l: Layer) -> None:
    above = g.op1("Greater", [l.bottoms[0], g.const(f"{l.name}/threshold", l.param.threshold_param.threshold)],
                  l.name)
    g.op1("Cast", [above], l.name, l.tops[0], to=TensorProto.FLOAT)


def clip(g: OnnxGraph, l: Layer) -> None:
    p = l.param.clip_param
    g.op1("Clip", [l.bottoms[0], g.const(f"{l.name}/min", p.min), g.const(f"{l.name}/max", p.max)], l.name,
          l.tops[0])


def swish(g: OnnxGraph, l: Layer) -> None:
    """``x * sigmoid(beta * x)``."""
    gate = g.op1("Sigmoid", [_affine(g, l, l.bottoms[0], l.param.swish_param.beta, 0)], l.name)
    g.op1("Mul", [l.bottoms[0], gate], l.name, l.tops[0])


def identity(g: OnnxGraph, l: Layer) -> None:
    for bottom, top in zip(l.bottoms * len(l.tops) if len(l.bottoms) == 1 else l.bottoms, l.tops):
        g.op1("Identity", [bottom], l.name, top)


# --- scale and bias -------------------------------------------------------------------------------

def _broadcast(g: OnnxGraph, l: Layer, operand: np.ndarray | None, axis: int) -> str:
    """The Scale/Bias operand (a learned blob, or the second bottom) shaped to broadcast from ``axis``
    of the first bottom: its own axes, then ones for the axes after them."""
    rank = len(l.bottom_shapes[0])
    if operand is not None:
        shape = list(operand.shape)
        trailing = rank - axis - len(shape)
        return g.const(f"{l.name}/operand", operand.reshape(shape + [1] * trailing))
    own = len(l.bottom_shapes[1])
    trailing = rank - axis - own
    if trailing <= 0:
        return l.bottoms[1]
    return g.op1("Unsqueeze", [l.bottoms[1], g.ints(f"{l.name}/axes", list(range(own, own + trailing)))], l.name)


def _operand_axis(l: Layer, axis: int) -> int:
    return axis_of(axis, len(l.bottom_shapes[0]))


def scale(g: OnnxGraph, l: Layer) -> None:
    p = l.param.scale_param
    axis = _operand_axis(l, p.axis)
    two = len(l.bottoms) == 2
    blobs = list(l.blobs)
    factor = _broadcast(g, l, None if two else _operand_shape(l, blobs.pop(0), axis, p.num_axes), axis)
    if not p.bias_term:
        g.op1("Mul", [l.bottoms[0], factor], l.name, l.tops[0])
        return
    scaled = g.op1("Mul", [l.bottoms[0], factor], l.name)
    bias = _operand_shape(l, blobs.pop(0), axis, p.num_axes if not two else len(l.bottom_shapes[1]))
    g.op1("Add", [scaled, _broadcast(g, l, bias, axis)], l.name, l.tops[0])


def bias(g: OnnxGraph, l: Layer) -> None:
    p = l.param.bias_param
    axis = _operand_axis(l, p.axis)
    operand = None if len(l.bottoms) == 2 else _operand_shape(l, l.blobs[0], axis, p.num_axes)
    g.op1("Add", [l.bottoms[0], _broadcast(g, l, operand, axis)], l.name, l.tops[0])


def _operand_shape(l: Layer, blob: np.ndarray, axis: int, num_axes: int) -> np.ndarray:
    """A learned Scale/Bias blob in the shape of the bottom's axes it covers."""
    shape = l.bottom_shapes[0]
    covered = shape[axis:] if num_axes == -1 else shape[axis:axis + num_axes]
    return blob.reshape(covered)


def eltwise(g: OnnxGraph, l: Layer) -> None:
    p = l.param.eltwise_param
    if p.operation == PROD:
        x = l.bottoms[0]
        for k, other in enumerate(l.bottoms[1:]):
            x = g.op1("Mul", [x, other], l.name, l.tops[0] if k == len(l.bottoms) - 2 else None)
        return
    if p.operation == EMAX:
        g.op1("Max", l.bottoms, l.name, l.tops[0])
        return
    coeffs = list(p.coeff) or [1.0] * len(l.bottoms)
    if len(coeffs) != len(l.bottoms):
        raise l.refuse(f"{len(coeffs)} coefficients for {len(l.bottoms)} bottoms")
    terms = [b if c == 1 else g.op1("Mul", [b, g.const(f"{l.name}/coeff", c)], l.name)
             for b, c in zip(l.bottoms, coeffs)]
    g.op1("Sum", terms, l.name, l.tops[0])


# --- shapes ---------------------------------------------------------------------------------------

def concat(g: OnnxGraph, l: Layer) -> None:
    p = l.param.concat_param
    axis = p.concat_dim if p.HasField("concat_dim") else p.axis
    g.op1("Concat", l.bottoms, l.name, l.tops[0], axis=axis_of(axis, len(l.bottom_shapes[0])))


def slice_(g: OnnxGraph, l: Layer) -> None:
    p = l.param.slice_param
    rank = len(l.bottom_shapes[0])
    axis = axis_of(p.slice_dim if p.HasField("slice_dim") else p.axis, rank)
    sizes = [s[axis] for s in l.top_shapes]
    g.op("Split", [l.bottoms[0], g.ints(f"{l.name}/split", sizes)], l.name, l.tops, axis=axis)


def _reshape(g: OnnxGraph, l: Layer, target: list[int]) -> None:
    g.op1("Reshape", [l.bottoms[0], g.ints(f"{l.name}/shape", target)], l.name, l.tops[0])


def flatten(g: OnnxGraph, l: Layer) -> None:
    """Leading axes copied (0), the flattened ones inferred (-1), the rest as Caffe shaped them."""
    p = l.param.flatten_param
    shape = l.bottom_shapes[0]
    rank = len(shape)
    start, end = axis_of(p.axis, rank), axis_of(p.end_axis, rank)
    _reshape(g, l, [0] * start + [-1] + list(shape[end + 1:]))


def reshape(g: OnnxGraph, l: Layer) -> None:
    """Caffe's 0 copies the bottom's axis at the same place, as ONNX's does (``allowzero`` off);
    axes after the replaced range are given as Caffe sized them."""
    p = l.param.reshape_param
    shape = l.bottom_shapes[0]
    rank = len(shape)
    start = p.axis if p.axis >= 0 else rank + p.axis + 1
    end = rank if p.num_axes == -1 else start + p.num_axes
    _reshape(g, l, [0] * start + [int(d) for d in p.shape.dim] + list(shape[end:]))


def crop(g: OnnxGraph, l: Layer) -> None:
    p = l.param.crop_param
    rank = len(l.bottom_shapes[0])
    axis = axis_of(p.axis, rank)
    top, offsets = geometry.crop(l.bottom_shapes[0], l.bottom_shapes[1], axis, p.offset)
    starts = list(offsets[axis:])
    ends = [s + n for s, n in zip(starts, top[axis:])]
    g.op1("Slice", [l.bottoms[0], g.ints(f"{l.name}/starts", starts), g.ints(f"{l.name}/ends", ends),
                    g.ints(f"{l.name}/axes", list(range(axis, rank)))], l.name, l.tops[0])


def tile(g: OnnxGraph, l: Layer) -> None:
    p = l.param.tile_param
    rank = len(l.bottom_shapes[0])
    repeats = [1] * rank
    repeats[axis_of(p.axis, rank)] = p.tiles
    g.op1("Tile", [l.bottoms[0], g.ints(f"{l.name}/repeats", repeats)], l.name, l.tops[0])


def softmax(g: OnnxGraph, l: Layer) -> None:
    g.op1("Softmax", [l.bottoms[0]], l.name, l.tops[0],
          axis=axis_of(l.param.softmax_param.axis, len(l.bottom_shapes[0])))


def argmax(g: OnnxGraph, l: Layer) -> None:
    """Top-k indices (as floats) or values; without an axis over each item's values, shaped
    (N, 1 or 2, k, 1...) with indices then values, as Caffe's ArgMaxLayer writes them."""
    p = l.param.argmax_param
    shape = l.bottom_shapes[0]
    k = g.ints(f"{l.name}/k", [p.top_k])
    if p.HasField("axis"):
        axis = axis_of(p.axis, len(shape))
        x, size = l.bottoms[0], shape[axis]
    else:
        axis, size = 1, int(np.prod(shape[1:]))
        x = g.op1("Flatten", [l.bottoms[0]], l.name, axis=1)
    reversed_ = g.op1("Slice", [x, g.ints(f"{l.name}/rstart", [-1]), g.ints(f"{l.name}/rend", [-(2**62)]),
                                g.ints(f"{l.name}/raxis", [axis]), g.ints(f"{l.name}/rstep", [-1])], l.name)
    values, flipped = g.op("TopK", [reversed_, k], l.name, 2, axis=axis, largest=1, sorted=1)
    index = g.op1("Sub", [g.ints(f"{l.name}/last", [size - 1]), flipped], l.name)
    index = g.op1("Cast", [index], l.name, to=TensorProto.FLOAT)
    if p.HasField("axis"):
        g.op1("Identity", [values if p.out_max_val else index], l.name, l.tops[0])
        return
    rows = g.op1("Concat", [index, values], l.name, axis=1) if p.out_max_val else index
    target = [0, 2 if p.out_max_val else 1, p.top_k] + [1] * (max(3, len(shape)) - 3)
    g.op1("Reshape", [rows, g.ints(f"{l.name}/shape", target)], l.name, l.tops[0])


def reduction(g: OnnxGraph, l: Layer) -> None:
    p = l.param.reduction_param
    rank = len(l.bottom_shapes[0])
    axis = axis_of(p.axis, rank)
    op = REDUCTIONS[p.operation]
    if p.coeff == 1:
        g.reduce(op, l.bottoms[0], list(range(axis, rank)), l.name, False, l.tops[0])
        return
    reduced = g.reduce(op, l.bottoms[0], list(range(axis, rank)), l.name, False)
    g.op1("Mul", [reduced, g.const(f"{l.name}/coeff", p.coeff)], l.name, l.tops[0])


def parameter(g: OnnxGraph, l: Layer) -> None:
    g.op1("Identity", [g.const(f"{l.name}/value", l.blobs[0])], l.name, l.tops[0])


CONVERTERS: dict[str, Callable[[OnnxGraph, Layer], None]] = {
    "Convolution": convolution, "Deconvolution": deconvolution, "Pooling": pooling,
    "InnerProduct": inner_product, "Embed": embed,
    "ReLU": relu, "PReLU": prelu, "Sigmoid": unary("Sigmoid"), "TanH": unary("Tanh"),
    "ELU": unary("Elu", alpha=lambda p: float(p.elu_param.alpha)), "BNLL": unary("Softplus"),
    "AbsVal": unary("Abs"), "Power": power, "Exp": exp, "Log": log, "Threshold": threshold, "Clip": clip,
    "Swish": swish, "Dropout": identity, "Split": identity,
    "LRN": lrn, "BatchNorm": batch_norm, "MVN": mvn, "Scale": scale, "Bias": bias, "Eltwise": eltwise,
    "Concat": concat, "Slice": slice_, "Flatten": flatten, "Reshape": reshape, "Crop": crop, "Tile": tile,
    "Softmax": softmax, "ArgMax": argmax, "Reduction": reduction, "Parameter": parameter,
}

_DATA = ("reads training data: export the deploy net (--deploy FILE), whose Input layer takes the "
         "images")
_TRAINING = "is a training or test layer (a loss or a score): export the deploy net (--deploy FILE)"
REFUSED = {
    **dict.fromkeys(("Data", "ImageData", "HDF5Data", "MemoryData", "WindowData", "DummyData"), _DATA),
    **dict.fromkeys(("SoftmaxWithLoss", "EuclideanLoss", "HingeLoss", "InfogainLoss", "ContrastiveLoss",
                     "MultinomialLogisticLoss", "SigmoidCrossEntropyLoss", "Accuracy"), _TRAINING),
    "Python": "runs Python code, which an ONNX model cannot hold",
    "HDF5Output": "writes files; it computes nothing to export",
    **dict.fromkeys(("LSTM", "RNN", "LSTMUnit"), "recurrent layers are not covered by the export"),
    "SPP": "spatial pyramid pooling's levels are not covered by the export",
    "Im2col": "im2col's column layout is not covered by the export",
    **dict.fromkeys(("BatchReindex", "Filter"), "its output depends on a second input's values, which the "
                                                "export does not cover"),
}
