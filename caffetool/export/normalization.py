"""LRN, BatchNorm and MVN as ONNX operators, each as Caffe computes it.

BatchNorm divides its stored statistics by the moving-average factor in its third blob and uses its
own ``eps``; MVN adds ``eps`` to the standard deviation, not to the variance, and its top is 4-D (a
2-D or 3-D bottom gains trailing axes of 1); LRN WITHIN_CHANNEL is Caffe's own composition (square,
padded average, power, product), ACROSS_CHANNELS is ONNX's LRN.
"""

from __future__ import annotations

import numpy as np

from caffetool.export.caffelayer import Layer
from caffetool.export.onnxgraph import OnnxGraph

ACROSS_CHANNELS = 0  # LRNParameter.NormRegion


def lrn(g: OnnxGraph, l: Layer) -> None:
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


def batch_norm(g: OnnxGraph, l: Layer) -> None:
    """Caffe's stored mean and variance are sums scaled by the factor in its third blob."""
    p = l.param.batch_norm_param
    if p.HasField("use_global_stats") and not p.use_global_stats:
        raise l.refuse("use_global_stats is false, so Caffe normalises each batch by its own statistics at "
                       "test time; ONNX models hold fixed statistics (remove the field to use the stored ones)")
    factor = float(l.blobs[2].reshape(-1)[0])
    factor = 0.0 if factor == 0 else 1.0 / factor
    mean = (l.blobs[0] * np.float32(factor)).astype(np.float32)
    var = (l.blobs[1] * np.float32(factor)).astype(np.float32)
    channels = mean.size
    g.op1("BatchNormalization", [l.bottoms[0], g.const(f"{l.name}/gamma", np.ones(channels)),
                                 g.const(f"{l.name}/beta", np.zeros(channels)),
                                 g.const(f"{l.name}/mean", mean), g.const(f"{l.name}/var", var)],
          l.name, l.tops[0], epsilon=float(p.eps))


def mvn(g: OnnxGraph, l: Layer) -> None:
    """Caffe's MVN reads its bottom as (num, channels, height, width) and shapes its top so: a 2-D or
    3-D bottom is reshaped first, which also makes each channel of a 2-D one a row of its own."""
    p = l.param.mvn_param
    x = l.bottoms[0]
    if len(l.bottom_shapes[0]) != len(l.top_shapes[0]):
        x = g.op1("Reshape", [x, g.ints(f"{l.name}/shape", [0, *l.top_shapes[0][1:]])], l.name)
    axes = list(range(1 if p.across_channels else 2, len(l.top_shapes[0])))
    mean = g.reduce("ReduceMean", x, axes, l.name, True)
    if not p.normalize_variance:
        g.op1("Sub", [x, mean], l.name, l.tops[0])
        return
    centred = g.op1("Sub", [x, mean], l.name)
    variance = g.reduce("ReduceMean", g.op1("Mul", [centred, centred], l.name), axes, l.name, True)
    std = g.op1("Add", [g.op1("Sqrt", [variance], l.name), g.const(f"{l.name}/eps", p.eps)], l.name)
    g.op1("Div", [centred, std], l.name, l.tops[0])
