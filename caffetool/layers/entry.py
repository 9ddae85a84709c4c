"""What the catalogue declares of one Caffe layer type, and the three ways a capability can be declared.

Each Caffe layer type the project knows is one subclass of :class:`LayerType` in a family module of
:mod:`caffetool.layers`; its class name is the type's name (``Convolution``). It declares, for every
capability in :data:`CAPABILITIES`, either what the project does with the type — a function — or why
it does nothing with it:

* ``memory``: ``(layer, bottom shapes, phase) -> LayerInfo``, the tops' shapes and what BVLC Caffe 1.0
  allocates for the layer (:mod:`caffetool.memory` adds them up); a data layer declares a
  :class:`Sourced` instead, whose function shapes its tops from the layer alone.
* ``onnx``: ``(OnnxGraph, Layer) -> None``, the operators that compute the layer's forward pass.
* ``pytorch``: ``(Layer) -> TorchLayer``, the module attribute and call written into ``model.py``.

A capability the project refuses is a :class:`Refused` with its reason (said to the user as it
stands); one the project covers without code of the type's own is an :class:`Omitted` (an ``Input``
is the model's input, not a node). A subclass that declares neither for some capability is
incomplete, which :func:`caffetool.layers.catalogue.missing` names and the tests refuse.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

CAPABILITIES = ("memory", "onnx", "pytorch")


@dataclass(frozen=True)
class Refused:
    """A capability the project does not give this type, and why (a clause: "cannot be exported: <why>")."""

    why: str


NOT_IN_PYTORCH = Refused("the PyTorch export does not cover it; the ONNX export does")


@dataclass(frozen=True)
class Omitted:
    """A capability covered without code of the type's own: the exporters write nothing for it."""

    why: str


@dataclass(frozen=True)
class Sourced:
    """A data layer's memory: its tops shaped by ``tops(layer, input_shape, batch, where) -> DataTops``
    (:mod:`caffetool.layers.sources`), not by its bottoms."""

    tops: Callable[..., Any]


class LayerType:
    """One Caffe layer type (the subclass's name) and everything caffetool does with it.

    ``loss``: a ``LossLayer``, whose first top weighs 1 in the loss unless ``loss_weight`` says
    otherwise (layer.hpp ``SetLossWeights``). ``fork``: where a type the engine lacks comes from,
    for the message that names it.
    """

    loss: ClassVar[bool] = False
    fork: ClassVar[str] = "BVLC Caffe 1.0"

    @classmethod
    def name(cls) -> str:
        return cls.__name__
