"""Data layers: the shapes of their tops and where those tops' memory lives.

* Data, ImageData, WindowData (base_data_layer.cpp): ``data_param.prefetch`` batches (4 by default)
  allocated before the prefetch thread starts; each forward points the tops into one of them
  (``set_cpu_data``), so the tops own nothing.
* DummyData (dummy_data_layer.cpp): its tops, filled at set-up (one shape may serve every top).
* Input (input_layer.cpp): its tops, allocated when first read.
* MemoryData (memory_data_layer.cpp): the tops point into the caller's arrays (``Reset``).
* HDF5Data (hdf5_data_layer.cpp): the tops, plus a whole HDF5 file read into memory — the file's
  size is not known here, so the estimate is a lower bound.

Images of unknown size (Data, ImageData, WindowData, HDF5Data without a file to read) take
``--input-shape``; ``crop_size`` wins over it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from caffetool.errors import ConfigError
from caffetool.memory.info import Shape
from caffetool.nets import state

PREFETCHING = {"Data": "data_param", "ImageData": "image_data_param", "WindowData": "window_data_param"}
DATA_LAYERS = {"Input", "DummyData", "MemoryData", "HDF5Data", *PREFETCHING}


@dataclass
class DataTops:
    shapes: list[Shape]
    prefetch: int = 0  # batches held by a prefetching layer
    owned: bool = True  # whether the tops own their memory (False: prefetch batches or the caller's arrays)
    not_counted: str = ""  # what the layer holds that is not counted (the estimate is then a lower bound)


def _batch(shape: Shape, batch: int | None) -> Shape:
    return ((batch,) + tuple(shape[1:])) if batch and shape else tuple(shape)


def data_tops(layer: Any, input_shape: Shape | None, batch: int | None, where: str) -> DataTops:
    """The tops of data layer ``layer`` (a LayerParameter); ``batch`` overrides its own batch size."""
    kind = layer.type
    if kind == "Input":
        dims = [tuple(s.dim) for s in layer.input_param.shape]
        dims = dims + [dims[-1]] * (len(layer.top) - len(dims))
        return DataTops([_batch(d, batch) for d in dims])
    if kind == "DummyData":
        p = layer.dummy_data_param
        dims = [tuple(s.dim) for s in p.shape] or [
            (p.num[i], p.channels[i], p.height[i], p.width[i]) for i in range(len(p.num))]
        dims = dims * len(layer.top) if len(dims) == 1 else dims
        return DataTops([_batch(d, batch) for d in dims[: len(layer.top)]])
    if kind == "MemoryData":
        p = layer.memory_data_param
        n = batch or p.batch_size
        return DataTops([(n, p.channels, p.height, p.width), (n,)][: len(layer.top)], owned=False)
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


def set_batch(net: Any, batch: int, phase: int = state.TRAIN) -> None:
    """Give the data layers of ``net`` (a NetParameter, changed in place) that run in ``phase`` the
    batch ``batch``, and the net's own inputs too (``input_shape``, ``input_dim``): ``--batch-size``
    as a file would say it. A layer without a phase rule (a deploy net's ``Input``) is in the TRAIN
    and the TEST net alike, so it takes the batch in both, as it does in the engine."""
    for layer in net.layer:
        if not state.included(layer, phase):
            continue
        shapes = (list(layer.input_param.shape) if layer.type == "Input" else
                  list(layer.dummy_data_param.shape) if layer.type == "DummyData" else [])
        for shape in shapes:
            if shape.dim:
                shape.dim[0] = batch
        if layer.type == "DummyData":
            layer.dummy_data_param.num[:] = [batch] * len(layer.dummy_data_param.num)
        for param in (*PREFETCHING.values(), "hdf5_data_param", "memory_data_param"):
            if layer.HasField(param):
                getattr(layer, param).batch_size = batch
    for shape in net.input_shape:
        if shape.dim:
            shape.dim[0] = batch
    for i in range(0, len(net.input_dim), 4):
        net.input_dim[i] = batch
