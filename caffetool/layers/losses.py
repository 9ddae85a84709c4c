"""Softmax, the loss layers and Accuracy.

A loss layer's first top is a scalar whose gradient Caffe fills with the loss weight at set-up
(layer.hpp ``SetLossWeights``), so every loss top has a gradient blob even in the TEST net. Labels
never get a gradient (each loss refuses ``propagate_down`` on them). GPU-only scratch — several
``Forward_gpu`` use a gradient blob as a temporary — is marked with ``gpu-forward``. Losses and
Accuracy are training and test layers: the exports take the deploy net, which has none. Sources: BVLC
Caffe 1.0 ``src/caffe/layers/<name>_layer.cpp`` and ``.cu``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from caffetool.layers.allocation import BACKWARD, FORWARD, INSIDE, SETUP, Buffer, LayerInfo, Shape, axis_index, count
from caffetool.layers.caffelayer import Layer, axis_of
from caffetool.layers.entry import LayerType, Refused
from caffetool.layers.torchlayer import TorchLayer

if TYPE_CHECKING:
    from caffetool.layers.onnxgraph import OnnxGraph

GPU_FORWARD = "gpu-forward"
TRAINING = Refused("is a training or test layer (a loss or a score): export the deploy net (--deploy FILE)")


def _softmax_buffers(shape: Shape, axis: int, prefix: str = "") -> list[Buffer]:
    """softmax_layer.cpp: ``sum_multiplier_`` (the softmax axis, set in Reshape) and ``scale_``
    (everything else, written by forward)."""
    return [Buffer(f"{prefix}sum_multiplier", shape[axis], SETUP),
            Buffer(f"{prefix}scale", count(shape) // shape[axis], FORWARD)]


CUDNN_SOFTMAX_UNUSED = ("scale", "sum_multiplier")


def _cudnn_softmax(layer: Any) -> str | None:
    """layer_factory.cpp GetSoftmaxLayer: cuDNN's class unless the layer asks for Caffe's engine
    (a loss layer's inner Softmax is made from a copy of the loss layer's parameters)."""
    return "CuDNNSoftmax" if layer.softmax_param.engine != 1 else None


class Softmax(LayerType):
    """Probabilities along ``axis`` (softmax_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """softmax_layer.cpp: backward writes the bottom's gradient without checking ``propagate_down``
        (cudnn_softmax_layer.cu checks it)."""
        shape = bottoms[0]
        axis = axis_index(layer.softmax_param.axis, shape)
        return LayerInfo([shape], [], 3 * count(shape), _softmax_buffers(shape, axis), bottom_diff="always",
                         cudnn=_cudnn_softmax(layer), cudnn_unused=CUDNN_SOFTMAX_UNUSED, cudnn_bottom_diff="propagate")

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
        g.op1("Softmax", [l.bottoms[0]], l.name, l.tops[0],
              axis=axis_of(l.param.softmax_param.axis, len(l.bottom_shapes[0])))

    @staticmethod
    def pytorch(l: Layer) -> TorchLayer:
        return TorchLayer(f"nn.Softmax({axis_of(l.param.softmax_param.axis, len(l.bottom_shapes[0]))})")


class SoftmaxWithLoss(LayerType):
    """The multinomial logistic loss of a softmax (softmax_loss_layer.cpp)."""

    loss = True

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """softmax_loss_layer.cpp: an inner Softmax layer writes ``prob_`` (the input's size); a second
        top shares ``prob_``. The inner layer is made from a copy of this layer's parameters taken after
        ``LossLayer::LayerSetUp`` added ``loss_weight: 1`` (lines 13-14), so its own set-up (layer.hpp:389,
        ``SetLossWeights``) fills ``prob_``'s gradient with the weight: a second blob of the input's
        size, in the TEST net too. softmax_loss_layer.cu ``Forward_gpu`` also uses the input's
        gradient as per-item loss scratch, and ``prob_``'s gradient as the count scratch. The inner layer
        comes from the layer registry, so with cuDNN it is a ``CuDNNSoftmaxLayer`` (one handle)."""
        shape = bottoms[0]
        axis = axis_index(layer.softmax_param.axis, shape)
        blob = count(shape)
        buffers = [Buffer("prob", blob, FORWARD), *_softmax_buffers(shape, axis, "softmax.")]
        if not layer.loss_weight or layer.loss_weight[0]:
            buffers.append(Buffer("prob.diff", blob, SETUP))
        return LayerInfo([()] + [shape] * (len(layer.top) - 1), [], 3 * blob, buffers, alias={1: INSIDE},
                         bottom_diff=("propagate", "none"), gpu_forward_diff=(0,), cudnn=_cudnn_softmax(layer),
                         cudnn_unused=tuple(f"softmax.{name}" for name in CUDNN_SOFTMAX_UNUSED))

    onnx = TRAINING
    pytorch = TRAINING


class SigmoidCrossEntropyLoss(LayerType):
    """The cross-entropy of sigmoids (sigmoid_cross_entropy_loss_layer.cpp)."""

    loss = True

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """sigmoid_cross_entropy_loss_layer.cpp: an inner Sigmoid writes ``sigmoid_output_`` (the input's
        size); the ``.cu`` forward uses both bottoms' gradients as loss and count scratch. The inner
        layer is built from the prototxt's own parameters (the header's constructor), so only an
        explicit ``loss_weight`` gives ``sigmoid_output_`` a gradient at set-up."""
        blob = count(bottoms[0])
        buffers = [Buffer("sigmoid_output", blob, FORWARD)]
        if layer.loss_weight and layer.loss_weight[0]:
            buffers.append(Buffer("sigmoid_output.diff", blob, SETUP))
        return LayerInfo([()], [], 2 * blob, buffers, bottom_diff=("propagate", "none"),
                         gpu_forward_diff=(0, 1))

    onnx = TRAINING
    pytorch = TRAINING


class EuclideanLoss(LayerType):
    """Half the mean squared distance of two inputs (euclidean_loss_layer.cpp)."""

    loss = True

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """euclidean_loss_layer.cpp: ``diff_`` (the input's size) from forward; both inputs may get a gradient."""
        blob = count(bottoms[0])
        return LayerInfo([()], [], blob, [Buffer("diff", blob, FORWARD)])

    onnx = TRAINING
    pytorch = TRAINING


class HingeLoss(LayerType):
    """The one-versus-all hinge loss (hinge_loss_layer.cpp)."""

    loss = True

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """hinge_loss_layer.cpp:13 (``Forward_cpu``) computes the margins in bottom 0's gradient blob, so that
        blob exists after any forward pass, in the TEST net too."""
        return LayerInfo([()], [], count(bottoms[0]), bottom_diff=("propagate", "none"), forward_diff=(0,))

    onnx = TRAINING
    pytorch = TRAINING


class InfogainLoss(LayerType):
    """The multinomial logistic loss weighted by an infogain matrix (infogain_loss_layer.cpp)."""

    loss = True

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """infogain_loss_layer.cpp: an inner Softmax (``prob_``, and its gradient: line 21 gives the
        inner layer ``loss_weight: 1``), ``sum_rows_H_`` (one per label, in backward) and the
        infogain matrix H: a third bottom, or read from ``source`` at set-up (labels²)."""
        p = layer.infogain_loss_param
        shape = bottoms[0]
        axis = axis_index(p.axis, shape)
        labels = shape[axis]
        buffers = [Buffer("prob", count(shape), FORWARD), Buffer("prob.diff", count(shape), SETUP),
                   *_softmax_buffers(shape, axis, "softmax."),
                   Buffer("sum_rows_H", labels, BACKWARD)]
        if len(bottoms) < 3:
            buffers.append(Buffer("infogain", labels * labels, SETUP))
        return LayerInfo([()] + [shape] * (len(layer.top) - 1), [], 3 * count(shape), buffers, alias={1: INSIDE},
                         bottom_diff=("propagate", "none", "none"), cudnn=_cudnn_softmax(layer),
                         cudnn_unused=tuple(f"softmax.{name}" for name in CUDNN_SOFTMAX_UNUSED))

    onnx = TRAINING
    pytorch = TRAINING


class ContrastiveLoss(LayerType):
    """Siamese pairs pulled together or pushed apart (contrastive_loss_layer.cpp)."""

    loss = True

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """contrastive_loss_layer.cpp: ``diff_`` (N x C) and ``dist_sq_`` (N) from forward, ``summer_vec_``
        (C) at set-up; ``diff_sq_`` only on the GPU."""
        n, c = bottoms[0][0], count(bottoms[0][1:])
        buffers = [Buffer("summer_vec", c, SETUP), Buffer("diff", n * c, FORWARD), Buffer("dist_sq", n, FORWARD),
                   Buffer("diff_sq", n * c, GPU_FORWARD)]
        return LayerInfo([()], [], 3 * n * c, buffers, bottom_diff=("propagate", "propagate", "none"))

    onnx = TRAINING
    pytorch = TRAINING


class MultinomialLogisticLoss(LayerType):
    """The logistic loss of given probabilities (multinomial_logistic_loss_layer.cpp)."""

    loss = True

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """multinomial_logistic_loss_layer.cpp: nothing of its own."""
        return LayerInfo([()], [], bottoms[0][0], bottom_diff=("propagate", "none"))

    onnx = TRAINING
    pytorch = TRAINING


class Accuracy(LayerType):
    """The share of items whose label is in the top ``top_k`` (accuracy_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """accuracy_layer.cpp: a scalar top; with a second top, per-class accuracies and their counts
        ``nums_buffer_`` (one per class). No backward. accuracy_layer.cu ``Forward_gpu`` works in the
        scores' gradient, and counts in the labels' gradient or, with a second top, in ``nums_buffer_``
        reshaped like the scores."""
        shape = bottoms[0]
        classes = shape[axis_index(layer.accuracy_param.axis, shape)]
        if len(layer.top) > 1:
            buffers = [Buffer("nums_buffer", classes, "cpu-" + FORWARD),
                       Buffer("nums_buffer", count(shape), GPU_FORWARD)]
            return LayerInfo([(), (classes,)], [], count(shape), buffers, bottom_diff="none", gpu_forward_diff=(0,))
        return LayerInfo([()], [], count(shape), bottom_diff="none", gpu_forward_diff=(0, 1))

    onnx = TRAINING
    pytorch = TRAINING
