"""Per-layer rules: output shapes, parameters, multiply-accumulates and Caffe's own buffers.

Each rule mirrors what the layer's C++ code allocates in BVLC Caffe 1.0. Buffers are listed with
the step that first touches them — ``setup`` (Reshape fills them, so every net has them),
``forward`` or ``backward`` — because Caffe's ``SyncedMemory`` allocates on first touch, and a
buffer that no step touches never costs anything.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from caffetool.errors import NetError

Shape = tuple[int, ...]


@dataclass
class Buffer:
    name: str
    count: int
    when: str  # setup, forward, backward
    itemsize: int = 4  # 4: float (scales with --dtype), -4: int/uint (never shrinks)


@dataclass
class LayerInfo:
    tops: list[Shape]
    params: list[Shape] = field(default_factory=list)
    macc: int = 0
    buffers: list[Buffer] = field(default_factory=list)
    in_place_ok: bool = False
    group: int = 1


def count(shape: Shape) -> int:
    """Elements in a blob of ``shape`` (a scalar blob holds one)."""
    return math.prod(shape) if shape else 1


def _pair(values: Sequence[int], single: tuple[int, int] | None, default: int) -> tuple[int, int]:
    """Caffe's kernel/stride/pad spelling: repeated field, or _h/_w pair, or the default."""
    if values:
        v = list(values)
        return (v[0], v[-1]) if len(v) <= 2 else tuple(v[:2])
    if single is not None:
        return single
    return (default, default)


def _conv_geometry(p: Any) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int]]:
    kernel = _pair(p.kernel_size, (p.kernel_h, p.kernel_w) if p.HasField("kernel_h") else None, 0)
    stride = _pair(p.stride, (p.stride_h, p.stride_w) if p.HasField("stride_h") else None, 1)
    pad = _pair(p.pad, (p.pad_h, p.pad_w) if p.HasField("pad_h") else None, 0)
    dilation = _pair(p.dilation, None, 1)
    return kernel, stride, pad, dilation


def convolution(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    p = layer.convolution_param
    n, c, h, w = bottoms[0]
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = _conv_geometry(p)
    ho = (h + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
    wo = (w + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
    group = p.group or 1
    out = p.num_output
    params = [(out, c // group, kh, kw)] + ([(out,)] if p.bias_term else [])
    buffers = []
    if not (kh == kw == 1 and sh == sw == 1 and ph == pw == 0):  # 1x1 convolutions skip im2col
        buffers.append(Buffer("im2col", c * kh * kw * ho * wo, "forward"))
    if p.bias_term:
        buffers.append(Buffer("bias_multiplier", ho * wo, "setup"))
    macc = n * out * ho * wo * (c // group) * kh * kw
    return LayerInfo([(n, out, ho, wo)], params, macc, buffers, group=group)


def pooling(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    p = layer.pooling_param
    n, c, h, w = bottoms[0]
    if p.global_pooling:
        kh, kw, sh, sw, ph, pw = h, w, 1, 1, 0, 0
    else:
        kh, kw = (p.kernel_h, p.kernel_w) if p.HasField("kernel_h") else (p.kernel_size, p.kernel_size)
        sh, sw = (p.stride_h, p.stride_w) if p.HasField("stride_h") else (p.stride, p.stride)
        ph, pw = (p.pad_h, p.pad_w) if p.HasField("pad_h") else (p.pad, p.pad)
    ho = int(math.ceil((h + 2 * ph - kh) / sh)) + 1  # Caffe pools with ceil
    wo = int(math.ceil((w + 2 * pw - kw) / sw)) + 1
    if ph or pw:  # the last window must start inside the image
        ho -= (ho - 1) * sh >= h + ph
        wo -= (wo - 1) * sw >= w + pw
    top = (n, c, ho, wo)
    buffers = []
    if p.pool == 0 and len(layer.top) == 1:  # MAX keeps the argmax of every output
        buffers.append(Buffer("max_idx", count(top), "forward", -4))
    if p.pool == 2:  # STOCHASTIC
        buffers.append(Buffer("rand_idx", count(top), "forward"))
    return LayerInfo([top], [], count(top) * kh * kw, buffers)


def inner_product(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    p = layer.inner_product_param
    axis = p.axis if p.HasField("axis") else 1
    shape = bottoms[0]
    m, k = count(shape[:axis]), count(shape[axis:])
    params = [(p.num_output, k)] + ([(p.num_output,)] if p.bias_term else [])
    buffers = [Buffer("bias_multiplier", m, "setup")] if p.bias_term else []
    return LayerInfo([tuple(shape[:axis]) + (p.num_output,)], params, m * k * p.num_output, buffers)


def elementwise(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    return LayerInfo([bottoms[0]], [], count(bottoms[0]), in_place_ok=True)


def dropout(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    buffers = [Buffer("rand_vec", count(bottoms[0]), "forward", -4)] if phase == "train" else []
    return LayerInfo([bottoms[0]], [], count(bottoms[0]), buffers, in_place_ok=True)


def lrn(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    p = layer.lrn_param
    n, c, h, w = bottoms[0]
    size = p.local_size or 5
    if p.norm_region == 1:  # WITHIN_CHANNEL: Caffe builds it from split, square, pool, power layers
        buffers = [Buffer("within_channel_internals", 4 * count(bottoms[0]), "forward")]
    else:
        buffers = [Buffer("scale", count(bottoms[0]), "forward"),
                   Buffer("padded_square", (c + size - 1) * h * w, "forward"),
                   Buffer("padded_ratio", (c + size - 1) * h * w, "backward"),
                   Buffer("accum_ratio", h * w, "backward")]
    return LayerInfo([bottoms[0]], [], count(bottoms[0]) * size, buffers)


def concat(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    axis = layer.concat_param.axis if layer.concat_param.HasField("axis") else 1
    top = list(bottoms[0])
    top[axis] = sum(b[axis] for b in bottoms)
    return LayerInfo([tuple(top)])


def softmax(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    shape = bottoms[0]
    outer, classes = shape[0], shape[1]
    inner = count(shape[2:])
    return LayerInfo([shape], [], count(shape), [Buffer("sum_multiplier", classes, "setup"),
                                                 Buffer("scale", outer * inner, "forward")])


def softmax_loss(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    shape = bottoms[0]
    inner = count(shape[2:])
    return LayerInfo([()], [], count(shape), [
        Buffer("prob", count(shape), "forward"), Buffer("softmax.sum_multiplier", shape[1], "setup"),
        Buffer("softmax.scale", shape[0] * inner, "forward")])


def accuracy(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    return LayerInfo([()] + ([(bottoms[0][1],)] if len(layer.top) > 1 else []))


def flatten(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    return LayerInfo([(bottoms[0][0], count(bottoms[0][1:]))])


def batch_norm(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    shape = bottoms[0]
    n, c = shape[0], shape[1]
    spatial = count(shape[2:])
    return LayerInfo([shape], [(c,), (c,), (1,)], 2 * count(shape), [
        Buffer("batch_sum_multiplier", n, "setup"), Buffer("spatial_sum_multiplier", spatial, "setup"),
        Buffer("mean", c, "forward"), Buffer("variance", c, "forward"), Buffer("temp", count(shape), "forward"),
        Buffer("x_norm", count(shape), "forward"), Buffer("num_by_chans", n * c, "forward")], in_place_ok=True)


def scale(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    shape = bottoms[0]
    params = [(shape[1],)] + ([(shape[1],)] if layer.scale_param.bias_term else [])
    return LayerInfo([shape], params, count(shape), in_place_ok=True)


def eltwise(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    buffers = [Buffer("max_idx", count(bottoms[0]), "forward", -4)] if layer.eltwise_param.operation == 2 else []
    return LayerInfo([bottoms[0]], [], count(bottoms[0]) * (len(bottoms) - 1), buffers)


Rule = Callable[[Any, list[Shape], str], LayerInfo]  # (caffe_pb2.LayerParameter, bottom shapes, phase)
RULES: dict[str, Rule] = {
    "Convolution": convolution, "Pooling": pooling, "InnerProduct": inner_product,
    "ReLU": elementwise, "Sigmoid": elementwise, "TanH": elementwise,
    "ELU": elementwise, "AbsVal": elementwise, "Power": elementwise, "Dropout": dropout, "LRN": lrn,
    "Concat": concat, "Softmax": softmax, "SoftmaxWithLoss": softmax_loss, "Accuracy": accuracy,
    "Flatten": flatten, "BatchNorm": batch_norm, "Scale": scale, "Eltwise": eltwise,
}
DATA_LAYERS = {"Data", "Input", "DummyData"}


def rule(layer: Any, line: int | None, source: str) -> Rule:
    """The rule for ``layer``'s type; an unknown type is refused with where it is declared."""
    try:
        return RULES[layer.type]
    except KeyError:
        where = f"{source}:{line}" if line else source
        known = ", ".join(sorted(set(RULES) | DATA_LAYERS))
        raise NetError(f"{where}: layer {layer.name!r} has type {layer.type!r}, which the estimator "
                       f"does not model; known types: {known}") from None
