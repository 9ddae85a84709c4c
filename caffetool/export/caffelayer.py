"""A Caffe layer as the converters see it, and how Caffe reads axes and per-axis parameters."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from caffetool.errors import ExportError


@dataclass
class Layer:
    param: Any  # the LayerParameter
    bottoms: list[str]  # ONNX names of the inputs
    tops: list[str]  # ONNX names the layer writes
    bottom_shapes: list[tuple[int, ...]]
    top_shapes: list[tuple[int, ...]]
    blobs: list[np.ndarray]  # learned blobs, as pycaffe holds them

    @property
    def name(self) -> str:
        return self.param.name

    def refuse(self, why: str, to: str = "") -> ExportError:
        """The error that refuses this layer, by name and type, with the reason (``to``: the format)."""
        return ExportError(f"layer {self.name!r} ({self.param.type}) cannot be exported{' to ' + to if to else ''}: "
                           f"{why}")


def kept_layers(net_param: Any, net: Any) -> tuple[list[str], list[Any]]:
    """(pycaffe's layer names in order, the deploy net's layers Caffe kept, in order): ``caffe.Net``
    applies the ``include``/``exclude`` rules and inserts Split layers, which the exports leave out."""
    order = list(net._layer_names)
    kept = [layer for layer in net_param.layer if layer.name in set(order)]
    twice = [n for n, c in Counter(layer.name for layer in kept).items() if c > 1]
    if twice:
        raise ExportError(f"two layers are named {twice[0]!r}; give each layer its own name")
    return order, kept


def axis_of(axis: int, rank: int) -> int:
    """Caffe's ``CanonicalAxisIndex``."""
    return axis + rank if axis < 0 else axis
