"""The neuron layers: ReLU, Sigmoid, TanH, ELU, BNLL, AbsVal, Power, Exp, Log, Clip, Threshold, Swish,
Dropout and PReLU, one value out for each value in.

A neuron layer's top has its bottom's shape and may be computed in place (the top is then the
bottom's blob); PReLU keeps a copy of its input when run in place, because backward needs the input
the forward pass overwrote. Dropout is the identity at test time (Caffe scales at training time), so
the exports write it as such. Sources: BVLC Caffe 1.0 ``src/caffe/layers/<name>_layer.cpp``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from caffetool.layers.allocation import FORWARD, INT, SETUP, Buffer, LayerInfo, Shape, count, in_place, phase_of
from caffetool.layers.caffelayer import Layer
from caffetool.layers.entry import NOT_IN_PYTORCH, LayerType
from caffetool.layers.torchlayer import TorchLayer, plain

if TYPE_CHECKING:
    from caffetool.layers.onnxgraph import OnnxGraph

CUDNN_NEURONS = {"ReLU": "CuDNNReLU", "Sigmoid": "CuDNNSigmoid", "TanH": "CuDNNTanH"}


def neuron(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """neuron_layer.cpp ``Reshape``: the top is shaped like the bottom; nothing else is kept (ReLU,
    Sigmoid, TanH, ELU, BNLL, AbsVal, Power, Exp, Log, Clip)."""
    engine = getattr(layer, f"{layer.type.lower()}_param").engine if layer.type in CUDNN_NEURONS else 1
    return LayerInfo([bottoms[0]], [], count(bottoms[0]), cudnn=CUDNN_NEURONS[layer.type] if engine != 1 else None)


def unary(op_type: str, **attrs_of: Callable[[Any], Any]) -> Callable[[OnnxGraph, Layer], None]:
    """A layer that is one ONNX operator; ``attrs_of`` read its attributes from the LayerParameter."""
    def convert(g: OnnxGraph, l: Layer) -> None:
        g.op1(op_type, [l.bottoms[0]], l.name, l.tops[0], **{k: f(l.param) for k, f in attrs_of.items()})
    return convert


def _affine(g: OnnxGraph, l: Layer, x: str, scale: float, shift: float) -> str:
    """``shift + scale * x`` with the operators that are not identities."""
    if scale != 1:
        x = g.op1("Mul", [x, g.const(f"{l.name}/scale", scale)], l.name)
    if shift != 0:
        x = g.op1("Add", [x, g.const(f"{l.name}/shift", shift)], l.name)
    return x


def _finish(g: OnnxGraph, l: Layer, x: str) -> None:
    """Name ``x`` as the layer's top (an Identity only when no operator was needed)."""
    if x == l.bottoms[0]:
        g.op1("Identity", [x], l.name, l.tops[0])
    else:
        g.nodes[-1].output[0] = l.tops[0]


def identity(g: OnnxGraph, l: Layer) -> None:
    for bottom, top in zip(l.bottoms * len(l.tops) if len(l.bottoms) == 1 else l.bottoms, l.tops):
        g.op1("Identity", [bottom], l.name, top)


class ReLU(LayerType):
    """``max(0, x)``, or ``negative_slope * x`` below 0 (relu_layer.cpp)."""

    memory = staticmethod(neuron)

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
        slope = l.param.relu_param.negative_slope
        if slope:
            g.op1("LeakyRelu", [l.bottoms[0]], l.name, l.tops[0], alpha=float(slope))
        else:
            g.op1("Relu", [l.bottoms[0]], l.name, l.tops[0])

    @staticmethod
    def pytorch(l: Layer) -> TorchLayer:
        slope = float(l.param.relu_param.negative_slope)
        return TorchLayer("nn.ReLU()" if slope == 0 else f"nn.LeakyReLU({slope!r})")


class Sigmoid(LayerType):
    """``1 / (1 + exp(-x))`` (sigmoid_layer.cpp)."""

    memory = staticmethod(neuron)
    onnx = staticmethod(unary("Sigmoid"))
    pytorch = staticmethod(plain("nn.Sigmoid()"))


class TanH(LayerType):
    """``tanh(x)`` (tanh_layer.cpp)."""

    memory = staticmethod(neuron)
    onnx = staticmethod(unary("Tanh"))
    pytorch = staticmethod(plain("nn.Tanh()"))


class ELU(LayerType):
    """``x``, or ``alpha (exp(x) - 1)`` below 0 (elu_layer.cpp)."""

    memory = staticmethod(neuron)
    onnx = staticmethod(unary("Elu", alpha=lambda p: float(p.elu_param.alpha)))

    @staticmethod
    def pytorch(l: Layer) -> TorchLayer:
        return TorchLayer(f"nn.ELU({float(l.param.elu_param.alpha)!r})")


class BNLL(LayerType):
    """``log(1 + exp(x))`` (bnll_layer.cpp)."""

    memory = staticmethod(neuron)
    onnx = staticmethod(unary("Softplus"))
    pytorch = staticmethod(plain("nn.Softplus()"))


class AbsVal(LayerType):
    """``|x|`` (absval_layer.cpp)."""

    memory = staticmethod(neuron)
    onnx = staticmethod(unary("Abs"))
    pytorch = staticmethod(lambda l: TorchLayer("AbsVal()", helpers=("AbsVal",)))


class Power(LayerType):
    """``(shift + scale x) ^ power`` (power_layer.cpp)."""

    memory = staticmethod(neuron)

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
        """``(shift + scale * x) ^ power``; Caffe fills a constant when the power or the scale is 0."""
        p = l.param.power_param
        if p.power == 0 or p.scale == 0:
            value = 1.0 if p.power == 0 else float(np.float32(p.shift) ** np.float32(p.power))
            shape = g.op1("Shape", [l.bottoms[0]], l.name)
            g.op1("ConstantOfShape", [shape], l.name, l.tops[0],
                  value=g.value(np.array([value], np.float32)))
            return
        x = _affine(g, l, l.bottoms[0], p.scale, p.shift)
        if p.power != 1:
            x = g.op1("Pow", [x, g.const(f"{l.name}/power", p.power)], l.name)
        _finish(g, l, x)

    @staticmethod
    def pytorch(l: Layer) -> TorchLayer:
        p = l.param.power_param
        return TorchLayer(f"Power({float(p.power)!r}, {float(p.scale)!r}, {float(p.shift)!r})", helpers=("Power",))


class Exp(LayerType):
    """``base ^ (shift + scale x)`` (exp_layer.cpp)."""

    memory = staticmethod(neuron)

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
        """``base ^ (shift + scale * x)`` as Caffe computes it: ``base^shift * exp(scale * ln(base) * x)``."""
        p = l.param.exp_param
        log_base = 1.0 if p.base == -1 else math.log(p.base)
        x = _affine(g, l, l.bottoms[0], p.scale * log_base, 0)
        x = g.op1("Exp", [x], l.name)
        outer = 1.0 if p.shift == 0 else (math.exp(p.shift) if p.base == -1 else p.base ** p.shift)
        if outer != 1:
            x = g.op1("Mul", [x, g.const(f"{l.name}/outer", outer)], l.name)
        _finish(g, l, x)

    pytorch = NOT_IN_PYTORCH


class Log(LayerType):
    """``log_base(shift + scale x)`` (log_layer.cpp)."""

    memory = staticmethod(neuron)

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
        """``log_base(shift + scale * x)``."""
        p = l.param.log_param
        x = g.op1("Log", [_affine(g, l, l.bottoms[0], p.scale, p.shift)], l.name)
        if p.base != -1:
            x = g.op1("Mul", [x, g.const(f"{l.name}/base", 1.0 / math.log(p.base))], l.name)
        _finish(g, l, x)

    pytorch = NOT_IN_PYTORCH


class Clip(LayerType):
    """``x`` clipped to ``[min, max]`` (clip_layer.cpp)."""

    memory = staticmethod(neuron)

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
        p = l.param.clip_param
        g.op1("Clip", [l.bottoms[0], g.const(f"{l.name}/min", p.min), g.const(f"{l.name}/max", p.max)], l.name,
              l.tops[0])

    pytorch = NOT_IN_PYTORCH


class Threshold(LayerType):
    """1 above ``threshold``, else 0 (threshold_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """threshold_layer.hpp: no backward at all (``Backward_cpu`` is ``NOT_IMPLEMENTED``)."""
        return LayerInfo([bottoms[0]], [], count(bottoms[0]), bottom_diff="none")

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
        above = g.op1("Greater", [l.bottoms[0], g.const(f"{l.name}/threshold", l.param.threshold_param.threshold)],
                      l.name)
        g.op1("Cast", [above], l.name, l.tops[0], to=g.FLOAT)

    pytorch = NOT_IN_PYTORCH


class Swish(LayerType):
    """``x sigmoid(beta x)`` (swish_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """swish_layer.cpp: an inner Sigmoid layer with its own input (``sigmoid_input_``) and output
        (``sigmoid_output_``) blobs, both of the input's size, written by every forward pass."""
        blob = count(bottoms[0])
        return LayerInfo([bottoms[0]], [], 3 * blob, [Buffer("sigmoid_input", blob, FORWARD),
                                                      Buffer("sigmoid_output", blob, FORWARD)])

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
        """``x * sigmoid(beta * x)``."""
        gate = g.op1("Sigmoid", [_affine(g, l, l.bottoms[0], l.param.swish_param.beta, 0)], l.name)
        g.op1("Mul", [l.bottoms[0], gate], l.name, l.tops[0])

    pytorch = NOT_IN_PYTORCH


class Dropout(LayerType):
    """Random zeroing while training; the identity at test time (dropout_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """dropout_layer.cpp:35 (``Forward_cpu``) takes the mask ``rand_vec_`` (unsigned ints, the
        input's size) in every phase, before it checks for TRAIN; dropout_layer.cu touches it only in TRAIN."""
        blob = count(bottoms[0])
        when = FORWARD if phase_of(layer, phase) == "train" else "cpu-forward"
        return LayerInfo([bottoms[0]], [], blob, [Buffer("rand_vec", blob, when, INT)])

    onnx = staticmethod(identity)

    @staticmethod
    def pytorch(l: Layer) -> TorchLayer:
        return TorchLayer(f"nn.Dropout({float(l.param.dropout_param.dropout_ratio)!r})")


class PReLU(LayerType):
    """ReLU with a learned slope per channel, or one for all (prelu_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """prelu_layer.cpp: one slope per channel (or one); ``multiplier_`` (C x H x W, set in
        ``LayerSetUp``); ``backward_buff_`` is used only by the GPU backward; in place, the forward
        pass copies its input into ``bottom_memory_`` for backward (line 78)."""
        shape = bottoms[0]
        per_sample = count(shape[1:])
        slopes = () if layer.prelu_param.channel_shared else (shape[1],)  # a scalar blob: no axes
        buffers = [Buffer("multiplier", per_sample, SETUP), Buffer("backward_buff", per_sample, "gpu-backward")]
        if in_place(layer):
            buffers.append(Buffer("bottom_memory", count(shape), FORWARD))
        return LayerInfo([shape], [slopes], count(shape), buffers)

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
        rank = len(l.bottom_shapes[0])
        slope = l.blobs[0].reshape(-1)
        if slope.size > 1:
            slope = slope.reshape([-1] + [1] * (rank - 2))
        g.op1("PRelu", [l.bottoms[0], g.const(f"{l.name}/slope", slope)], l.name, l.tops[0])

    @staticmethod
    def pytorch(l: Layer) -> TorchLayer:
        if len(l.bottom_shapes[0]) < 2:
            raise l.refuse("it needs a channel axis", to="PyTorch")
        weight = l.blobs[0].reshape(-1)
        return TorchLayer(f"nn.PReLU({weight.size})" if weight.size > 1 else "nn.PReLU()", {"weight": weight})
