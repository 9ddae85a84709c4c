"""Caffe's spatial arithmetic, in one place: how Convolution, Deconvolution, Im2col, Pooling, SPP
and Crop size their tops, and how they read their per-axis kernel, stride, pad and dilation.

The memory estimate (:mod:`caffetool.memory`) and the ONNX export (:mod:`caffetool.export`) both
need these sizes; each once kept its own copy, and the copies drifted (a pooling padded on one axis
only). Every rule follows the BVLC Caffe source the engine builds (1.0 as of commit 99bd997, whose
``src/caffe/layers/*.cpp`` named below are unchanged at BVLC master), including its integer
arithmetic: C++ ``int`` division truncates toward zero, which Python's ``//`` does not.

Limits: sizes only. The checks Caffe makes before it sizes anything (``CHECK`` in ``LayerSetUp``:
pad below kernel for pooling, a crop inside its input, global pooling without pad or stride) are
not repeated: a net that fails them does not build in Caffe, and its sizes here mean nothing. The
only refusals (:class:`~caffetool.errors.NetError`, in Caffe's words) are fields that cannot be read
into a window at all: a repeated field given neither once nor once per axis, ``_h``/``_w`` on other
than two spatial axes, crop offsets not one per axis from ``axis`` on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from caffetool.errors import NetError

CEIL = 0  # PoolingParameter.RoundMode: CEIL (the default), FLOOR
Sizes = tuple[int, ...]


@dataclass(frozen=True)
class Window:
    """One layer's sliding window, one value per spatial axis, as the layer holds it after
    ``LayerSetUp`` (``kernel_shape_``, ``stride_``, ``pad_``, ``dilation_``)."""

    kernel: Sizes
    stride: Sizes
    pad: Sizes
    dilation: Sizes


# --- reading a layer's window ---------------------------------------------------------------------

def conv_window(p: Any, spatial: int) -> Window:
    """A ConvolutionParameter's window over ``spatial`` axes, as base_conv_layer.cpp (and
    im2col_layer.cpp, which repeats it) ``LayerSetUp`` reads it: ``kernel_h``/``kernel_w`` when
    either is set (2-D only), else the repeated ``kernel_size`` once for every axis or once per
    axis; the same for stride (default 1) and pad (default 0); dilation has no ``_h``/``_w``
    (default 1)."""
    return Window(kernel=_conv_field(p, "kernel_size", "kernel", spatial, None),
                  stride=_conv_field(p, "stride", "stride", spatial, 1),
                  pad=_conv_field(p, "pad", "pad", spatial, 0),
                  dilation=_repeated(p.dilation, "dilation", spatial, 1))


def _conv_field(p: Any, repeated: str, pair: str, spatial: int, default: int | None) -> Sizes:
    """``has_<pair>_h() || has_<pair>_w()`` wins, as in base_conv_layer.cpp; an unset half is 0."""
    if p.HasField(f"{pair}_h") or p.HasField(f"{pair}_w"):
        if spatial != 2:
            raise NetError(f"{pair}_h & {pair}_w can only be used for 2D convolution (this one has {spatial} "
                           "spatial axes)")
        return int(getattr(p, f"{pair}_h")), int(getattr(p, f"{pair}_w"))
    return _repeated(getattr(p, repeated), repeated, spatial, default)


def _repeated(values: Sequence[int], name: str, spatial: int, default: int | None) -> Sizes:
    """A repeated field given once (every axis), once per axis, or never (the default; the kernel
    has none)."""
    given = [int(v) for v in values]
    if len(given) == 1:
        return (given[0],) * spatial
    if given and len(given) == spatial:
        return tuple(given)
    if not given and default is not None:
        return (default,) * spatial
    raise NetError(f"{name} must be specified once, or once per spatial dimension ({name} specified "
                   f"{len(given)} times; {spatial} spatial dims)")


def pool_window(p: Any, size: Sequence[int]) -> Window:
    """A PoolingParameter's 2-D window over an input of ``size`` (height, width), as
    pooling_layer.cpp ``LayerSetUp``/``Reshape`` read it: ``global_pooling`` takes the whole input
    as its kernel; else ``kernel_size`` when set, otherwise ``kernel_h``/``kernel_w``; pad and
    stride are ``pad``/``stride`` unless ``pad_h``/``stride_h`` is set. Pooling never dilates."""
    if p.global_pooling:
        kernel = (int(size[0]), int(size[1]))
    elif p.HasField("kernel_size"):
        kernel = (int(p.kernel_size),) * 2
    else:
        kernel = (int(p.kernel_h), int(p.kernel_w))
    pad = (int(p.pad_h), int(p.pad_w)) if p.HasField("pad_h") else (int(p.pad),) * 2
    stride = (int(p.stride_h), int(p.stride_w)) if p.HasField("stride_h") else (int(p.stride),) * 2
    return Window(kernel, stride, pad, (1, 1))


def rounds_up(p: Any) -> bool:
    """A PoolingParameter's ``round_mode`` is CEIL (the default; a caffe.proto older than the field,
    BVLC 1.0's release, always rounds up)."""
    return getattr(p, "round_mode", CEIL) == CEIL


def spp_window(level: int, size: Sequence[int]) -> Window:
    """The window of pyramid ``level``'s inner Pooling layer over an input of ``size`` (height,
    width): spp_layer.cpp ``GetPoolingParam`` splits each axis into ``2^level`` bins, a kernel
    (and stride) of ``ceil(size / bins)``, and pads half the shortfall, rounded up, on each side."""
    bins = 2 ** level
    kernel = tuple(-(-n // bins) for n in size)
    pad = tuple((k * bins - n + 1) // 2 for k, n in zip(kernel, size))
    return Window(kernel, kernel, pad, (1, 1))


# --- output sizes ---------------------------------------------------------------------------------

def extent(kernel: int, dilation: int) -> int:
    """The span a dilated kernel covers (``kernel_extent`` in conv_layer.cpp)."""
    return dilation * (kernel - 1) + 1


def _c_div(a: int, b: int) -> int:
    """C++ integer division by a positive ``b``: it truncates toward zero."""
    return a // b if a >= 0 else -(-a // b)


def conv_size(size: int, kernel: int, stride: int, pad: int, dilation: int = 1) -> int:
    """One axis of a convolution's (or Im2col's) output: conv_layer.cpp ``compute_output_shape``,
    ``(size + 2 pad - extent) / stride + 1`` in C++ ints. The division truncates toward zero, so a
    kernel that overhangs the padded input by less than the stride still gives one output (its
    missing rows read as zeros, as im2col.cpp reads any position outside the input)."""
    return _c_div(size + 2 * pad - extent(kernel, dilation), stride) + 1


def deconv_size(size: int, kernel: int, stride: int, pad: int, dilation: int = 1) -> int:
    """One axis of a deconvolution's output: deconv_layer.cpp ``compute_output_shape``, the
    convolution's size rule solved for its input, ``stride (size - 1) + extent - 2 pad``."""
    return stride * (size - 1) + extent(kernel, dilation) - 2 * pad


def pooled_size(size: int, kernel: int, stride: int, pad: int, ceil: bool, padded: bool) -> int:
    """One axis of a pooling's output: pooling_layer.cpp ``Reshape``. The windows that fit, plus
    one that overhangs when rounding up (``round_mode`` CEIL); then, when ``padded`` (either axis
    has a pad: Caffe tests ``pad_h_ || pad_w_``, not this axis's own), a last window that would
    start in the padding rather than in the image is dropped.

    Caffe divides in ``float``; for sizes below 2^24 that is exact, so integer arithmetic here gives
    the same ceiling and floor (negative spans too: a kernel longer than the padded input)."""
    span = size + 2 * pad - kernel
    out = (-(-span // stride) if ceil else span // stride) + 1
    if padded and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def conv_output(size: Sequence[int], w: Window) -> Sizes:
    """A convolution's (or Im2col's) spatial output for a spatial input of ``size``."""
    return tuple(conv_size(n, k, s, p, d) for n, k, s, p, d in zip(size, w.kernel, w.stride, w.pad, w.dilation))


def deconv_output(size: Sequence[int], w: Window) -> Sizes:
    """A deconvolution's spatial output for a spatial input of ``size``."""
    return tuple(deconv_size(n, k, s, p, d) for n, k, s, p, d in zip(size, w.kernel, w.stride, w.pad, w.dilation))


def pool_output(size: Sequence[int], w: Window, ceil: bool = True) -> Sizes:
    """A pooling's (height, width) for an input of ``size``; a pad on either axis lets Caffe drop
    a last window on both (:func:`pooled_size`)."""
    padded = any(w.pad)
    return tuple(pooled_size(n, k, s, p, ceil, padded) for n, k, s, p in zip(size, w.kernel, w.stride, w.pad))


def is_1x1(w: Window) -> bool:
    """base_conv_layer.cpp ``is_1x1_``: a kernel of 1, stride 1 and no pad on every axis, where
    im2col is the identity and no column buffer is needed. (Dilation does not enter.)"""
    return all(k == 1 and s == 1 and p == 0 for k, s, p in zip(w.kernel, w.stride, w.pad))


def crop(shape: Sequence[int], like: Sequence[int], axis: int, offset: Sequence[int]) -> tuple[Sizes, Sizes]:
    """Crop's top shape and per-axis offsets: crop_layer.cpp ``Reshape``. Axes before ``axis``
    (already canonical, not negative) are kept whole at offset 0; from ``axis`` on each takes the
    second bottom's size, at the one ``offset`` given for all, the one given for it, or 0."""
    if len(offset) > 1 and axis + len(offset) != len(shape):
        raise NetError(f"number of offset values specified must be equal to the number of dimensions following "
                       f"axis ({len(offset)} offsets, {len(shape) - axis} dimensions from axis {axis})")
    top, starts = [], []
    for i, n in enumerate(shape):
        if i < axis:
            top.append(int(n))
            starts.append(0)
            continue
        top.append(int(like[i]))
        starts.append(int(offset[0]) if len(offset) == 1 else int(offset[i - axis]) if len(offset) > 1 else 0)
    return tuple(top), tuple(starts)
