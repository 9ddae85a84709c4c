"""Which rule models which layer type, and what happens to a type no rule models.

The rules live by family (:mod:`caffetool.memory.vision`, ``neurons``, ``shaping``, ``losses``,
``recurrent``); each mirrors what the layer's C++ code in BVLC Caffe 1.0 allocates. Data layers
are shaped by :mod:`caffetool.memory.sources`. A type without a rule (a ``Python`` layer, a layer
from a fork) is not refused: :func:`unmodelled` gives its tops its first bottom's shape, owns
nothing, and the estimate says it is a lower bound.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from caffetool.memory import losses, neurons, recurrent, shaping, vision
from caffetool.memory.info import LayerInfo, Shape

Rule = Callable[[Any, list[Shape], str], LayerInfo]  # (caffe_pb2.LayerParameter, bottom shapes, phase)

NEURONS = ("ReLU", "Sigmoid", "TanH", "ELU", "BNLL", "AbsVal", "Power", "Exp", "Log", "Clip")
RULES: dict[str, Rule] = {
    **{name: neurons.neuron for name in NEURONS},
    "Threshold": neurons.threshold, "Swish": neurons.swish, "Dropout": neurons.dropout, "PReLU": neurons.prelu,
    "BatchNorm": neurons.batch_norm, "Scale": neurons.scale, "Bias": neurons.bias, "MVN": neurons.mvn,
    "Convolution": vision.convolution, "Deconvolution": vision.deconvolution, "Pooling": vision.pooling,
    "SPP": vision.spp, "LRN": vision.lrn, "Im2col": vision.im2col, "InnerProduct": vision.inner_product,
    "Embed": vision.embed,
    "Concat": shaping.concat, "Slice": shaping.slice_, "Split": shaping.split, "Flatten": shaping.flatten,
    "Reshape": shaping.reshape, "Crop": shaping.crop, "Tile": shaping.tile, "Reduction": shaping.reduction,
    "ArgMax": shaping.argmax, "Filter": shaping.filter_, "Eltwise": shaping.eltwise,
    "BatchReindex": shaping.batch_reindex, "Silence": shaping.silence, "Parameter": shaping.parameter,
    "Softmax": losses.softmax, "SoftmaxWithLoss": losses.softmax_loss,
    "SigmoidCrossEntropyLoss": losses.sigmoid_cross_entropy_loss, "EuclideanLoss": losses.euclidean_loss,
    "HingeLoss": losses.hinge_loss, "InfogainLoss": losses.infogain_loss,
    "ContrastiveLoss": losses.contrastive_loss, "MultinomialLogisticLoss": losses.multinomial_logistic_loss,
    "Accuracy": losses.accuracy,
    "RNN": recurrent.recurrent, "LSTM": recurrent.recurrent, "LSTMUnit": recurrent.lstm_unit,
}
LOSS_TYPES = losses.LOSS_TYPES


def unmodelled(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """A type no rule models: each top assumed shaped like the first bottom, nothing else counted."""
    return LayerInfo([bottoms[0]] * len(layer.top))


def rule(layer: Any) -> Rule | None:
    """The rule for ``layer``'s type, or None when the estimator does not model it."""
    return RULES.get(layer.type)
