"""Rules for the spatial layers: Convolution, Deconvolution, Pooling, SPP, LRN, Im2col, InnerProduct, Embed.

Each follows the layer's C++ source in BVLC Caffe 1.0 (``src/caffe/layers/<name>_layer.cpp``), with
the output sizes and windows of :mod:`caffetool.nets.geometry`; only members that persist after a
step count — blobs declared inside a function (LRN's ``padded_square``, ``padded_ratio``,
``accum_ratio``) are freed when it returns.
"""

from __future__ import annotations

from typing import Any

from caffetool.memory import device
from caffetool.memory.info import (BACKWARD, FORWARD, INT, PROPAGATE, SETUP, Buffer, LayerInfo, Shape, axis_index,
                                   count, field_or)
from caffetool.memory.parallel import ConvWork
from caffetool.nets import geometry


def convolution(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """base_conv_layer.cpp: ``col_buffer_`` (one image's columns, first used in forward) and
    ``bias_multiplier_`` (set in Reshape); the OpenMP engine's own scratch is in :mod:`.parallel`. conv_layer.cpp:50 (``Backward_cpu``) takes every bottom's
    ``mutable_cpu_diff()`` before it checks ``propagate_down``, so even the input's gradient exists.
    A 1x1 convolution needs no columns, yet base_conv_layer.cpp:286 (``backward_cpu_gemm``) takes
    ``col_buffer_`` before it checks ``is_1x1_``: the buffer appears once the gradient is
    propagated to the input."""
    return _conv(layer, bottoms, transposed=False)


def deconvolution(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """deconv_layer.cpp: the convolution's rules with input and output swapped (``reverse_dimensions``);
    its ``Backward_cpu`` also takes the bottom's gradient unconditionally (line 50), and its forward pass runs
    ``backward_cpu_gemm``, which takes ``col_buffer_`` even for a 1x1 kernel."""
    return _conv(layer, bottoms, transposed=True)


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
    work = {call: columns for call in device.CALLS}
    if not transposed and window == (3, 3, 1, 1):
        n, c = bottom[0], bottom[1]
        _, k, ho, wo = top
        work["backward filter"] = (device.winograd_nonfused_bytes(n, c, k, group, ho, wo), *columns)
    return work


def pooling(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """pooling_layer.cpp: MAX keeps ``max_idx_`` (ints) unless a second top takes the mask;
    STOCHASTIC keeps ``rand_idx_`` (training forward)."""
    p = layer.pooling_param
    n, c, h, w = bottoms[0]
    window = geometry.pool_window(p, (h, w))
    top = (n, c, *geometry.pool_output((h, w), window, geometry.rounds_up(p)))
    buffers = []
    if p.pool == 0 and len(layer.top) == 1:
        buffers.append(Buffer("max_idx", count(top), FORWARD, INT))
    if p.pool == 2 and phase == "train":
        buffers.append(Buffer("rand_idx", count(top), FORWARD))
    # layer_factory.cpp:133-142 (GetPoolingLayer): MAX pooling and a mask top keep Caffe's own layer
    cudnn = "CuDNNPooling" if p.engine != 1 and len(layer.top) == 1 and p.pool != 0 else None
    return LayerInfo([top] * len(layer.top), [], count(top) * count(window.kernel), buffers, cudnn=cudnn)


def spp(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """spp_layer.cpp: per pyramid level an inner Pooling layer (its top and, for MAX, its
    ``max_idx_``) and a Flatten sharing that top; a Split over the input when there are several
    levels (one gradient per level); a Concat into the top. The flattened tops' gradients are the
    concat's own, filled in backward."""
    p = layer.spp_param
    n, c, h, w = bottoms[0]
    levels = p.pyramid_height
    buffers, width = [], 0
    if levels == 1:  # spp_layer.cpp LayerSetUp: one Pooling layer straight into the top
        top = (n, c, 1, 1)
        return LayerInfo([top], [], count(bottoms[0]),
                         [Buffer("pooling_0.max_idx", count(top), FORWARD, INT)] if p.pool == 0 else [])
    for i in range(levels):
        pooled = (n, c, *geometry.pool_output((h, w), geometry.spp_window(i, (h, w))))
        width += c * pooled[2] * pooled[3]
        buffers.append(Buffer(f"pooling_{i}.top", count(pooled), FORWARD))
        buffers.append(Buffer(f"pooling_{i}.top.diff", count(pooled), BACKWARD))
        buffers.append(Buffer(f"split.top_{i}.diff", count(bottoms[0]), BACKWARD))
        if p.pool == 0:
            buffers.append(Buffer(f"pooling_{i}.max_idx", count(pooled), FORWARD, INT))
    return LayerInfo([(n, width)], [], count(bottoms[0]), buffers)


def lrn(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """lrn_layer.cpp. ACROSS_CHANNELS keeps ``scale_``; its backward takes the bottom's gradient
    unconditionally (line 187). WITHIN_CHANNEL is built from inner layers (``LayerSetUp``): a Split whose two
    tops share the input's data but have their own gradients, a Power (square), an AVE Pooling
    (same size), a Power and an Eltwise PROD into the top — three inner tops of data, five gradients."""
    p = layer.lrn_param
    size = p.local_size or 5
    blob = count(bottoms[0])
    if p.norm_region == 1:
        buffers = [Buffer(f"{name}.data", blob, FORWARD) for name in ("square_output", "pool_output", "power_output")]
        buffers += [Buffer(f"{name}.diff", blob, BACKWARD) for name in
                    ("product_input", "square_input", "square_output", "pool_output", "power_output")]
        # cudnn_lcn_layer.cpp: cudnnDivisiveNormalization* run none of the inner layers; Reshape
        # cudaMallocs two temporaries of the input's size; Backward_gpu takes the input's gradient
        return LayerInfo([bottoms[0]], [], blob * (size * size + 3), buffers,
                         cudnn="CuDNNLCN" if p.engine != 1 else None, cudnn_unused=tuple(b.name for b in buffers),
                         cudnn_buffers=[Buffer("tempData1", blob, SETUP), Buffer("tempData2", blob, SETUP)],
                         cudnn_bottom_diff="always")
    # layer_factory.cpp GetLRNLayer: a window wider than CUDNN_LRN_MAX_N (16) keeps Caffe's layer;
    # cudnn_lrn_layer.cu: cudnnLRNCrossChannel* keep no scale_
    cudnn = "CuDNNLRN" if p.engine != 1 and size <= 16 else None
    return LayerInfo([bottoms[0]], [], blob * size, [Buffer("scale", blob, FORWARD)], bottom_diff="always",
                     cudnn=cudnn, cudnn_unused=("scale",))


def im2col(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """im2col_layer.cpp: the column matrix is the top; ``Backward_cpu`` takes the bottom's gradient
    unconditionally."""
    n, c, size = bottoms[0][0], bottoms[0][1], bottoms[0][2:]
    w = geometry.conv_window(layer.convolution_param, len(size))
    top = (n, c * count(w.kernel), *geometry.conv_output(size, w))
    return LayerInfo([top], [], count(top), bottom_diff="always")


def inner_product(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
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


def embed(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """embed_layer.cpp: a (input_dim x num_output) table; ``bias_multiplier_`` (M) set in Reshape.
    Indices get no gradient (``Backward_cpu`` refuses ``propagate_down[0]``)."""
    p = layer.embed_param
    m = count(bottoms[0])
    params = [(p.input_dim, p.num_output)] + ([(p.num_output,)] if p.bias_term else [])
    buffers = [Buffer("bias_multiplier", m, SETUP)] if p.bias_term else []
    return LayerInfo([tuple(bottoms[0]) + (p.num_output,)], params, m * p.num_output, buffers, bottom_diff="none")
