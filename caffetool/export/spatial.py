"""Convolution, Deconvolution and Pooling as ONNX operators, with Caffe's sizes and windows.

Sizes and windows are :mod:`caffetool.nets.geometry`'s, which are Caffe's. A pooling's output size
rounds up (``ceil``) and then, when either axis is padded, drops on both axes a last window that
would start in the padding (``pooling_layer.cpp``); an average divides by the window clipped to the
*padded* input but not to the overhang past it. Both are made exact with explicit end pads (and a
``Pad`` of zeros for a padded average), never with ``ceil_mode``, whose rules differ between
runtimes. Unpadded, a stride longer than the kernel can start a last window past the input: Caffe's
max there is ``-FLT_MAX`` and its average 0 (or NaN), and so are the model's.
Convolutions take Caffe's per-axis kernel, stride, pad and dilation, and an end pad where Caffe's
size, which truncates toward zero, counts a window that overhangs the padded input (ONNX's floors;
Caffe's im2col reads the overhang as zeros, as the pad does). Caffe's deconvolution weight is
(input channels, output channels / group, kernel...), as ConvTranspose's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caffetool.export.caffelayer import Layer, axis_of
from caffetool.export.onnxgraph import OnnxGraph
from caffetool.nets import geometry

MAX, AVE, STOCHASTIC = 0, 1, 2  # PoolingParameter.PoolMethod


def _conv_attrs(l: Layer, transposed: bool) -> dict:
    p = l.param.convolution_param
    rank = len(l.bottom_shapes[0])
    if axis_of(p.axis, rank) != 1:
        raise l.refuse(f"its channel axis is {p.axis}; ONNX convolutions take channels on axis 1")
    w = geometry.conv_window(p, rank - 2)
    end = list(w.pad) if transposed else _overhang_pads(l.bottom_shapes[0][2:], w)
    return {"kernel_shape": list(w.kernel), "strides": list(w.stride), "pads": [*w.pad, *end],
            "dilations": list(w.dilation), "group": p.group}


def _overhang_pads(size: tuple[int, ...], w: geometry.Window) -> list[int]:
    """A convolution's end pads: its own, plus what its last window overhangs the padded input
    where Caffe's truncating size counts that window and ONNX's flooring one would not."""
    out = geometry.conv_output(size, w)
    return [q + max(0, (o - 1) * s + geometry.extent(k, d) - n - 2 * q)
            for n, o, k, s, q, d in zip(size, out, w.kernel, w.stride, w.pad, w.dilation)]


def convolution(g: OnnxGraph, l: Layer) -> None:
    inputs = [l.bottoms[0], g.const(f"{l.name}/weight", l.blobs[0])]
    if l.param.convolution_param.bias_term:
        inputs.append(g.const(f"{l.name}/bias", l.blobs[1]))
    g.op1("Conv", inputs, l.name, l.tops[0], **_conv_attrs(l, transposed=False))


def deconvolution(g: OnnxGraph, l: Layer) -> None:
    """Caffe's weight is (input channels, output channels / group, kernel...), as ConvTranspose's."""
    inputs = [l.bottoms[0], g.const(f"{l.name}/weight", l.blobs[0])]
    if l.param.convolution_param.bias_term:
        inputs.append(g.const(f"{l.name}/bias", l.blobs[1]))
    g.op1("ConvTranspose", inputs, l.name, l.tops[0], **_conv_attrs(l, transposed=True))


def pooling(g: OnnxGraph, l: Layer) -> None:
    p = l.param.pooling_param
    if p.pool == STOCHASTIC:
        raise l.refuse("stochastic pooling at test time weights each window by its values; ONNX has no such "
                       "operator")
    if len(l.bottom_shapes[0]) != 4:
        raise l.refuse("Caffe pools 4-D blobs only")
    if p.global_pooling:
        g.op1("GlobalMaxPool" if p.pool == MAX else "GlobalAveragePool", [l.bottoms[0]], l.name, l.tops[0])
        return
    size = list(l.bottom_shapes[0][2:])
    window = geometry.pool_window(p, size)
    kernel, stride, pad = list(window.kernel), list(window.stride), list(window.pad)
    out = list(geometry.pool_output(size, window, geometry.rounds_up(p)))
    inside = [min(o, -(-(n + q) // s)) for o, n, q, s in zip(out, size, pad, stride)]  # windows starting in it
    if inside == out:
        _pool(g, l, size, kernel, stride, pad, out, l.tops[0])
        return
    pooled = _pool(g, l, size, kernel, stride, pad, inside, None)
    _past_the_end(g, l, pooled, size, kernel, stride, inside, out)


def _pool(g: OnnxGraph, l: Layer, size: list[int], kernel: list[int], stride: list[int], pad: list[int],
          out: list[int], top: str | None) -> str:
    """The first ``out`` windows of each axis, each starting in the input, with explicit end pads for
    those that overhang it."""
    p = l.param.pooling_param
    x = l.bottoms[0]
    if p.pool == AVE and any(pad):  # the divisor counts the padding but not the overhang past it
        x = g.op1("Pad", [x, g.ints(f"{l.name}/pads", [0, 0, *pad, 0, 0, *pad])], l.name, mode="constant")
        size, begin = [n + 2 * q for n, q in zip(size, pad)], [0, 0]
    else:
        begin = pad
    end = [max(0, (o - 1) * s + k - n - b) for o, s, k, n, b in zip(out, stride, kernel, size, begin)]
    made = [(n + b + e - k) // s + 1 for n, b, e, k, s in zip(size, begin, end, kernel, stride)]
    attrs: dict[str, Any] = {"kernel_shape": kernel, "strides": stride, "pads": begin + end}
    if p.pool == AVE:
        attrs["count_include_pad"] = 0
    op = "MaxPool" if p.pool == MAX else "AveragePool"
    if made == out:
        return g.op1(op, [x], l.name, top, **attrs)
    pooled = g.op1(op, [x], l.name, **attrs)  # one window too many where Caffe's last one ends early
    return g.op1("Slice", [pooled, g.ints(f"{l.name}/starts", [0, 0]), g.ints(f"{l.name}/ends", out),
                           g.ints(f"{l.name}/axes", [2, 3])], l.name, top)


def _past_the_end(g: OnnxGraph, l: Layer, pooled: str, size: list[int], kernel: list[int], stride: list[int],
                  inside: list[int], out: list[int]) -> None:
    """The windows of an unpadded input that start past its end (a stride longer than the kernel):
    Caffe's max over nothing stays at its initial ``-FLT_MAX``; its average divides a sum of nothing
    by the product over the axes of ``min(start + kernel, size) - start``, which gives 0, or NaN
    where a window starts right at the end (a factor 0)."""
    pads = g.ints(f"{l.name}/tail", [0, 0, 0, 0, 0, 0, out[0] - inside[0], out[1] - inside[1]])
    if l.param.pooling_param.pool == MAX:
        lowest = g.const(f"{l.name}/lowest", np.finfo(np.float32).min)
        g.op1("Pad", [pooled, pads, lowest], l.name, l.tops[0], mode="constant")
        return
    at_end = [np.array([i * s == n for i in range(o)]) for n, s, o in zip(size, stride, out)]
    nothing = at_end[0][:, None] | at_end[1][None, :]
    if not nothing.any():
        g.op1("Pad", [pooled, pads], l.name, l.tops[0], mode="constant")
        return
    padded = g.op1("Pad", [pooled, pads], l.name, mode="constant")
    g.op1("Add", [padded, g.const(f"{l.name}/nan", np.where(nothing, np.nan, 0.0))], l.name, l.tops[0])
