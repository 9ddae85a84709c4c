"""An ONNX graph under construction: nodes, weights as initializers, and names that stay unique.

Caffe names blobs, and in-place layers (ReLU, Dropout, BatchNorm, Scale ...) write the blob they
read; ONNX wants every tensor written once. :class:`OnnxGraph` keeps Caffe's name for the *last* writer
of each blob (so the model's inputs and outputs carry the names of the deploy net's blobs) and names
earlier versions ``BLOB/LAYER``. Every node, initializer and value is made with ``onnx.helper``.

The few operators whose signature changed within the opsets offered (13 and later) are made here:
the reductions take their axes as an input from opset 18 (``ReduceSum`` from 13).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

AXES_AS_INPUT = {"ReduceSum": 13}  # every other reduction: from opset 18
REDUCE_AXES_INPUT_OPSET = 18


class OnnxGraph:
    """Nodes and initializers of one model, in order, with unique names. The element types a
    translation casts to are here too, so the layer catalogue's translations need not import onnx."""

    FLOAT, INT64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL

    def __init__(self, opset: int) -> None:
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._names: set[str] = set()

    def unique(self, hint: str) -> str:
        """A tensor name not used yet, ``hint`` itself when free."""
        name, k = hint, 1
        while name in self._names:
            name, k = f"{hint}_{k}", k + 1
        self._names.add(name)
        return name

    def claim(self, name: str) -> str:
        """Reserve ``name`` (a graph input or a blob's final name) so temporaries never take it."""
        self._names.add(name)
        return name

    def const(self, hint: str, value: Any, dtype: Any = np.float32) -> str:
        """An initializer holding ``value``; its name."""
        name = self.unique(hint)
        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    @staticmethod
    def value(array: np.ndarray) -> onnx.TensorProto:
        """A tensor attribute's value (``ConstantOfShape``'s fill)."""
        return numpy_helper.from_array(array)

    def ints(self, hint: str, values: Any) -> str:
        return self.const(hint, np.asarray(values, np.int64).reshape(-1), np.int64)

    def op(self, op_type: str, inputs: list[str], hint: str, outputs: int | list[str] = 1, **attrs: Any) -> list[str]:
        """Add one node; ``outputs`` is a count of new temporaries named after ``hint`` or the names to write."""
        names = [self.unique(f"{hint}/{op_type}" + (f"_{k}" if outputs > 1 else "")) for k in range(outputs)] \
            if isinstance(outputs, int) else list(outputs)
        self.nodes.append(helper.make_node(op_type, inputs, names, name=self.unique(f"{hint}/{op_type}#node"),
                                           **attrs))
        return names

    def op1(self, op_type: str, inputs: list[str], hint: str, out: str | None = None, **attrs: Any) -> str:
        """One node with one output (a new temporary, or ``out``)."""
        return self.op(op_type, inputs, hint, [out] if out else 1, **attrs)[0]

    def reduce(self, op_type: str, x: str, axes: list[int], hint: str, keepdims: bool,
               out: str | None = None) -> str:
        """A reduction over ``axes``, with the axes as the opset wants them (attribute or input)."""
        if self.opset >= AXES_AS_INPUT.get(op_type, REDUCE_AXES_INPUT_OPSET):
            return self.op1(op_type, [x, self.ints(f"{hint}/axes", axes)], hint, out, keepdims=int(keepdims))
        return self.op1(op_type, [x], hint, out, axes=list(axes), keepdims=int(keepdims))

    def model(self, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto], name: str,
              doc: str) -> onnx.ModelProto:
        """The model of this graph, at the lowest IR version that holds its opset (older readers take it)."""
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.initializers, doc_string=doc)
        opsets = [helper.make_opsetid("", self.opset)]
        model = helper.make_model(graph, opset_imports=opsets, producer_name="caffetool")
        model.ir_version = helper.find_min_ir_version_for(opsets)
        return model


def tensor(name: str, shape: list[int | str] | None, elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    """A typed value (graph input or output); a text dimension is symbolic (``N``: the batch)."""
    return helper.make_tensor_value_info(name, elem, shape)
