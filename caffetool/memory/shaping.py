"""Rules for layers that route, reshape or combine blobs: Concat, Slice, Split, Flatten, Reshape,
Crop, Tile, Reduction, ArgMax, Filter, Eltwise, BatchReindex, Silence, Parameter.

Several of them own no memory at all: Flatten and Reshape (``ShareData`` + ``ShareDiff`` with the
bottom), a Concat of one input or a Slice into one output, and Split's tops (shared data, own
gradients — see :mod:`caffetool.memory.netgraph`). Sources: BVLC Caffe 1.0
``src/caffe/layers/<name>_layer.cpp``.
"""

from __future__ import annotations

from typing import Any

from caffetool.memory.info import FORWARD, INSIDE, INT, SETUP, Buffer, LayerInfo, Shape, axis_index, count, field_or
from caffetool.nets import geometry


def _concat_axis(p: Any, shape: Shape) -> int:
    """``concat_dim`` (legacy) wins when set, as in concat_layer.cpp."""
    return p.concat_dim if p.HasField("concat_dim") else axis_index(p.axis, shape)


def concat(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """concat_layer.cpp: one input is shared (``ShareData``/``ShareDiff``), several are copied."""
    axis = _concat_axis(layer.concat_param, bottoms[0])
    top = list(bottoms[0])
    top[axis] = sum(b[axis] for b in bottoms)
    return LayerInfo([tuple(top)], alias={0: 0} if len(bottoms) == 1 else {})


def slice_(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """slice_layer.cpp: at ``slice_point``s or in equal parts; one output shares the input."""
    p = layer.slice_param
    shape = bottoms[0]
    axis = p.slice_dim if p.HasField("slice_dim") else axis_index(p.axis, shape)
    tops = max(len(layer.top), 1)
    if p.slice_point:
        points = [0, *p.slice_point, shape[axis]]
        sizes = [b - a for a, b in zip(points, points[1:])]
    else:
        sizes = [shape[axis] // tops] * tops
    out = [tuple(shape[:axis]) + (s,) + tuple(shape[axis + 1:]) for s in sizes]
    return LayerInfo(out, alias={0: 0} if tops == 1 else {})


def split(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """split_layer.cpp: every top shares the bottom's data (``ShareData`` in forward)."""
    return LayerInfo([bottoms[0]] * len(layer.top))


def flatten(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """flatten_layer.cpp: axes ``axis``..``end_axis`` merged; data and gradient shared."""
    p = layer.flatten_param
    shape = bottoms[0]
    start, end = axis_index(p.axis, shape), axis_index(p.end_axis, shape)
    top = tuple(shape[:start]) + (count(shape[start:end + 1]),) + tuple(shape[end + 1:])
    return LayerInfo([top], alias={0: 0})


def reshape(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
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


def crop(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """crop_layer.cpp: bottom 0 cut to bottom 1's size from ``axis`` on; ``offsets``,
    ``src_strides_`` and ``dest_strides_`` (ints, one per axis) set in Reshape; backward takes bottom
    0's gradient unconditionally (line 135) and never gives bottom 1 one."""
    p = layer.crop_param
    shape = bottoms[0]
    top, _ = geometry.crop(shape, bottoms[1], axis_index(p.axis, shape), p.offset)
    buffers = [Buffer(name, len(shape), SETUP, INT) for name in ("offsets", "src_strides", "dest_strides")]
    return LayerInfo([top], [], count(top), buffers, bottom_diff=("always", "none"))


def tile(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """tile_layer.cpp: axis ``axis`` repeated ``tiles`` times."""
    shape = list(bottoms[0])
    axis = axis_index(layer.tile_param.axis, bottoms[0])
    shape[axis] *= layer.tile_param.tiles
    return LayerInfo([tuple(shape)], [], count(shape))


def reduction(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """reduction_layer.cpp: keeps the axes before ``axis`` (0 by default); SUM and MEAN set
    ``sum_multiplier_`` (the reduced size) in Reshape."""
    p = layer.reduction_param
    shape = bottoms[0]
    axis = axis_index(p.axis, shape)
    buffers = [Buffer("sum_multiplier", count(shape[axis:]), SETUP)] if p.operation in (1, 4) else []
    return LayerInfo([tuple(shape[:axis])], [], count(shape), buffers)


def argmax(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
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


def filter_(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """filter_layer.cpp: how many items pass depends on the selector's values when Reshape runs;
    counted as if all pass (the most it can allocate). The selector gets no gradient."""
    tops = list(bottoms[:-1])
    return LayerInfo(tops, [], sum(count(t) for t in tops),
                     bottom_diff=tuple(["propagate"] * len(tops) + ["none"]))


def eltwise(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """eltwise_layer.cpp: MAX keeps ``max_idx_`` (ints, the input's size) from forward; SUM and
    PROD keep nothing (coefficients are a vector of the layer)."""
    blob = count(bottoms[0])
    buffers = [Buffer("max_idx", blob, FORWARD, INT)] if layer.eltwise_param.operation == 2 else []
    return LayerInfo([bottoms[0]], [], blob * max(len(bottoms) - 1, 1), buffers)


def batch_reindex(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """batch_reindex_layer.cpp: the top has one item per index in bottom 1; indices get no gradient."""
    top = (bottoms[1][0],) + tuple(bottoms[0][1:])
    return LayerInfo([top], [], count(top), bottom_diff=("propagate", "none"))


def silence(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """silence_layer.cpp: no top; backward zeroes the gradients it is asked for."""
    return LayerInfo([])


def parameter(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """parameter_layer.hpp: the top shares the parameter blob's data and gradient."""
    shape = tuple(layer.parameter_param.shape.dim)
    return LayerInfo([shape], [shape], alias={0: INSIDE})
