"""The layers that route, reshape or combine blobs: Concat, Slice, Split, Flatten, Reshape, Crop, Tile,
Reduction, ArgMax, Filter, Eltwise, BatchReindex, Silence, Parameter.

Several of them own no memory at all: Flatten and Reshape (``ShareData`` + ``ShareDiff`` with the
bottom), a Concat of one input or a Slice into one output, and Split's tops (shared data, own
gradients — see :mod:`caffetool.memory.netgraph`). ArgMax: Caffe's ``partial_sort`` of (value, index)
pairs puts the larger index first among equal values, ONNX's TopK the smaller, so the axis is reversed
around TopK and ties resolve as in Caffe. Sources: BVLC Caffe 1.0 ``src/caffe/layers/<name>_layer.cpp``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from caffetool.layers import geometry
from caffetool.layers.allocation import (FORWARD, INSIDE, INT, SETUP, Buffer, LayerInfo, Shape, axis_index, count,
                                         field_or)
from caffetool.layers.caffelayer import Layer, axis_of
from caffetool.layers.entry import NOT_IN_PYTORCH, LayerType, Omitted, Refused
from caffetool.layers.neurons import identity
from caffetool.layers.torchlayer import TorchLayer

if TYPE_CHECKING:
    from caffetool.layers.onnxgraph import OnnxGraph

PROD, SUM, EMAX = 0, 1, 2  # EltwiseParameter.EltwiseOp
OPERATIONS = {PROD: "prod", SUM: "sum", EMAX: "max"}  # as model.py's Eltwise names them
REDUCTIONS = {1: "ReduceSum", 2: "ReduceL1", 3: "ReduceSumSquare", 4: "ReduceMean"}  # ReductionParameter
BY_VALUES = Refused("its output depends on a second input's values, which the export does not cover")


def _axis(p: Any, legacy: str, rank: int) -> int:
    """A Concat's or Slice's axis: the legacy ``concat_dim``/``slice_dim`` wins when set, as in
    concat_layer.cpp and slice_layer.cpp; else ``axis``, counted from the end when negative."""
    return getattr(p, legacy) if p.HasField(legacy) else axis_of(p.axis, rank)


def _reshape(g: OnnxGraph, l: Layer, target: list[int]) -> None:
    g.op1("Reshape", [l.bottoms[0], g.ints(f"{l.name}/shape", target)], l.name, l.tops[0])


class Concat(LayerType):
    """Inputs joined along ``axis`` (concat_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """concat_layer.cpp: one input is shared (``ShareData``/``ShareDiff``), several are copied."""
        axis = _axis(layer.concat_param, "concat_dim", len(bottoms[0]))
        top = list(bottoms[0])
        top[axis] = sum(b[axis] for b in bottoms)
        return LayerInfo([tuple(top)], alias={0: 0} if len(bottoms) == 1 else {})

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
        p = l.param.concat_param
        axis = _axis(p, "concat_dim", len(l.bottom_shapes[0]))
        g.op1("Concat", l.bottoms, l.name, l.tops[0], axis=axis)

    @staticmethod
    def pytorch(l: Layer) -> TorchLayer:
        p = l.param.concat_param
        axis = _axis(p, "concat_dim", len(l.bottom_shapes[0]))
        return TorchLayer(f"Concat({axis})", helpers=("Concat",))


class Slice(LayerType):
    """One input cut along ``axis`` at ``slice_point``s or into equal parts (slice_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """slice_layer.cpp: at ``slice_point``s or in equal parts; one output shares the input."""
        p = layer.slice_param
        shape = bottoms[0]
        axis = _axis(p, "slice_dim", len(shape))
        tops = max(len(layer.top), 1)
        if p.slice_point:
            points = [0, *p.slice_point, shape[axis]]
            sizes = [b - a for a, b in zip(points, points[1:])]
        else:
            sizes = [shape[axis] // tops] * tops
        out = [tuple(shape[:axis]) + (s,) + tuple(shape[axis + 1:]) for s in sizes]
        return LayerInfo(out, alias={0: 0} if tops == 1 else {})

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
        p = l.param.slice_param
        rank = len(l.bottom_shapes[0])
        axis = _axis(p, "slice_dim", rank)
        sizes = [s[axis] for s in l.top_shapes]
        g.op("Split", [l.bottoms[0], g.ints(f"{l.name}/split", sizes)], l.name, l.tops, axis=axis)

    @staticmethod
    def pytorch(l: Layer) -> TorchLayer:
        p = l.param.slice_param
        axis = _axis(p, "slice_dim", len(l.bottom_shapes[0]))
        if axis == 0:
            raise l.refuse("it slices the batch axis (axis 0)", to="PyTorch")
        return TorchLayer(f"Slice({axis}, {tuple(s[axis] for s in l.top_shapes)})", helpers=("Slice",))


class Split(LayerType):
    """One blob handed to several readers; Caffe inserts it itself (split_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """split_layer.cpp: every top shares the bottom's data (``ShareData`` in forward)."""
        return LayerInfo([bottoms[0]] * len(layer.top))

    onnx = staticmethod(identity)

    @staticmethod
    def pytorch(l: Layer) -> TorchLayer:
        return TorchLayer(f"Split({len(l.tops)})", helpers=("Split",))


class Flatten(LayerType):
    """Axes ``axis`` to ``end_axis`` merged into one (flatten_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """flatten_layer.cpp: axes ``axis``..``end_axis`` merged; data and gradient shared."""
        p = layer.flatten_param
        shape = bottoms[0]
        start, end = axis_index(p.axis, shape), axis_index(p.end_axis, shape)
        top = tuple(shape[:start]) + (count(shape[start:end + 1]),) + tuple(shape[end + 1:])
        return LayerInfo([top], alias={0: 0})

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
        """Leading axes copied (0), the flattened ones inferred (-1), the rest as Caffe shaped them."""
        p = l.param.flatten_param
        shape = l.bottom_shapes[0]
        rank = len(shape)
        start, end = axis_of(p.axis, rank), axis_of(p.end_axis, rank)
        _reshape(g, l, [0] * start + [-1] + list(shape[end + 1:]))

    @staticmethod
    def pytorch(l: Layer) -> TorchLayer:
        p = l.param.flatten_param
        rank = len(l.bottom_shapes[0])
        start, end = axis_of(p.axis, rank), axis_of(p.end_axis, rank)
        if start == 0:
            raise l.refuse("it flattens the batch axis (axis 0)", to="PyTorch")
        return TorchLayer(f"nn.Flatten({start}" + ("" if end == rank - 1 else f", {end}") + ")")


class Reshape(LayerType):
    """A new shape for the same values (reshape_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """reshape_layer.cpp: ``shape`` replaces ``num_axes`` axes from ``axis``; 0 copies the bottom's
        dimension, -1 is inferred; data and gradient shared."""
        p = layer.reshape_param
        shape = bottoms[0]
        start = p.axis if p.axis >= 0 else len(shape) + p.axis + 1
        end = len(shape) if p.num_axes == -1 else start + p.num_axes
        dims = [shape[start + i] if d == 0 else d for i, d in enumerate(p.shape.dim)]
        top = list(shape[:start]) + dims + list(shape[end:])
        if -1 in top:
            known = count([d for d in top if d != -1])
            top[top.index(-1)] = count(shape) // known
        return LayerInfo([tuple(top)], alias={0: 0})

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
        """Caffe's 0 copies the bottom's axis at the same place, as ONNX's does (``allowzero`` off);
        axes after the replaced range are given as Caffe sized them."""
        p = l.param.reshape_param
        shape = l.bottom_shapes[0]
        rank = len(shape)
        start = p.axis if p.axis >= 0 else rank + p.axis + 1
        end = rank if p.num_axes == -1 else start + p.num_axes
        _reshape(g, l, [0] * start + [int(d) for d in p.shape.dim] + list(shape[end:]))

    @staticmethod
    def pytorch(l: Layer) -> TorchLayer:
        """Caffe's shape for one item; the batch axis passes through (a reshape of it is refused)."""
        if l.top_shapes[0][0] != l.bottom_shapes[0][0] or (l.param.reshape_param.axis == 0 and
                                                            list(l.param.reshape_param.shape.dim[:1]) != [0]):
            raise l.refuse("it reshapes the batch axis", to="PyTorch")
        return TorchLayer(f"Reshape({tuple(l.top_shapes[0][1:])})", helpers=("Reshape",))


class Crop(LayerType):
    """The first input cut to the second's size from ``axis`` on (crop_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """crop_layer.cpp: bottom 0 cut to bottom 1's size from ``axis`` on; ``offsets``,
        ``src_strides_`` and ``dest_strides_`` (ints, one per axis) set in Reshape; backward takes bottom
        0's gradient unconditionally (line 135) and never gives bottom 1 one."""
        p = layer.crop_param
        shape = bottoms[0]
        top, _ = geometry.crop(shape, bottoms[1], axis_index(p.axis, shape), p.offset)
        buffers = [Buffer(name, len(shape), SETUP, INT) for name in ("offsets", "src_strides", "dest_strides")]
        return LayerInfo([top], [], count(top), buffers, bottom_diff=("always", "none"))

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
        p = l.param.crop_param
        rank = len(l.bottom_shapes[0])
        axis = axis_of(p.axis, rank)
        top, offsets = geometry.crop(l.bottom_shapes[0], l.bottom_shapes[1], axis, p.offset)
        starts = list(offsets[axis:])
        ends = [s + n for s, n in zip(starts, top[axis:])]
        g.op1("Slice", [l.bottoms[0], g.ints(f"{l.name}/starts", starts), g.ints(f"{l.name}/ends", ends),
                        g.ints(f"{l.name}/axes", list(range(axis, rank)))], l.name, l.tops[0])

    pytorch = NOT_IN_PYTORCH


class Tile(LayerType):
    """One axis repeated ``tiles`` times (tile_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """tile_layer.cpp: axis ``axis`` repeated ``tiles`` times."""
        shape = list(bottoms[0])
        axis = axis_index(layer.tile_param.axis, bottoms[0])
        shape[axis] *= layer.tile_param.tiles
        return LayerInfo([tuple(shape)], [], count(shape))

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
        p = l.param.tile_param
        rank = len(l.bottom_shapes[0])
        repeats = [1] * rank
        repeats[axis_of(p.axis, rank)] = p.tiles
        g.op1("Tile", [l.bottoms[0], g.ints(f"{l.name}/repeats", repeats)], l.name, l.tops[0])

    pytorch = NOT_IN_PYTORCH


class Reduction(LayerType):
    """A sum, absolute sum, sum of squares or mean over the axes from ``axis`` (reduction_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """reduction_layer.cpp: keeps the axes before ``axis`` (0 by default); SUM and MEAN set
        ``sum_multiplier_`` (the reduced size) in Reshape."""
        p = layer.reduction_param
        shape = bottoms[0]
        axis = axis_index(p.axis, shape)
        buffers = [Buffer("sum_multiplier", count(shape[axis:]), SETUP)] if p.operation in (1, 4) else []
        return LayerInfo([tuple(shape[:axis])], [], count(shape), buffers)

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
        p = l.param.reduction_param
        rank = len(l.bottom_shapes[0])
        axis = axis_of(p.axis, rank)
        op = REDUCTIONS[p.operation]
        if p.coeff == 1:
            g.reduce(op, l.bottoms[0], list(range(axis, rank)), l.name, False, l.tops[0])
            return
        reduced = g.reduce(op, l.bottoms[0], list(range(axis, rank)), l.name, False)
        g.op1("Mul", [reduced, g.const(f"{l.name}/coeff", p.coeff)], l.name, l.tops[0])

    pytorch = NOT_IN_PYTORCH


class ArgMax(LayerType):
    """The indices (and values) of the top ``top_k`` (argmax_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """argmax_layer.cpp ``Reshape``: with ``axis``, that axis becomes ``top_k``; without, (N, 1 or 2,
        top_k) padded to at least 3 axes. No backward."""
        p = layer.argmax_param
        shape = bottoms[0]
        k = field_or(p, "top_k", 1)
        if p.HasField("axis"):
            top = list(shape)
            top[axis_index(p.axis, shape)] = k
        else:
            top = [1] * max(len(shape), 3)
            top[0], top[1], top[2] = shape[0], 2 if p.out_max_val else 1, k
        return LayerInfo([tuple(top)], [], count(shape), bottom_diff="none")

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
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
        index = g.op1("Cast", [index], l.name, to=g.FLOAT)
        if p.HasField("axis"):
            g.op1("Identity", [values if p.out_max_val else index], l.name, l.tops[0])
            return
        rows = g.op1("Concat", [index, values], l.name, axis=1) if p.out_max_val else index
        target = [0, 2 if p.out_max_val else 1, p.top_k] + [1] * (max(3, len(shape)) - 3)
        g.op1("Reshape", [rows, g.ints(f"{l.name}/shape", target)], l.name, l.tops[0])

    pytorch = NOT_IN_PYTORCH


class Filter(LayerType):
    """The items whose selector is non-zero (filter_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """filter_layer.cpp: how many items pass depends on the selector's values when Reshape runs;
        counted as if all pass (the most it can allocate). The selector gets no gradient."""
        tops = list(bottoms[:-1])
        return LayerInfo(tops, [], sum(count(t) for t in tops),
                         bottom_diff=tuple(["propagate"] * len(tops) + ["none"]))

    onnx = BY_VALUES
    pytorch = BY_VALUES


class Eltwise(LayerType):
    """Inputs combined element by element: PROD, SUM (with coefficients) or MAX (eltwise_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """eltwise_layer.cpp: MAX keeps ``max_idx_`` (ints, the input's size) from forward; SUM and
        PROD keep nothing (coefficients are a vector of the layer)."""
        blob = count(bottoms[0])
        buffers = [Buffer("max_idx", blob, FORWARD, INT)] if layer.eltwise_param.operation == 2 else []
        return LayerInfo([bottoms[0]], [], blob * max(len(bottoms) - 1, 1), buffers)

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
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

    @staticmethod
    def pytorch(l: Layer) -> TorchLayer:
        p = l.param.eltwise_param
        coeffs = [float(c) for c in p.coeff]
        if coeffs and p.operation != 1:
            raise l.refuse("Caffe takes coefficients for SUM only", to="PyTorch")
        if coeffs and len(coeffs) != len(l.bottoms):
            raise l.refuse(f"{len(coeffs)} coefficients for {len(l.bottoms)} bottoms", to="PyTorch")
        settings = f", coeffs={tuple(coeffs)}" if coeffs and set(coeffs) != {1.0} else ""
        return TorchLayer(f"Eltwise({OPERATIONS[p.operation]!r}{settings})", helpers=("Eltwise",))


class BatchReindex(LayerType):
    """Items of the first input picked by the second's indices (batch_reindex_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """batch_reindex_layer.cpp: the top has one item per index in bottom 1; indices get no gradient."""
        top = (bottoms[1][0],) + tuple(bottoms[0][1:])
        return LayerInfo([top], [], count(top), bottom_diff=("propagate", "none"))

    onnx = BY_VALUES
    pytorch = BY_VALUES


class Silence(LayerType):
    """Takes blobs and gives nothing, so Caffe does not print them (silence_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """silence_layer.cpp: no top; backward zeroes the gradients it is asked for."""
        return LayerInfo([])

    onnx = Omitted("computes nothing")
    pytorch = Omitted("computes nothing")


class Parameter(LayerType):
    """A learned blob as a top (parameter_layer.hpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """parameter_layer.hpp: the top shares the parameter blob's data and gradient."""
        shape = tuple(layer.parameter_param.shape.dim)
        return LayerInfo([shape], [shape], alias={0: INSIDE})

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
        g.op1("Identity", [g.const(f"{l.name}/value", l.blobs[0])], l.name, l.tops[0])

    pytorch = NOT_IN_PYTORCH
