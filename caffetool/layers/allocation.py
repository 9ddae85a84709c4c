"""What a layer type's memory rule returns: its tops' shapes, parameters, compute and the memory it owns.

Written by every ``memory`` of the layer catalogue (:mod:`caffetool.layers`) and read by
:mod:`caffetool.memory.netgraph` and :mod:`caffetool.memory.estimator`.
Caffe's ``SyncedMemory`` allocates on first touch, so every buffer carries the step that first
touches it; a buffer no step touches costs nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

Shape = tuple[int, ...]

SETUP, FORWARD, BACKWARD = "setup", "forward", "backward"
PROPAGATE = "propagate"  # backward, only when a gradient goes to the layer's input
NEVER = "never"  # reshaped (a Blob object exists) but never touched: holds no memory
FLOAT, INT = 4, -4  # a float scales with --dtype; an int (argmax, masks, offsets) never shrinks


@dataclass
class Buffer:
    """A blob the layer owns (``name``: its member in the C++ class), ``count`` elements."""

    name: str
    count: int
    when: str  # SETUP, FORWARD, BACKWARD, PROPAGATE; "gpu-"/"cpu-" first: only that device's code
    itemsize: int = FLOAT
    param: int | None = None  # exists only while this parameter learns (``lr_mult`` != 0)


@dataclass
class LayerInfo:
    """One layer as Caffe sets it up.

    ``bottom_diff``: when back-propagating, which bottoms get a gradient blob — ``propagate``
    (those Net::Init marks), ``always`` (the layer takes ``mutable_cpu_diff`` before checking
    ``propagate_down``), ``first`` (only bottom 0, always) or ``none``.
    ``alias``: top index -> bottom index whose data and gradient the top shares (``ShareData`` and
    ``ShareDiff``: Flatten, Reshape, a one-input Concat); ``INSIDE`` means the top shares an inner
    net's blob, counted with that net.
    ``inner``: a NetParameter Caffe builds and runs inside the layer (RNN, LSTM), with ``inner_external``
    the names of its blobs that share the layer's bottoms.
    ``cudnn``: with ``--cudnn`` on a GPU, the cuDNN class Caffe's layer factory picks instead, and
    how that class differs from Caffe's own: ``cudnn_unused`` names the buffers it never puts on the
    device, ``cudnn_buffers`` are its own, ``cudnn_bottom_diff`` its gradient policy (None: the same),
    ``cudnn_work`` a convolution's modelled workspace per direction (:mod:`caffetool.memory.device`).
    """

    tops: list[Shape]
    params: list[Shape] = field(default_factory=list)
    macc: int = 0
    buffers: list[Buffer] = field(default_factory=list)
    group: int = 1
    bottom_diff: str = "propagate"
    alias: dict[int, int] = field(default_factory=dict)
    inner: Any = None
    inner_external: tuple[str, ...] = ()
    inner_setup_diffs: tuple[str, ...] = ()  # inner blobs whose gradient the layer zeroes at set-up
    cudnn: str | None = None
    forward_diff: tuple[int, ...] = ()  # bottoms whose gradient blob the forward pass uses as scratch
    gpu_forward_diff: tuple[int, ...] = ()  # the same, only in ``Forward_gpu``
    conv_work: ConvWork | None = None  # a convolution's sizes for the OpenMP engine's scratch (memory.parallel)
    cudnn_unused: tuple[str, ...] = ()
    cudnn_buffers: list[Buffer] = field(default_factory=list)
    cudnn_bottom_diff: str | tuple[str, ...] | None = None
    # direction ("forward", "backward filter", "backward data") -> workspace bytes of the algorithms
    # cuDNN is expected to rank first, in order; the first within the limit is taken
    cudnn_work: dict[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class ConvWork:
    """What the engine's parallel convolution sizes its scratch from (elements, one image each)."""

    batch: int
    col: int  # columns of one image: ``col_buffer_``
    top: int  # one image's output: ``top_dim_``
    weights: int
    chunkable: bool  # 2-D, one group, not 1x1
    one_by_one: bool


INSIDE = -1


def count(shape: Sequence[int]) -> int:
    """Elements in a blob of ``shape`` (a scalar blob holds one)."""
    return math.prod(shape) if shape else 1


def axis_index(axis: int, shape: Shape) -> int:
    """Caffe's ``CanonicalAxisIndex``: a negative axis counts from the end."""
    return axis + len(shape) if axis < 0 else axis


def field_or(message: Any, name: str, default: Any) -> Any:
    """A proto field's value when set, else ``default`` (Caffe's own default may differ by layer)."""
    return getattr(message, name) if message.HasField(name) else default


def phase_of(layer: Any, phase: str) -> str:
    """The phase a layer runs in: its own ``phase`` field wins over the net's."""
    return ("train", "test")[layer.phase] if layer.HasField("phase") else phase


def in_place(layer: Any, top: int = 0, bottom: int = 0) -> bool:
    """Caffe computes in place when a top has the same name as the bottom at the same index."""
    return len(layer.top) > top and len(layer.bottom) > bottom and layer.top[top] == layer.bottom[bottom]
