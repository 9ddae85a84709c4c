"""Rules for the spatial layers: Convolution, Deconvolution, Pooling, SPP, LRN, Im2col, InnerProduct, Embed.

Each follows the layer's C++ source in BVLC Caffe 1.0 (``src/caffe/layers/<name>_layer.cpp``);
only members that persist after a step count — blobs declared inside a function (LRN's
``padded_square``, ``padded_ratio``, ``accum_ratio``) are freed when it returns.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from caffetool.memory import device
from caffetool.memory.info import (BACKWARD, FORWARD, INT, PROPAGATE, SETUP, Buffer, LayerInfo, Shape, axis_index,
                                   count, field_or)
from caffetool.memory.parallel import ConvWork


def _pair(values: Sequence[int], single: tuple[int, int] | None, default: int) -> tuple[int, int]:
    """Caffe's kernel/stride/pad spelling: repeated field, or _h/_w pair, or the default."""
    if values:
        v = list(values)
        return (v[0], v[-1]) if len(v) <= 2 else (v[0], v[1])
    if single is not None:
        return single
    return (default, default)


def conv_geometry(p: Any) -> tuple[tuple[int, int], ...]:
    """(kernel, stride, pad, dilation), each as (h, w)."""
    kernel = _pair(p.kernel_size, (p.kernel_h, p.kernel_w) if p.HasField("kernel_h") else None, 0)
    stride = _pair(p.stride, (p.stride_h, p.stride_w) if p.HasField("stride_h") else None, 1)
    pad = _pair(p.pad, (p.pad_h, p.pad_w) if p.HasField("pad_h") else None, 0)
    dilation = _pair(p.dilation, None, 1)
    return kernel, stride, pad, dilation


def _is_1x1(kernel: tuple[int, int], stride: tuple[int, int], pad: tuple[int, int]) -> bool:
    """``BaseConvolutionLayer::is_1x1_``: such a layer multiplies the input directly, no column buffer."""
    return kernel == (1, 1) and stride == (1, 1) and pad == (0, 0)


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
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = conv_geometry(p)
    group = p.group or 1
    out = p.num_output
    tops, macc, col = [], 0, 0
    for shape in bottoms:
        n, c, h, w = shape
        if transposed:
            ho, wo = sh * (h - 1) + (dh * (kh - 1) + 1) - 2 * ph, sw * (w - 1) + (dw * (kw - 1) + 1) - 2 * pw
            col = out * kh * kw * h * w  # kernel_dim_ x group_ rows, one per input pixel
            macc += n * c * h * w * (out // group) * kh * kw
        else:
            ho = (h + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
            wo = (w + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
            col = c * kh * kw * ho * wo
            macc += n * out * ho * wo * (c // group) * kh * kw
        tops.append((n, out, ho, wo))
    c = bottoms[0][1]
    weights = (c, out // group, kh, kw) if transposed else (out, c // group, kh, kw)
    params = [weights] + ([(out,)] if p.bias_term else [])
    one = _is_1x1((kh, kw), (sh, sw), (ph, pw))
    buffers = [Buffer("col_buffer", col, PROPAGATE if one and not transposed else FORWARD)]
    if p.bias_term:
        buffers.append(Buffer("bias_multiplier", tops[0][2] * tops[0][3], SETUP))
    work = None
    if not transposed:  # the OpenMP engine's convolution scratch (memory.parallel)
        spatial = tops[0][2] * tops[0][3]
        work = ConvWork(batch=bottoms[0][0], col=col, top=out * spatial, weights=count(weights),
                        chunkable=not one and group == 1, one_by_one=one)
    engine = "CuDNNDeconvolution" if transposed else "CuDNNConvolution"
    cudnn = engine if p.engine != 1 and (dh, dw) == (1, 1) else None  # layer_factory.cpp: no dilation in cuDNN
    # cudnn_conv_layer.cu (and cudnn_deconv_layer.cu): cuDNN's kernels need no columns, cudnnAddTensor
    # adds the bias without bias_multiplier_, and the input's gradient is taken only when it propagates
    return LayerInfo(tops, params, macc, buffers, group=group, bottom_diff="always", cudnn=cudnn, conv_work=work,
                     cudnn_unused=("col_buffer", "bias_multiplier"), cudnn_bottom_diff="propagate",
                     cudnn_work=_cudnn_work(bottoms[0], tops[0], group, col, (kh, kw, sh, sw), transposed))


def _cudnn_work(bottom: Shape, top: Shape, group: int, col: int, geometry: tuple[int, ...],
                transposed: bool) -> dict[str, tuple[int, ...]]:
    """The modelled workspace of each cuDNN call (:mod:`caffetool.memory.device`): one image's
    columns, and first WINOGRAD_NONFUSED for a 3x3, stride-1 convolution's weight gradient."""
    columns = (col * 4,)
    work = {call: columns for call in device.CALLS}
    if not transposed and geometry == (3, 3, 1, 1):
        n, c = bottom[0], bottom[1]
        _, k, ho, wo = top
        work["backward filter"] = (device.winograd_nonfused_bytes(n, c, k, group, ho, wo), *columns)
    return work


def pool_output(size: int, kernel: int, stride: int, pad: int, ceil: bool) -> int:
    """pooling_layer.cpp ``Reshape``: ceil (default) or floor, and the last window starts inside the image."""
    steps = (size + 2 * pad - kernel) / stride
    out = (math.ceil(steps) if ceil else math.floor(steps)) + 1
    if pad and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def pooling(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
    """pooling_layer.cpp: MAX keeps ``max_idx_`` (ints) unless a second top takes the mask;
    STOCHASTIC keeps ``rand_idx_`` (training forward)."""
    p = layer.pooling_param
    n, c, h, w = bottoms[0]
    if p.global_pooling:
        kh, kw, sh, sw, ph, pw = h, w, 1, 1, 0, 0
    else:
        kh, kw = (p.kernel_h, p.kernel_w) if p.HasField("kernel_h") else (p.kernel_size, p.kernel_size)
        sh, sw = (p.stride_h, p.stride_w) if p.HasField("stride_h") else (p.stride, p.stride)
        ph, pw = (p.pad_h, p.pad_w) if p.HasField("pad_h") else (p.pad, p.pad)
    ceil = getattr(p, "round_mode", 0) == 0
    top = (n, c, pool_output(h, kh, sh, ph, ceil), pool_output(w, kw, sw, pw, ceil))
    buffers = []
    if p.pool == 0 and len(layer.top) == 1:
        buffers.append(Buffer("max_idx", count(top), FORWARD, INT))
    if p.pool == 2 and phase == "train":
        buffers.append(Buffer("rand_idx", count(top), FORWARD))
    # layer_factory.cpp:133-142 (GetPoolingLayer): MAX pooling and a mask top keep Caffe's own layer
    cudnn = "CuDNNPooling" if p.engine != 1 and len(layer.top) == 1 and p.pool != 0 else None
    return LayerInfo([top] * len(layer.top), [], count(top) * kh * kw, buffers, cudnn=cudnn)


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
        bins = 2 ** i
        kh, kw = math.ceil(h / bins), math.ceil(w / bins)
        ph, pw = (kh * bins - h + 1) // 2, (kw * bins - w + 1) // 2
        pooled = (n, c, pool_output(h, kh, kh, ph, True), pool_output(w, kw, kw, pw, True))
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
    p = layer.convolution_param
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = conv_geometry(p)
    n, c, h, w = bottoms[0]
    ho = (h + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
    wo = (w + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
    top = (n, c * kh * kw, ho, wo)
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
