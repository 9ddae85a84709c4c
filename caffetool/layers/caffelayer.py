"""A Caffe layer as the catalogue's translations see it (ONNX's and PyTorch's), and how Caffe reads axes."""

from __future__ import annotations

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


def axis_of(axis: int, rank: int) -> int:
    """Caffe's ``CanonicalAxisIndex``."""
    return axis + rank if axis < 0 else axis
