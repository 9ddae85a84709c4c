"""Pooling, SPP and LRN: the layers that slide a window without learned weights.

Memory follows BVLC Caffe 1.0's ``pooling_layer.cpp``, ``spp_layer.cpp`` and ``lrn_layer.cpp`` (and
their cuDNN classes), sizes from :mod:`caffetool.layers.geometry`. A pooling's output size rounds up
(``ceil``) and then, when either axis is padded, drops on both axes a last window that would start in
the padding; an average divides by the window clipped to the *padded* input but not to the overhang
past it. The ONNX translation makes both exact with explicit end pads (and a ``Pad`` of zeros for a
padded average), never with ``ceil_mode``, whose rules differ between runtimes; unpadded, a stride
longer than the kernel can start a last window past the input, where Caffe's max is ``-FLT_MAX`` and
its average 0 (or NaN), and so are the model's. PyTorch's ``ceil_mode`` is Caffe's rule when a pooling
is padded; a window size PyTorch would give otherwise is refused. LRN WITHIN_CHANNEL is Caffe's own
composition (square, padded average, power, product), ACROSS_CHANNELS is ONNX's and PyTorch's LRN.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from caffetool.layers import geometry
from caffetool.layers.allocation import BACKWARD, FORWARD, INT, SETUP, Buffer, LayerInfo, Shape, count
from caffetool.layers.caffelayer import Layer
from caffetool.layers.entry import LayerType, Refused
from caffetool.layers.torchlayer import TorchLayer, four_d, hw, kwargs, sizes, unless

if TYPE_CHECKING:
    from caffetool.layers.onnxgraph import OnnxGraph

MAX, AVE, STOCHASTIC = 0, 1, 2  # PoolingParameter.PoolMethod
ACROSS_CHANNELS = 0  # LRNParameter.NormRegion
SPP_REFUSED = Refused("spatial pyramid pooling's levels are not covered by the export")


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


def torch_pooled(size: int, kernel: int, stride: int, pad: int, ceil: bool) -> int:
    """The output size of PyTorch's pooling (``pooling_output_shape`` in ATen)."""
    out = (size + 2 * pad - kernel + (stride - 1 if ceil else 0)) // stride + 1
    if ceil and (out - 1) * stride >= size + pad:
        out -= 1
    return out


class Pooling(LayerType):
    """MAX, AVE or STOCHASTIC over a window, or over the whole input (pooling_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """pooling_layer.cpp: MAX keeps ``max_idx_`` (ints) unless a second top takes the mask;
        STOCHASTIC keeps ``rand_idx_`` (training forward)."""
        p = layer.pooling_param
        n, c, h, w = bottoms[0]
        window = geometry.pool_window(p, (h, w))
        top = (n, c, *geometry.pool_output((h, w), window, geometry.rounds_up(p)))
        buffers = []
        if p.pool == 0 and len(layer.top) == 1:
            buffers.append(Buffer("max_idx", count(top), FORWARD, INT))
        if p.pool == 2 and phase == "train":
            buffers.append(Buffer("rand_idx", count(top), FORWARD))
        # layer_factory.cpp:133-142 (GetPoolingLayer): MAX pooling and a mask top keep Caffe's own layer
        cudnn = "CuDNNPooling" if p.engine != 1 and len(layer.top) == 1 and p.pool != 0 else None
        return LayerInfo([top] * len(layer.top), [], count(top) * count(window.kernel), buffers, cudnn=cudnn)

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
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

    @staticmethod
    def pytorch(l: Layer) -> TorchLayer:
        p = l.param.pooling_param
        if p.pool not in (MAX, AVE):
            raise l.refuse("stochastic pooling at test time weights each window by its values; PyTorch has no such "
                           "module", to="PyTorch")
        four_d(l, "pooling")
        if p.global_pooling:
            return TorchLayer(f"nn.Adaptive{'Max' if p.pool == MAX else 'Avg'}Pool2d(1)")
        size = l.bottom_shapes[0][2:]
        w = geometry.pool_window(p, size)
        ceil = geometry.rounds_up(p)
        if any(2 * q > k for q, k in zip(w.pad, w.kernel)):
            raise l.refuse(f"its pad {sizes(w.pad)} is more than half its kernel {sizes(w.kernel)}, which PyTorch's "
                           "pooling refuses", to="PyTorch")
        theirs = tuple(torch_pooled(n, k, s, q, ceil) for n, k, s, q in zip(size, w.kernel, w.stride, w.pad))
        if theirs != tuple(l.top_shapes[0][2:]):
            raise l.refuse(f"Caffe pools {hw(size)} to {hw(l.top_shapes[0][2:])}, PyTorch's pooling to {hw(theirs)} "
                           "(a window starting past the input)", to="PyTorch")
        kind = "MaxPool2d" if p.pool == MAX else "AvgPool2d"
        return TorchLayer(f"nn.{kind}({sizes(w.kernel)}" + kwargs(stride=sizes(w.stride), padding=unless(w.pad, 0),
                                                                    ceil_mode=True if ceil else None) + ")")


class SPP(LayerType):
    """Spatial pyramid pooling: several poolings flattened and concatenated (spp_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """spp_layer.cpp: per pyramid level an inner Pooling layer (its top and, for MAX, its
        ``max_idx_``) and a Flatten sharing that top; a Split over the input when there are several
        levels (one gradient per level); a Concat into the top. The flattened tops' gradients are the
        concat's own, filled in backward."""
        p = layer.spp_param
        n, c, h, w = bottoms[0]
        levels = p.pyramid_height
        buffers, width = [], 0
        if levels == 1:  # spp_layer.cpp LayerSetUp: one Pooling layer straight into the top
            top = (n, c, 1, 1)
            return LayerInfo([top], [], count(bottoms[0]),
                             [Buffer("pooling_0.max_idx", count(top), FORWARD, INT)] if p.pool == 0 else [])
        for i in range(levels):
            pooled = (n, c, *geometry.pool_output((h, w), geometry.spp_window(i, (h, w))))
            width += c * pooled[2] * pooled[3]
            buffers.append(Buffer(f"pooling_{i}.top", count(pooled), FORWARD))
            buffers.append(Buffer(f"pooling_{i}.top.diff", count(pooled), BACKWARD))
            buffers.append(Buffer(f"split.top_{i}.diff", count(bottoms[0]), BACKWARD))
            if p.pool == 0:
                buffers.append(Buffer(f"pooling_{i}.max_idx", count(pooled), FORWARD, INT))
        return LayerInfo([(n, width)], [], count(bottoms[0]), buffers)

    onnx = SPP_REFUSED
    pytorch = SPP_REFUSED


class LRN(LayerType):
    """Local response normalisation across channels or within one (lrn_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """lrn_layer.cpp. ACROSS_CHANNELS keeps ``scale_``; its backward takes the bottom's gradient
        unconditionally (line 187). WITHIN_CHANNEL is built from inner layers (``LayerSetUp``): a Split whose two
        tops share the input's data but have their own gradients, a Power (square), an AVE Pooling
        (same size), a Power and an Eltwise PROD into the top — three inner tops of data, five gradients."""
        p = layer.lrn_param
        size = p.local_size or 5
        blob = count(bottoms[0])
        if p.norm_region == 1:
            buffers = [Buffer(f"{name}.data", blob, FORWARD)
                       for name in ("square_output", "pool_output", "power_output")]
            buffers += [Buffer(f"{name}.diff", blob, BACKWARD) for name in
                        ("product_input", "square_input", "square_output", "pool_output", "power_output")]
            # cudnn_lcn_layer.cpp: cudnnDivisiveNormalization* run none of the inner layers; Reshape
            # cudaMallocs two temporaries of the input's size; Backward_gpu takes the input's gradient
            return LayerInfo([bottoms[0]], [], blob * (size * size + 3), buffers,
                             cudnn="CuDNNLCN" if p.engine != 1 else None, cudnn_unused=tuple(b.name for b in buffers),
                             cudnn_buffers=[Buffer("tempData1", blob, SETUP), Buffer("tempData2", blob, SETUP)],
                             cudnn_bottom_diff="always")
        # layer_factory.cpp GetLRNLayer: a window wider than CUDNN_LRN_MAX_N (16) keeps Caffe's layer;
        # cudnn_lrn_layer.cu: cudnnLRNCrossChannel* keep no scale_
        cudnn = "CuDNNLRN" if p.engine != 1 and size <= 16 else None
        return LayerInfo([bottoms[0]], [], blob * size, [Buffer("scale", blob, FORWARD)], bottom_diff="always",
                         cudnn=cudnn, cudnn_unused=("scale",))

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
        p = l.param.lrn_param
        if p.norm_region == ACROSS_CHANNELS:
            g.op1("LRN", [l.bottoms[0]], l.name, l.tops[0], size=p.local_size, alpha=float(p.alpha),
                  beta=float(p.beta), bias=float(p.k))
            return
        half = (p.local_size - 1) // 2  # Caffe's WITHIN_CHANNEL: x * (1 + alpha * mean(x^2 over the square))^-beta
        square = g.op1("Mul", [l.bottoms[0], l.bottoms[0]], l.name)
        mean = g.op1("AveragePool", [square], l.name, kernel_shape=[p.local_size] * 2, strides=[1, 1],
                     pads=[half] * 4, count_include_pad=1)
        base = g.op1("Add", [g.op1("Mul", [mean, g.const(f"{l.name}/alpha", p.alpha)], l.name),
                             g.const(f"{l.name}/one", 1.0)], l.name)
        scale = g.op1("Pow", [base, g.const(f"{l.name}/beta", -p.beta)], l.name)
        g.op1("Mul", [l.bottoms[0], scale], l.name, l.tops[0])

    @staticmethod
    def pytorch(l: Layer) -> TorchLayer:
        p = l.param.lrn_param
        four_d(l, "LRN")
        if p.norm_region == ACROSS_CHANNELS:
            return TorchLayer(f"nn.LocalResponseNorm({p.local_size}, alpha={float(p.alpha)!r}, beta={float(p.beta)!r}, "
                              f"k={float(p.k)!r})")
        return TorchLayer(f"WithinChannelLRN({p.local_size}, alpha={float(p.alpha)!r}, beta={float(p.beta)!r})",
                          helpers=("WithinChannelLRN",))
