"""The layers at a net's edges: data layers (their tops' shapes and where those tops' memory lives),
and the two that reach outside the net, HDF5Output and Python.

* Data, ImageData, WindowData (base_data_layer.cpp): ``data_param.prefetch`` batches (4 by default)
  allocated before the prefetch thread starts; each forward points the tops into one of them
  (``set_cpu_data``), so the tops own nothing.
* DummyData (dummy_data_layer.cpp): its tops, filled at set-up (one shape may serve every top).
* Input (input_layer.cpp): its tops, allocated when first read.
* MemoryData (memory_data_layer.cpp): the tops point into the caller's arrays (``Reset``).
* HDF5Data (hdf5_data_layer.cpp): the tops, plus a whole HDF5 file read into memory — the file's
  size is not known here, so the estimate is a lower bound.

Images of unknown size (Data, ImageData, WindowData, HDF5Data without a file to read) take
``--input-shape``; ``crop_size`` wins over it. The exports take the deploy net, whose ``Input`` is the
model's input: every other data layer is refused with the way out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from caffetool.errors import ConfigError
from caffetool.layers.allocation import Shape
from caffetool.layers.entry import LayerType, Omitted, Refused, Sourced

PREFETCHING = {"Data": "data_param", "ImageData": "image_data_param", "WindowData": "window_data_param"}
TRAINING_DATA = Refused("reads training data: export the deploy net (--deploy FILE), whose Input layer takes the "
                        "images")
THE_INPUT = Omitted("the model's input")


@dataclass
class DataTops:
    shapes: list[Shape]
    prefetch: int = 0  # batches held by a prefetching layer
    owned: bool = True  # whether the tops own their memory (False: prefetch batches or the caller's arrays)
    not_counted: str = ""  # what the layer holds that is not counted (the estimate is then a lower bound)


def _batch(shape: Shape, batch: int | None) -> Shape:
    return ((batch,) + tuple(shape[1:])) if batch and shape else tuple(shape)


def input_tops(layer: Any, input_shape: Shape | None, batch: int | None, where: str) -> DataTops:
    """input_layer.cpp: one shape per top, the last repeated for the tops after it."""
    dims = [tuple(s.dim) for s in layer.input_param.shape]
    dims = dims + [dims[-1]] * (len(layer.top) - len(dims))
    return DataTops([_batch(d, batch) for d in dims])


def dummy_tops(layer: Any, input_shape: Shape | None, batch: int | None, where: str) -> DataTops:
    """dummy_data_layer.cpp: ``shape`` (or the legacy num/channels/height/width), one for every top."""
    p = layer.dummy_data_param
    dims = [tuple(s.dim) for s in p.shape] or [
        (p.num[i], p.channels[i], p.height[i], p.width[i]) for i in range(len(p.num))]
    dims = dims * len(layer.top) if len(dims) == 1 else dims
    return DataTops([_batch(d, batch) for d in dims[: len(layer.top)]])


def memory_data_tops(layer: Any, input_shape: Shape | None, batch: int | None, where: str) -> DataTops:
    """memory_data_layer.cpp: data and labels in the caller's arrays."""
    p = layer.memory_data_param
    n = batch or p.batch_size
    return DataTops([(n, p.channels, p.height, p.width), (n,)][: len(layer.top)], owned=False)


def image_tops(layer: Any, input_shape: Shape | None, batch: int | None, where: str) -> DataTops:
    """Data, ImageData, WindowData and HDF5Data: images of ``--input-shape`` (ImageData's
    ``new_height``/``new_width``, a ``crop_size`` wins), and labels."""
    kind = layer.type
    param = getattr(layer, PREFETCHING.get(kind, "hdf5_data_param"))
    n = batch or param.batch_size
    if input_shape is None:
        raise ConfigError(f"{where}: {kind} layer {layer.name!r} reads images of unknown shape; "
                          "give --input-shape C,H,W")
    c, h, w = input_shape
    crop = layer.transform_param.crop_size
    if kind == "ImageData" and not crop and param.new_height and param.new_width:
        h, w = param.new_height, param.new_width
    if crop:
        h = w = crop
    tops = [(n, c, h, w), (n,)][: len(layer.top)]
    if kind == "HDF5Data":
        return DataTops(tops, not_counted="the HDF5 file it holds in memory")
    prefetch = layer.data_param.prefetch if layer.data_param.HasField("prefetch") else 4
    return DataTops(tops, prefetch=prefetch, owned=False)


class Input(LayerType):
    """The net's input blobs, given by whoever runs it (input_layer.cpp)."""

    memory = Sourced(input_tops)
    onnx = THE_INPUT
    pytorch = THE_INPUT


class DummyData(LayerType):
    """Blobs filled at set-up: constants, or values drawn once (dummy_data_layer.cpp)."""

    memory = Sourced(dummy_tops)
    onnx = TRAINING_DATA
    pytorch = TRAINING_DATA


class MemoryData(LayerType):
    """Batches from arrays the caller hands in (memory_data_layer.cpp)."""

    memory = Sourced(memory_data_tops)
    onnx = TRAINING_DATA
    pytorch = TRAINING_DATA


class Data(LayerType):
    """Batches of Datum records from LMDB or LevelDB, prefetched (data_layer.cpp)."""

    memory = Sourced(image_tops)
    onnx = TRAINING_DATA
    pytorch = TRAINING_DATA


class ImageData(LayerType):
    """Batches of image files listed in a text file, prefetched (image_data_layer.cpp)."""

    memory = Sourced(image_tops)
    onnx = TRAINING_DATA
    pytorch = TRAINING_DATA


class WindowData(LayerType):
    """Batches of windows cut from images, as R-CNN trains on them, prefetched (window_data_layer.cpp)."""

    memory = Sourced(image_tops)
    onnx = TRAINING_DATA
    pytorch = TRAINING_DATA


class HDF5Data(LayerType):
    """Batches from HDF5 files listed in a text file (hdf5_data_layer.cpp)."""

    memory = Sourced(image_tops)
    onnx = TRAINING_DATA
    pytorch = TRAINING_DATA


class HDF5Output(LayerType):
    """Writes its inputs to an HDF5 file (hdf5_output_layer.cpp)."""

    memory = Refused("writes files; the estimate does not model it")
    onnx = Refused("writes files; it computes nothing to export")
    pytorch = Refused("writes files; it computes nothing to export")


class Python(LayerType):
    """A layer whose forward and backward are the user's Python code (python_layer.hpp)."""

    memory = Refused("runs the user's Python code, whose blobs only that code knows")
    onnx = Refused("runs Python code, which an ONNX model cannot hold")
    pytorch = Refused("runs Python code, which an ONNX model cannot hold")
