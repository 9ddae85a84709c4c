"""A Caffe deploy net with its weights, as one ONNX model: the layers in Caffe's order, each as the
operators of its type's ``onnx`` in the layer catalogue (:mod:`caffetool.layers`), with the weights
pycaffe loaded.

The layers are those Caffe itself kept (``caffe.Net`` applies the ``include``/``exclude`` rules; the
Split layers it inserts are left out: ONNX tensors fan out by themselves), and the shapes are the
ones Caffe gave each blob. The model's inputs and outputs carry the deploy net's blob names; with a
dynamic batch their first dimension is ``N``. Alongside the model, :class:`Converted` lists for
every layer which Caffe blob each of its outputs is, which is what :mod:`.verify` compares.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from caffetool.errors import ExportError
from caffetool.layers import catalogue
from caffetool.layers.caffelayer import Layer
from caffetool.layers.onnxgraph import OnnxGraph, tensor

DYNAMIC_BATCH = "N"
MIN_OPSET = 13  # Softmax over one axis, Split sizes, Unsqueeze axes and Clip bounds as inputs


@dataclass(frozen=True)
class Compared:
    """One Caffe layer's outputs: (Caffe blob, ONNX tensor) pairs, read after pycaffe layer ``index``."""

    layer: str
    type: str
    index: int
    outputs: tuple[tuple[str, str], ...]
    cut: int | None = None  # a DetectionOutput's keep_top_k: the rows per image past which Caffe drops boxes


def cut_of(layer: Any) -> int | None:
    """The rows per image a DetectionOutput layer keeps at most (``keep_top_k``), None for other layers
    and for one that keeps all."""
    if layer.type != "DetectionOutput":
        return None
    keep = layer.detection_output_param.keep_top_k
    return keep if keep > -1 else None


@dataclass
class Converted:
    model: onnx.ModelProto
    inputs: dict[str, tuple[int, ...]]  # graph input -> Caffe's shape of one item (no batch)
    outputs: list[str]
    compared: list[Compared]


def refusals(net_param: Any) -> None:
    """Refuse, before anything is built, the first layer no ONNX operator can express: by name and reason."""
    for layer in net_param.layer:
        if (why := catalogue.refusal(layer.type, "onnx")) is not None:
            raise ExportError(f"layer {layer.name!r} ({layer.type}) cannot be exported: {why}")
        if not catalogue.covered(layer.type, "onnx"):
            raise ExportError(f"layer {layer.name!r} has type {layer.type!r}, which is not a BVLC Caffe 1.0 layer "
                              "the export covers (docs/reference/layers.md lists the types each export covers)")


def kept_layers(net_param: Any, net: Any) -> tuple[list[str], list[Any]]:
    """(pycaffe's layer names in order, the deploy net's layers Caffe kept, in order): ``caffe.Net``
    applies the ``include``/``exclude`` rules and inserts Split layers, which the exports leave out."""
    order = list(net._layer_names)
    kept = [layer for layer in net_param.layer if layer.name in set(order)]
    twice = [n for n, c in Counter(layer.name for layer in kept).items() if c > 1]
    if twice:
        raise ExportError(f"two layers are named {twice[0]!r}; give each layer its own name")
    return order, kept


def convert(net_param: Any, net: Any, opset: int, batch: int | None, name: str) -> Converted:
    """``net_param`` (the deploy NetParameter) as ONNX, with the weights and shapes of ``net`` (the
    pycaffe net built from it); ``batch`` None makes the batch dimension dynamic."""
    refusals(net_param)
    order, kept = kept_layers(net_param, net)
    g = OnnxGraph(opset)
    first = batch if batch is not None else DYNAMIC_BATCH
    inputs: dict[str, tuple[int, ...]] = {}
    for blob in [*net_param.input, *(t for layer in kept if layer.type == "Input" for t in layer.top)]:
        inputs[g.claim(blob)] = tuple(net.blobs[blob].data.shape[1:])
    final = _final_names(kept, inputs)
    for blob in final.values():
        g.claim(blob)
    current = {blob: blob for blob in inputs}
    learned = net.params  # pycaffe builds this mapping on each access
    compared = []
    for layer in kept:
        if catalogue.omitted(layer.type, "onnx"):
            continue
        missing = [b for b in layer.bottom if b not in current]
        if missing:
            raise ExportError(f"layer {layer.name!r} reads {missing[0]!r}, which no layer before it writes")
        tops = [final[(layer.name, t)] for t in layer.top]
        params = [np.array(b.data, np.float32) for b in learned[layer.name]] if layer.name in learned else []
        item = Layer(layer, [current[b] for b in layer.bottom], tops,
                            [tuple(net.blobs[b].data.shape) for b in layer.bottom],
                            [tuple(net.blobs[t].data.shape) for t in layer.top], params)
        catalogue.translation(layer.type, "onnx")(g, item)
        current.update(zip(layer.top, tops))
        compared.append(Compared(layer.name, layer.type, order.index(layer.name), tuple(zip(layer.top, tops)),
                                 cut_of(layer)))
    outputs = [current[blob] for blob in net.outputs if blob in current]
    graph_inputs = [tensor(blob, [first, *shape]) for blob, shape in inputs.items()]
    model = g.model(graph_inputs, [tensor(blob, None) for blob in outputs], name,
                    f"{name}, exported from Caffe by caffetool")
    return Converted(_with_output_shapes(model), inputs, outputs, compared)


def _final_names(kept: list[Any], inputs: dict) -> dict[tuple[str, str], str]:
    """(layer, top) -> ONNX name: the blob's own name for the last layer writing it (unless it is a
    graph input), ``BLOB/LAYER`` for earlier in-place versions."""
    last = {}
    for layer in kept:
        for top in layer.top:
            last[top] = layer.name
    return {(layer.name, top): top if last[top] == layer.name and top not in inputs else f"{top}/{layer.name}"
            for layer in kept for top in layer.top}


def _with_output_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """The outputs' shapes as ONNX's shape inference gives them (the batch symbolic where it is)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.output]}
    for output in model.graph.output:
        found = shapes.get(output.name)
        if found is not None and found.type.tensor_type.HasField("shape"):
            output.type.CopyFrom(found.type)
    return model
