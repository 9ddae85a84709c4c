"""RNN, LSTM and LSTMUnit; the unrolled net Caffe builds inside RNN and LSTM, rebuilt here as a NetParameter.

BVLC Caffe 1.0's ``RecurrentLayer::LayerSetUp`` (recurrent_layer.cpp) makes a whole ``Net`` from
an Input layer (``x``, ``cont``, optionally ``x_static``), the layer's ``FillUnrolledNet``
(lstm_layer.cpp, rnn_layer.cpp: T copies of the step, the step's weights shared by name) and one
``Reduction`` pseudo-loss per output. The estimator accounts that net like any other
(:mod:`caffetool.memory.estimator`), with three links to the outer net: ``x`` and ``x_static`` share
the layer's bottoms' data and gradients and ``cont`` its data (``Reshape``), the outer top shares
the inner output's data and gradient, and the inner net's owned parameters are the layer's.
Surprises: the pseudo-losses (recurrent_layer.cpp:101) never run but their ``Reduction`` sets a
``sum_multiplier_`` of the whole output's size at set-up, and ``LayerSetUp`` zeroes the gradients of
the last step's recurrent outputs (``h_T``, ``c_T``) at once (line 170).
"""

from __future__ import annotations

import sys
from typing import Any

from caffetool.layers.allocation import INSIDE, Buffer, LayerInfo, Shape, count
from caffetool.layers.entry import LayerType, Refused

GPU_FORWARD = "gpu-forward"
RECURRENT = Refused("recurrent layers are not covered by the export")


def _net(layer: Any) -> Any:
    """An empty NetParameter from the same generated module as ``layer``."""
    return sys.modules[type(layer).__module__].NetParameter()


def _add(net: Any, type_: str, name: str, bottoms: list[str], tops: list[str]) -> Any:
    layer = net.layer.add(type=type_, name=name)
    layer.bottom.extend(bottoms)
    layer.top.extend(tops)
    return layer


def _hidden(net: Any, name: str, bottom: str, top: str, outputs: int, params: list[str], axis: int = 2,
            propagate: bool = False) -> None:
    layer = _add(net, "InnerProduct", name, [bottom], [top])
    layer.inner_product_param.num_output = outputs
    layer.inner_product_param.bias_term = len(params) > 1
    layer.inner_product_param.axis = axis
    for param in params:
        layer.param.add(name=param)
    if propagate:
        layer.propagate_down.append(True)


def _scale(net: Any, name: str, bottoms: list[str], top: str) -> None:
    _add(net, "Scale", name, bottoms, [top]).scale_param.axis = 0


def _slice(net: Any, name: str, bottom: str) -> Any:
    layer = _add(net, "Slice", name, [bottom], [])
    layer.slice_param.axis = 0
    return layer


def _eltwise_sum(net: Any, name: str, bottoms: list[str], top: str) -> None:
    _add(net, "Eltwise", name, bottoms, [top]).eltwise_param.operation = 1


def unrolled(layer: Any, bottoms: list[Shape]) -> tuple[Any, str, list[str]]:
    """(NetParameter, output blob, recurrent outputs) as ``RecurrentLayer::LayerSetUp`` builds them."""
    lstm = layer.type == "LSTM"
    hidden = layer.recurrent_param.num_output
    steps, streams = bottoms[0][0], bottoms[0][1]
    static = len(bottoms) > 2 + (2 if lstm else 1) * layer.recurrent_param.expose_hidden
    net = _net(layer)
    inputs = _add(net, "Input", "input", [], ["x", "cont"] + (["x_static"] if static else []))
    for shape in bottoms[: 3 if static else 2]:
        inputs.input_param.shape.add(dim=list(shape))
    gates = 4 * hidden if lstm else hidden
    state = ["c_0", "h_0"] if lstm else ["h_0"]
    initial = _add(net, "Input", "", [], state)
    for _ in state:
        initial.input_param.shape.add(dim=[1, streams, hidden])
    w, b, h = ("W_xc", "b_c", "W_hc") if lstm else ("W_xh", "b_h", "W_hh")
    cont_slice = _slice(net, "cont_slice", "cont")
    _hidden(net, "x_transform", "x", f"{w}_x", gates, [w, b], propagate=True)
    if static:
        _hidden(net, f"{w}_x_static", "x_static", f"{w}_x_static_preshape", gates, [f"{w}_static"], axis=1,
                propagate=True)
        reshape = _add(net, "Reshape", f"{w}_x_static_reshape", [f"{w}_x_static_preshape"], [f"{w}_x_static"])
        reshape.reshape_param.shape.dim.extend([1, -1, gates])
    x_slice = _slice(net, f"{w}_x_slice", f"{w}_x")
    outputs = []
    for t in range(1, steps + 1):
        cont_slice.top.append(f"cont_{t}")
        x_slice.top.append(f"{w}_x_{t}")
        _scale(net, f"h_conted_{t - 1}", [f"h_{t - 1}", f"cont_{t}"], f"h_conted_{t - 1}")
        recurrent_input = f"W_hc_h_{t - 1}" if lstm else f"W_hh_h_{t - 1}"
        inputs_t = [recurrent_input, f"{w}_x_{t}"] + ([f"{w}_x_static"] if static else [])
        if lstm:
            _hidden(net, f"transform_{t}", f"h_conted_{t - 1}", inputs_t[0], gates, [h])
            _eltwise_sum(net, f"gate_input_{t}", inputs_t, f"gate_input_{t}")
            _add(net, "LSTMUnit", f"unit_{t}", [f"c_{t - 1}", f"gate_input_{t}", f"cont_{t}"], [f"c_{t}", f"h_{t}"])
            outputs.append(f"h_{t}")
        else:
            _hidden(net, f"W_hh_h_{t - 1}", f"h_conted_{t - 1}", inputs_t[0], gates, [h])
            _eltwise_sum(net, f"h_input_sum_{t}", inputs_t, f"h_neuron_input_{t}")
            _add(net, "TanH", f"h_neuron_{t}", [f"h_neuron_input_{t}"], [f"h_{t}"])
            _hidden(net, f"W_ho_h_{t}", f"h_{t}", f"W_ho_h_{t}", hidden, ["W_ho", "b_o"])
            _add(net, "TanH", f"o_neuron_{t}", [f"W_ho_h_{t}"], [f"o_{t}"])
            outputs.append(f"o_{t}")
    output = "h" if lstm else "o"
    recurrent_outputs = [f"h_{steps}"]
    if lstm:
        _add(net, "Split", "", [f"c_{steps}"], ["c_T"])
        recurrent_outputs.append("c_T")
    _add(net, "Concat", f"{output}_concat", outputs, [output]).concat_param.axis = 0
    if layer.name:
        for inner in net.layer:
            inner.name = f"{layer.name}_{inner.name}"
    pseudo = _add(net, "Reduction", f"{output}_pseudoloss", [output], [f"{output}_pseudoloss"])
    pseudo.loss_weight.append(1)
    return net, output, recurrent_outputs


def recurrent(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """RNN and LSTM: top (T, N, num_output); the parameters are the unrolled net's owned ones, in
    its order (lstm_layer.cpp: W_xc, b_c, [W_xc_static], W_hc; rnn_layer.cpp: W_xh, b_h,
    [W_xh_static], W_hh, W_ho, b_o)."""
    lstm = layer.type == "LSTM"
    hidden = layer.recurrent_param.num_output
    gates = 4 * hidden if lstm else hidden
    net, _, recurrent_outputs = unrolled(layer, bottoms)
    static = any(name == "x_static" for name in net.layer[0].top)
    params = [(gates, count(bottoms[0][2:])), (gates,)]
    if static:
        params.append((gates, count(bottoms[2][1:])))
    params.append((gates, hidden))
    if not lstm:
        params += [(hidden, hidden), (hidden,)]
    steps, streams = bottoms[0][0], bottoms[0][1]
    macc = steps * streams * sum(count(p) for p in params if len(p) == 2)
    top = (steps, streams, hidden)
    return LayerInfo([top] * len(layer.top), params, macc, alias={i: INSIDE for i in range(len(layer.top))},
                     inner=net, inner_external=("x", "cont", "x_static"), inner_setup_diffs=tuple(recurrent_outputs),
                     bottom_diff=("always", "none", "always"))


def lstm_unit(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """lstm_unit_layer.cpp: tops C and H shaped like the previous C; ``X_acts_`` (the gates' size) is
    written only by ``Forward_gpu``; backward takes both state and gate gradients at once (lines
    86-87), never the continuation flags'."""
    return LayerInfo([bottoms[0], bottoms[0]], [], count(bottoms[1]),
                     [Buffer("X_acts", count(bottoms[1]), GPU_FORWARD)], bottom_diff=("always", "always", "none"))


class RNN(LayerType):
    """A simple recurrent net unrolled over the first axis (rnn_layer.cpp)."""

    memory = staticmethod(recurrent)
    onnx = RECURRENT
    pytorch = RECURRENT


class LSTM(LayerType):
    """A long short-term memory unrolled over the first axis (lstm_layer.cpp)."""

    memory = staticmethod(recurrent)
    onnx = RECURRENT
    pytorch = RECURRENT


class LSTMUnit(LayerType):
    """One LSTM step, as the unrolled LSTM runs it (lstm_unit_layer.cpp)."""

    memory = staticmethod(lstm_unit)
    onnx = RECURRENT
    pytorch = RECURRENT
