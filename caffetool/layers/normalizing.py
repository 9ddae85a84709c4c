"""BatchNorm, Scale, Bias and MVN: the layers that shift and scale by statistics or learned terms.

BatchNorm stores sums scaled by the moving-average factor in its third blob: the exports divide by it
and use the layer's own ``eps`` (PyTorch's ``momentum`` is Caffe's ``1 - moving_average_fraction``).
MVN adds ``eps`` to the standard deviation, not to the variance, and its top is 4-D (a 2-D or 3-D
bottom gains trailing axes of 1). Scale and Bias broadcast a learned blob, or a second bottom, from
``axis``. Sources: BVLC Caffe 1.0 ``batch_norm_layer.cpp``, ``scale_layer.cpp``, ``bias_layer.cpp``,
``mvn_layer.cpp``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from caffetool.layers.allocation import (BACKWARD, FORWARD, NEVER, SETUP, Buffer, LayerInfo, Shape, axis_index, count,
                                         field_or, in_place)
from caffetool.layers.caffelayer import Layer, axis_of
from caffetool.layers.entry import NOT_IN_PYTORCH, LayerType
from caffetool.layers.torchlayer import TorchLayer, kwargs

if TYPE_CHECKING:
    from caffetool.layers.onnxgraph import OnnxGraph


def _around(shape: Shape, axis: int, num_axes: int) -> tuple[int, int, int, Shape]:
    """(outer, scale, inner, scale shape) as Scale and Bias split the input around their blob."""
    axis = axis_index(axis, shape)
    end = len(shape) if num_axes == -1 else axis + num_axes
    return count(shape[:axis]), count(shape[axis:end]), count(shape[end:]), tuple(shape[axis:end])


def _operand_of(bottoms: list[Shape], axis: int, num_axes: int) -> tuple[tuple[int, int, int, Shape], list[Shape]]:
    """Scale's and Bias's operand broadcast over the input: a second bottom (no parameter of its own),
    or the layer's blob of the shape ``axis``/``num_axes`` give, which is its parameter."""
    if len(bottoms) > 1:
        return _around(bottoms[0], axis if bottoms[1] else 0, len(bottoms[1])), []
    broadcast = _around(bottoms[0], axis, num_axes)
    return broadcast, [broadcast[3]]


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


def _operand_shape(l: Layer, blob: np.ndarray, axis: int, num_axes: int) -> np.ndarray:
    """A learned Scale/Bias blob in the shape of the bottom's axes it covers."""
    shape = l.bottom_shapes[0]
    covered = shape[axis:] if num_axes == -1 else shape[axis:axis + num_axes]
    return blob.reshape(covered)


def _torch_operand(l: Layer, axis: int, num_axes: int, blob: np.ndarray) -> np.ndarray:
    """A learned Scale/Bias blob shaped to broadcast against the bottom from ``axis`` on."""
    shape = l.bottom_shapes[0]
    covered = list(shape[axis:] if num_axes == -1 else shape[axis:axis + num_axes])
    return blob.reshape(covered + [1] * (len(shape) - axis - len(covered)))


def _trailing(l: Layer, axis: int) -> int:
    """How many axes of the first bottom follow those a second bottom covers from ``axis``."""
    return len(l.bottom_shapes[0]) - axis - len(l.bottom_shapes[1])


class BatchNorm(LayerType):
    """Normalisation by the batch's statistics, or the stored ones (batch_norm_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """batch_norm_layer.cpp. Three statistics blobs (mean, variance, moving-average factor) that
        ``LayerSetUp`` forces to ``lr_mult: 0`` (lines 41-42, in the layer's own copy of its parameters)
        but that still count as learnable parameters (gradient and solver history); net.cpp:149 reads
        the prototxt's ``param`` entries, so a BatchNorm without them even counts as learning.
        Reshape sets ``batch_sum_multiplier_`` (N) and
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

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
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

    @staticmethod
    def pytorch(l: Layer) -> TorchLayer:
        """Caffe's stored mean and variance are sums scaled by the factor in its third blob."""
        p = l.param.batch_norm_param
        if p.HasField("use_global_stats") and not p.use_global_stats:
            raise l.refuse("use_global_stats is false, so Caffe normalises each batch by its own statistics at test "
                           "time; remove the field to use the stored ones", to="PyTorch")
        rank = len(l.bottom_shapes[0])
        if rank not in (2, 3, 4):
            raise l.refuse(f"PyTorch's BatchNorm takes 2-D to 4-D blobs; this one is {rank}-D", to="PyTorch")
        factor = float(l.blobs[2].reshape(-1)[0])
        factor = 0.0 if factor == 0 else 1.0 / factor
        mean = (l.blobs[0].reshape(-1) * np.float32(factor)).astype(np.float32)
        var = (l.blobs[1].reshape(-1) * np.float32(factor)).astype(np.float32)
        momentum = round(1.0 - float(p.moving_average_fraction), 12)
        kind = "BatchNorm2d" if rank == 4 else "BatchNorm1d"
        return TorchLayer(f"nn.{kind}({mean.size}, eps={float(p.eps)!r}, momentum={momentum!r}, affine=False)",
                          {"running_mean": mean, "running_var": var, "num_batches_tracked": np.array(0, np.int64)})


class Scale(LayerType):
    """A learned (or second input's) factor broadcast from ``axis``, and a bias term (scale_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """scale_layer.cpp. ``sum_multiplier_`` (max(outer, inner)) is set in Reshape. In place, each
        forward copies the input into ``temp_`` (line 126: backward needs the unscaled input). Backward
        of the scale, unless it is element-wise, multiplies into scratch (line 165): ``temp_`` in place,
        otherwise the bottom's own gradient blob (whatever ``propagate_down`` says), and sums per channel into
        ``sum_result_`` (outer x scale) when both outer and inner dimensions exceed 1. ``bias_term``
        builds an inner Bias layer on the top (``bias_multiplier_``, inner) whose blob becomes this
        layer's second parameter."""
        p = layer.scale_param
        shape = bottoms[0]
        (outer, dim, inner, scale_shape), params = _operand_of(bottoms, p.axis, p.num_axes)
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

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
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

    @staticmethod
    def pytorch(l: Layer) -> TorchLayer:
        p = l.param.scale_param
        axis = axis_of(p.axis, len(l.bottom_shapes[0]))
        if len(l.bottoms) == 2:
            if p.bias_term:
                raise l.refuse("its learned term is shaped as its second input, batch axis and all", to="PyTorch")
            return TorchLayer(f"ScaleByInput({_trailing(l, axis)})", helpers=("ScaleByInput",))
        if axis == 0:
            raise l.refuse("its factors cover the batch axis (axis 0)", to="PyTorch")
        weight = _torch_operand(l, axis, p.num_axes, l.blobs[0])
        state = {"weight": weight}
        if p.bias_term:
            state["bias"] = _torch_operand(l, axis, p.num_axes, l.blobs[1])
        return TorchLayer(f"Scale({tuple(weight.shape)}" + kwargs(bias=True if p.bias_term else None) + ")", state,
                          helpers=("Scale",))


class Bias(LayerType):
    """A learned (or second input's) term added from ``axis`` (bias_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """bias_layer.cpp: the bias blob (or a second bottom) broadcast from ``axis``; ``bias_multiplier_``
        (inner) set in Reshape; the input's gradient is a copy of the top's, skipped in place."""
        p = layer.bias_param
        shape = bottoms[0]
        (_, _, inner, _), params = _operand_of(bottoms, p.axis, p.num_axes)
        policy = ("none", "propagate") if in_place(layer) else "propagate"
        return LayerInfo([shape], params, count(shape), [Buffer("bias_multiplier", inner, SETUP)], bottom_diff=policy)

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
        p = l.param.bias_param
        axis = _operand_axis(l, p.axis)
        operand = None if len(l.bottoms) == 2 else _operand_shape(l, l.blobs[0], axis, p.num_axes)
        g.op1("Add", [l.bottoms[0], _broadcast(g, l, operand, axis)], l.name, l.tops[0])

    @staticmethod
    def pytorch(l: Layer) -> TorchLayer:
        p = l.param.bias_param
        axis = axis_of(p.axis, len(l.bottom_shapes[0]))
        if len(l.bottoms) == 2:
            return TorchLayer(f"BiasByInput({_trailing(l, axis)})", helpers=("BiasByInput",))
        if axis == 0:
            raise l.refuse("its terms cover the batch axis (axis 0)", to="PyTorch")
        operand = _torch_operand(l, axis, p.num_axes, l.blobs[0])
        return TorchLayer(f"Bias({tuple(operand.shape)})", {"bias": operand}, helpers=("Bias",))


class MVN(LayerType):
    """Mean (and variance) normalisation per item, or per channel (mvn_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
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

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
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

    pytorch = NOT_IN_PYTORCH
