"""Convolution, Deconvolution, Im2col, InnerProduct and Embed: the layers that multiply by learned weights.

Memory follows each layer's C++ source in BVLC Caffe 1.0 (``src/caffe/layers/<name>_layer.cpp``),
with the output sizes and windows of :mod:`caffetool.layers.geometry`. The ONNX translations take
Caffe's per-axis kernel, stride, pad and dilation, and an end pad where Caffe's size, which truncates
toward zero, counts a window that overhangs the padded input (ONNX's floors; Caffe's im2col reads the
overhang as zeros, as the pad does). Caffe's deconvolution weight is (input channels, output channels
/ group, kernel...), as ConvTranspose's and ConvTranspose2d's. PyTorch's convolutions are refused
where their output size would differ from Caffe's.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from caffetool.layers import geometry
from caffetool.layers.allocation import (FORWARD, PROPAGATE, SETUP, Buffer, ConvWork, LayerInfo, Shape, axis_index,
                                         count, field_or)
from caffetool.layers.caffelayer import Layer, axis_of
from caffetool.layers.entry import NOT_IN_PYTORCH, LayerType, Refused
from caffetool.layers.torchlayer import CALL, TorchLayer, four_d, hw, kwargs, sizes, unless

if TYPE_CHECKING:
    from caffetool.layers.onnxgraph import OnnxGraph

CALLS = ("forward", "backward filter", "backward data")  # cuDNN's three convolution calls, as logged


def winograd_nonfused_bytes(batch: int, channels: int, outputs: int, group: int, height: int, width: int) -> int:
    """cuDNN's WINOGRAD_NONFUSED workspace for a 3x3, stride-1 convolution's weight gradient: the
    F(4x4, 3x3) transforms (A. Lavin, S. Gray, "Fast Algorithms for Convolutional Neural Networks",
    2016) of the input, of the output gradient and of the weights, 6x6 = 36 floats for every 4x4
    output tile of every image and channel and for every filter. Equal to the bytes cuDNN 9.19 logged
    on all 32 such calls in the H200 record (e.g. VGG-16 b16 conv3_2: 240,648,192)."""
    tiles = math.ceil(height / 4) * math.ceil(width / 4)
    return 4 * 36 * (batch * channels * tiles + batch * outputs * tiles + channels // group * outputs)


def _conv(layer: Any, bottoms: list[Shape], transposed: bool) -> LayerInfo:
    p = layer.convolution_param
    w = geometry.conv_window(p, len(bottoms[0]) - 2)
    taps = count(w.kernel)
    group = p.group or 1
    out = p.num_output
    tops, macc, col = [], 0, 0
    for shape in bottoms:
        n, c, size = shape[0], shape[1], shape[2:]
        if transposed:
            spatial = geometry.deconv_output(size, w)
            col = out * taps * count(size)  # kernel_dim_ x group_ rows, one per input pixel
            macc += n * c * count(size) * (out // group) * taps
        else:
            spatial = geometry.conv_output(size, w)
            col = c * taps * count(spatial)
            macc += n * out * count(spatial) * (c // group) * taps
        tops.append((n, out, *spatial))
    c = bottoms[0][1]
    weights = (c, out // group, *w.kernel) if transposed else (out, c // group, *w.kernel)
    params = [weights] + ([(out,)] if p.bias_term else [])
    one = geometry.is_1x1(w)
    buffers = [Buffer("col_buffer", col, PROPAGATE if one and not transposed else FORWARD)]
    if p.bias_term:
        buffers.append(Buffer("bias_multiplier", count(tops[0][2:]), SETUP))
    work = None
    if not transposed:  # the OpenMP engine's convolution scratch (memory.parallel)
        work = ConvWork(batch=bottoms[0][0], col=col, top=out * count(tops[0][2:]), weights=count(weights),
                        chunkable=not one and group == 1 and len(w.kernel) == 2, one_by_one=one)
    engine = "CuDNNDeconvolution" if transposed else "CuDNNConvolution"
    undilated = all(d == 1 for d in w.dilation)
    cudnn = engine if p.engine != 1 and undilated else None  # layer_factory.cpp: no dilation in cuDNN
    # cudnn_conv_layer.cu (and cudnn_deconv_layer.cu): cuDNN's kernels need no columns, cudnnAddTensor
    # adds the bias without bias_multiplier_, and the input's gradient is taken only when it propagates
    return LayerInfo(tops, params, macc, buffers, group=group, bottom_diff="always", cudnn=cudnn, conv_work=work,
                     cudnn_unused=("col_buffer", "bias_multiplier"), cudnn_bottom_diff="propagate",
                     cudnn_work=_cudnn_work(bottoms[0], tops[0], group, col, (*w.kernel, *w.stride), transposed))


def _cudnn_work(bottom: Shape, top: Shape, group: int, col: int, window: tuple[int, ...],
                transposed: bool) -> dict[str, tuple[int, ...]]:
    """The modelled workspace of each cuDNN call (:mod:`caffetool.memory.device`): one image's
    columns, and first WINOGRAD_NONFUSED for a 3x3, stride-1 convolution's weight gradient."""
    columns = (col * 4,)
    work = {call: columns for call in CALLS}
    if not transposed and window == (3, 3, 1, 1):
        n, c = bottom[0], bottom[1]
        _, k, ho, wo = top
        work["backward filter"] = (winograd_nonfused_bytes(n, c, k, group, ho, wo), *columns)
    return work


def _conv_attrs(l: Layer, transposed: bool) -> dict:
    p = l.param.convolution_param
    rank = len(l.bottom_shapes[0])
    if axis_of(p.axis, rank) != 1:
        raise l.refuse(f"its channel axis is {p.axis}; ONNX convolutions take channels on axis 1")
    w = geometry.conv_window(p, rank - 2)
    end = list(w.pad) if transposed else _overhang_pads(l.bottom_shapes[0][2:], w)
    return {"kernel_shape": list(w.kernel), "strides": list(w.stride), "pads": [*w.pad, *end],
            "dilations": list(w.dilation), "group": p.group}


def _overhang_pads(size: tuple[int, ...], w: geometry.Window) -> list[int]:
    """A convolution's end pads: its own, plus what its last window overhangs the padded input
    where Caffe's truncating size counts that window and ONNX's flooring one would not."""
    out = geometry.conv_output(size, w)
    return [q + max(0, (o - 1) * s + geometry.extent(k, d) - n - 2 * q)
            for n, o, k, s, q, d in zip(size, out, w.kernel, w.stride, w.pad, w.dilation)]


def _conv_module(l: Layer, transposed: bool) -> TorchLayer:
    p = l.param.convolution_param
    four_d(l, "ConvTranspose2d" if transposed else "Conv2d")
    if axis_of(p.axis, 4) != 1:
        raise l.refuse(f"its channel axis is {p.axis}; PyTorch's convolutions take channels on axis 1", to="PyTorch")
    w = geometry.conv_window(p, 2)
    size = l.bottom_shapes[0][2:]
    if transposed:
        theirs = tuple((n - 1) * s - 2 * q + geometry.extent(k, d) for n, k, s, q, d
                       in zip(size, w.kernel, w.stride, w.pad, w.dilation))
    else:
        theirs = tuple((n + 2 * q - geometry.extent(k, d)) // s + 1 for n, k, s, q, d
                       in zip(size, w.kernel, w.stride, w.pad, w.dilation))
    if theirs != tuple(l.top_shapes[0][2:]):
        raise l.refuse(f"Caffe makes its output {hw(l.top_shapes[0][2:])}, PyTorch's would be {hw(theirs)}",
                       to="PyTorch")
    channels = l.bottom_shapes[0][1]
    kind = "ConvTranspose2d" if transposed else "Conv2d"
    build = (f"nn.{kind}({channels}, {p.num_output}, {sizes(w.kernel)}"
             + kwargs(stride=unless(w.stride, 1), padding=unless(w.pad, 0), dilation=unless(w.dilation, 1),
                       groups=p.group if p.group != 1 else None, bias=None if p.bias_term else False) + ")")
    state = {"weight": l.blobs[0]}
    if p.bias_term:
        state["bias"] = l.blobs[1].reshape(-1)
    return TorchLayer(build, state)


class Convolution(LayerType):
    """Learned filters slid over the input (base_conv_layer.cpp, conv_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """base_conv_layer.cpp: ``col_buffer_`` (one image's columns, first used in forward) and
        ``bias_multiplier_`` (set in Reshape); the OpenMP engine's own scratch is in
        :mod:`caffetool.memory.parallel`. conv_layer.cpp:50 (``Backward_cpu``) takes every bottom's
        ``mutable_cpu_diff()`` before it checks ``propagate_down``, so even the input's gradient exists.
        A 1x1 convolution needs no columns, yet base_conv_layer.cpp:286 (``backward_cpu_gemm``) takes
        ``col_buffer_`` before it checks ``is_1x1_``: the buffer appears once the gradient is
        propagated to the input."""
        return _conv(layer, bottoms, transposed=False)

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
        inputs = [l.bottoms[0], g.const(f"{l.name}/weight", l.blobs[0])]
        if l.param.convolution_param.bias_term:
            inputs.append(g.const(f"{l.name}/bias", l.blobs[1]))
        g.op1("Conv", inputs, l.name, l.tops[0], **_conv_attrs(l, transposed=False))

    @staticmethod
    def pytorch(l: Layer) -> TorchLayer:
        return _conv_module(l, transposed=False)


class Deconvolution(LayerType):
    """The convolution's transpose (deconv_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """deconv_layer.cpp: the convolution's rules with input and output swapped (``reverse_dimensions``);
        its ``Backward_cpu`` also takes the bottom's gradient unconditionally (line 50), and its forward pass runs
        ``backward_cpu_gemm``, which takes ``col_buffer_`` even for a 1x1 kernel."""
        return _conv(layer, bottoms, transposed=True)

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
        """Caffe's weight is (input channels, output channels / group, kernel...), as ConvTranspose's."""
        inputs = [l.bottoms[0], g.const(f"{l.name}/weight", l.blobs[0])]
        if l.param.convolution_param.bias_term:
            inputs.append(g.const(f"{l.name}/bias", l.blobs[1]))
        g.op1("ConvTranspose", inputs, l.name, l.tops[0], **_conv_attrs(l, transposed=True))

    @staticmethod
    def pytorch(l: Layer) -> TorchLayer:
        """Caffe's weight is (input channels, output channels / group, kernel...), as ConvTranspose2d's."""
        return _conv_module(l, transposed=True)


class Im2col(LayerType):
    """The columns a convolution multiplies, as a blob (im2col_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """im2col_layer.cpp: the column matrix is the top; ``Backward_cpu`` takes the bottom's gradient
        unconditionally."""
        n, c, size = bottoms[0][0], bottoms[0][1], bottoms[0][2:]
        w = geometry.conv_window(layer.convolution_param, len(size))
        top = (n, c * count(w.kernel), *geometry.conv_output(size, w))
        return LayerInfo([top], [], count(top), bottom_diff="always")

    onnx = Refused("im2col's column layout is not covered by the export")
    pytorch = Refused("im2col's column layout is not covered by the export")


class InnerProduct(LayerType):
    """A fully connected layer over the axes from ``axis`` on (inner_product_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """inner_product_layer.cpp: ``axis`` splits the input into M rows of K; ``bias_multiplier_`` (M)
        is set in Reshape."""
        p = layer.inner_product_param
        shape = bottoms[0]
        axis = axis_index(field_or(p, "axis", 1), shape)
        m, k = count(shape[:axis]), count(shape[axis:])
        weights = (k, p.num_output) if p.transpose else (p.num_output, k)
        params = [weights] + ([(p.num_output,)] if p.bias_term else [])
        buffers = [Buffer("bias_multiplier", m, SETUP)] if p.bias_term else []
        return LayerInfo([tuple(shape[:axis]) + (p.num_output,)], params, m * k * p.num_output, buffers)

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
        p = l.param.inner_product_param
        rank = len(l.bottom_shapes[0])
        axis = axis_of(p.axis, rank)
        weight = l.blobs[0] if p.transpose else l.blobs[0].T  # as (inputs, outputs)
        bias = l.blobs[1].reshape(-1) if p.bias_term else None
        if axis == 1:
            x = l.bottoms[0] if rank == 2 else g.op1("Flatten", [l.bottoms[0]], l.name, axis=1)
            inputs = [x, g.const(f"{l.name}/weight", np.ascontiguousarray(l.blobs[0]))]
            if bias is not None:
                inputs.append(g.const(f"{l.name}/bias", bias))
            g.op1("Gemm", inputs, l.name, l.tops[0], transB=0 if p.transpose else 1)
            return
        x = g.op1("Reshape", [l.bottoms[0], g.ints(f"{l.name}/shape", [0] * axis + [-1])], l.name)
        if bias is None:
            g.op1("MatMul", [x, g.const(f"{l.name}/weight", np.ascontiguousarray(weight))], l.name, l.tops[0])
            return
        y = g.op1("MatMul", [x, g.const(f"{l.name}/weight", np.ascontiguousarray(weight))], l.name)
        g.op1("Add", [y, g.const(f"{l.name}/bias", bias)], l.name, l.tops[0])

    @staticmethod
    def pytorch(l: Layer) -> TorchLayer:
        """Caffe flattens the axes from ``axis`` on into one; ``transpose`` stores the weight as (in, out)."""
        p = l.param.inner_product_param
        rank = len(l.bottom_shapes[0])
        axis = axis_of(p.axis, rank)
        if axis == 0:
            raise l.refuse("it flattens the batch axis into its input (axis 0)", to="PyTorch")
        inputs = int(np.prod(l.bottom_shapes[0][axis:]))
        weight = l.blobs[0].reshape(-1, inputs) if not p.transpose else l.blobs[0].reshape(inputs, -1).T
        state = {"weight": np.ascontiguousarray(weight)}
        if p.bias_term:
            state["bias"] = l.blobs[1].reshape(-1)
        call = CALL if axis == rank - 1 else "{self}({0}.flatten(%d))" % axis
        return TorchLayer(f"nn.Linear({inputs}, {p.num_output}" + kwargs(bias=None if p.bias_term else False) + ")",
                          state, call)


class Embed(LayerType):
    """A learned table looked up by each input value as an index (embed_layer.cpp)."""

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """embed_layer.cpp: a (input_dim x num_output) table; ``bias_multiplier_`` (M) set in Reshape.
        Indices get no gradient (``Backward_cpu`` refuses ``propagate_down[0]``)."""
        p = layer.embed_param
        m = count(bottoms[0])
        params = [(p.input_dim, p.num_output)] + ([(p.num_output,)] if p.bias_term else [])
        buffers = [Buffer("bias_multiplier", m, SETUP)] if p.bias_term else []
        return LayerInfo([tuple(bottoms[0]) + (p.num_output,)], params, m * p.num_output, buffers, bottom_diff="none")

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
        """Caffe casts each input value to an int index (truncation, as ONNX's Cast)."""
        index = g.op1("Cast", [l.bottoms[0]], l.name, to=g.INT64)
        if not l.param.embed_param.bias_term:
            g.op1("Gather", [g.const(f"{l.name}/weight", l.blobs[0]), index], l.name, l.tops[0], axis=0)
            return
        rows = g.op1("Gather", [g.const(f"{l.name}/weight", l.blobs[0]), index], l.name, axis=0)
        g.op1("Add", [rows, g.const(f"{l.name}/bias", l.blobs[1].reshape(-1))], l.name, l.tops[0])

    pytorch = NOT_IN_PYTORCH
