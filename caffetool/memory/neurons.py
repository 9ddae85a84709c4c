"""Rules for element-wise and normalising layers: the neuron family, Dropout, PReLU, BatchNorm,
Scale, Bias, MVN.

A neuron layer's top has its bottom's shape and may be computed in place (the top is then the
bottom's blob). Some layers keep a copy of their input when run in place, because backward needs
the input the forward pass overwrote — those copies are the biggest surprises in a ResNet.
Sources: BVLC Caffe 1.0 ``src/caffe/layers/<name>_layer.cpp``.
"""

from __future__ import annotations

from typing import Any

from caffetool.memory.info import (BACKWARD, FORWARD, INT, NEVER, SETUP, Buffer, LayerInfo, Shape, axis_index, count,
                                   field_or, in_place, phase_of)

CUDNN_NEURONS = {"ReLU": "CuDNNReLU", "Sigmoid": "CuDNNSigmoid", "TanH": "CuDNNTanH"}


def neuron(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """neuron_layer.cpp ``Reshape``: the top is shaped like the bottom; nothing else is kept (ReLU,
    Sigmoid, TanH, ELU, BNLL, AbsVal, Power, Exp, Log, Clip)."""
    engine = getattr(layer, f"{layer.type.lower()}_param").engine if layer.type in CUDNN_NEURONS else 1
    return LayerInfo([bottoms[0]], [], count(bottoms[0]), cudnn=CUDNN_NEURONS[layer.type] if engine != 1 else None)


def threshold(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """threshold_layer.hpp: no backward at all (``Backward_cpu`` is ``NOT_IMPLEMENTED``)."""
    return LayerInfo([bottoms[0]], [], count(bottoms[0]), bottom_diff="none")


def swish(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """swish_layer.cpp: an inner Sigmoid layer with its own input (``sigmoid_input_``) and output
    (``sigmoid_output_``) blobs, both of the input's size, written by every forward pass."""
    blob = count(bottoms[0])
    return LayerInfo([bottoms[0]], [], 3 * blob, [Buffer("sigmoid_input", blob, FORWARD),
                                                  Buffer("sigmoid_output", blob, FORWARD)])


def dropout(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """dropout_layer.cpp:35 (``Forward_cpu``) takes the mask ``rand_vec_`` (unsigned ints, the
    input's size) in every phase, before it checks for TRAIN; dropout_layer.cu touches it only in TRAIN."""
    blob = count(bottoms[0])
    when = FORWARD if phase_of(layer, phase) == "train" else "cpu-forward"
    return LayerInfo([bottoms[0]], [], blob, [Buffer("rand_vec", blob, when, INT)])


def prelu(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """prelu_layer.cpp: one slope per channel (or one); ``multiplier_`` (C x H x W, set in
    ``LayerSetUp``); ``backward_buff_`` is used only by the GPU backward; in place, the forward
    pass copies its input into ``bottom_memory_`` for backward (line 78)."""
    shape = bottoms[0]
    per_sample = count(shape[1:])
    slopes = () if layer.prelu_param.channel_shared else (shape[1],)  # a scalar blob: no axes
    buffers = [Buffer("multiplier", per_sample, SETUP), Buffer("backward_buff", per_sample, "gpu-backward")]
    if in_place(layer):
        buffers.append(Buffer("bottom_memory", count(shape), FORWARD))
    return LayerInfo([shape], [slopes], count(shape), buffers)


def batch_norm(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """batch_norm_layer.cpp. Three statistics blobs (mean, variance, moving-average factor) that
    ``LayerSetUp`` forces to ``lr_mult: 0`` (lines 41-42, in the layer's own copy of its parameters)
    but that still count as learnable parameters (gradient and solver history); net.cpp:149 reads
    the prototxt's ``param`` entries, so a BatchNorm without them even counts as learning. Reshape sets ``batch_sum_multiplier_`` (N) and
    ``spatial_sum_multiplier_`` (H x W); every forward, in TRAIN or with ``use_global_stats``, fills
    ``mean_``, ``variance_`` (C), ``num_by_chans_`` (N x C), ``temp_`` and ``x_norm_`` (the input's
    size). Backward takes the bottom's gradient unconditionally (line 179) and, in place, first
    copies the top's gradient into ``x_norm_``'s own gradient (line 176)."""
    shape = bottoms[0]
    n = shape[0]
    c = shape[1] if len(shape) > 1 else 1
    blob = count(shape)
    spatial = blob // (n * c)
    buffers = [Buffer("batch_sum_multiplier", n, SETUP), Buffer("spatial_sum_multiplier", spatial, SETUP),
               Buffer("mean", c, FORWARD), Buffer("variance", c, FORWARD), Buffer("num_by_chans", n * c, FORWARD),
               Buffer("temp", blob, FORWARD), Buffer("x_norm", blob, FORWARD)]
    if in_place(layer):
        buffers.append(Buffer("x_norm.diff", blob, BACKWARD))
    return LayerInfo([shape], [(c,), (c,), (1,)], 2 * blob, buffers, bottom_diff="always")


def _broadcast(shape: Shape, axis: int, num_axes: int) -> tuple[int, int, int, Shape]:
    """(outer, scale, inner, scale shape) as Scale and Bias split the input around their blob."""
    axis = axis_index(axis, shape)
    end = len(shape) if num_axes == -1 else axis + num_axes
    return count(shape[:axis]), count(shape[axis:end]), count(shape[end:]), tuple(shape[axis:end])


def _operand(bottoms: list[Shape], axis: int, num_axes: int) -> tuple[tuple[int, int, int, Shape], list[Shape]]:
    """Scale's and Bias's operand broadcast over the input: a second bottom (no parameter of its own),
    or the layer's blob of the shape ``axis``/``num_axes`` give, which is its parameter."""
    if len(bottoms) > 1:
        return _broadcast(bottoms[0], axis if bottoms[1] else 0, len(bottoms[1])), []
    broadcast = _broadcast(bottoms[0], axis, num_axes)
    return broadcast, [broadcast[3]]


def scale(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """scale_layer.cpp. ``sum_multiplier_`` (max(outer, inner)) is set in Reshape. In place, each
    forward copies the input into ``temp_`` (line 126: backward needs the unscaled input). Backward
    of the scale, unless it is element-wise, multiplies into scratch (line 165): ``temp_`` in place,
    otherwise the bottom's own gradient blob (whatever ``propagate_down`` says), and sums per channel into
    ``sum_result_`` (outer x scale) when both outer and inner dimensions exceed 1. ``bias_term``
    builds an inner Bias layer on the top (``bias_multiplier_``, inner) whose blob becomes this
    layer's second parameter."""
    p = layer.scale_param
    shape = bottoms[0]
    (outer, dim, inner, scale_shape), params = _operand(bottoms, p.axis, p.num_axes)
    buffers = [Buffer("sum_multiplier", max(outer, inner), SETUP)]
    here = in_place(layer)
    if here:
        buffers.append(Buffer("temp", count(shape), FORWARD))
    elementwise = count(shape) == count(scale_shape)
    summed = not elementwise and inner != 1 and outer * dim != 1 and outer != 1
    buffers.append(Buffer("sum_result", outer * dim, BACKWARD if summed else NEVER))
    if p.bias_term:
        params.append(scale_shape)
        buffers.append(Buffer("bias_layer.bias_multiplier", inner, SETUP))
    policy: str | tuple[str, ...] = "propagate" if here or elementwise else ("always", "propagate")
    return LayerInfo([shape], params, count(shape) * (1 + p.bias_term), buffers, bottom_diff=policy)


def bias(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """bias_layer.cpp: the bias blob (or a second bottom) broadcast from ``axis``; ``bias_multiplier_``
    (inner) set in Reshape; the input's gradient is a copy of the top's, skipped in place."""
    p = layer.bias_param
    shape = bottoms[0]
    (_, _, inner, _), params = _operand(bottoms, p.axis, p.num_axes)
    policy = ("none", "propagate") if in_place(layer) else "propagate"
    return LayerInfo([shape], params, count(shape), [Buffer("bias_multiplier", inner, SETUP)], bottom_diff=policy)


def mvn(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """mvn_layer.cpp: ``mean_``, ``variance_`` (N x C, or N across channels), ``temp_`` (input size),
    ``sum_multiplier_`` (set in Reshape); backward takes the bottom's gradient unconditionally."""
    p = layer.mvn_param
    shape = bottoms[0]
    n, c = shape[0], shape[1]
    per = n if p.across_channels else n * c
    spatial = count(shape[1:]) if p.across_channels else count(shape[2:])
    buffers = [Buffer("sum_multiplier", spatial, SETUP), Buffer("mean", per, FORWARD),
               Buffer("temp", count(shape), FORWARD)]
    if field_or(p, "normalize_variance", True):
        buffers.append(Buffer("variance", per, FORWARD))
    return LayerInfo([shape], [], 2 * count(shape), buffers, bottom_diff="always")
