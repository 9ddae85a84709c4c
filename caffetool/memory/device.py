"""What a GPU adds to the blobs Caffe allocates: CUDA's 2 MiB pages and cuDNN's workspace and handles.

Each rule was checked against NVML's peak while ``caffe train`` tests once and steps once, on an
H200 with CUDA 13 and cuDNN 9.19 running caffetool's engine (patch 0006), less a one-layer
baseline net (raw record ``benchmarks/gpu/h200-2026-11-27-call1/results.json``, Caffe's logs in the
``logs.tar.gz`` beside it):

* **Pages.** Every head of a ``SyncedMemory`` is one ``cudaMalloc`` of exactly its bytes
  (syncedmem.cpp ``to_gpu``, ``async_gpu_push``), and so is cuDNN's workspace. The driver maps
  device memory in 2 MiB pages (the granularity ``cuMemGetAllocationGranularity`` reports for
  device memory): an allocation of 2 MiB or more takes whole pages of its own, so a 2.8 MiB blob
  holds 4 MiB; smaller ones are packed side by side into shared pages at the 512-byte spacing
  ``cudaMalloc`` gives small blocks (its documented alignment is at least 256 bytes), the first of
  them into the page of small blocks the baseline process already holds (its one-layer net and
  cuBLAS take a few KiB of it): sixteen small convolutions on Caffe's engine, a Dropout layer, a
  Data layer, sixteen cuDNN ReLU or pooling layers all cost +0 MiB over the baseline (a TRAIN and a
  TEST Data layer of tiny batches: +2 MiB, one page these rules do not explain). Without this
  rule GoogLeNet b16 and ResNet-50 b16 (hundreds of blobs between 2 and 40 MiB) were estimated
  10-12% under the card; with it every net whose whole step the record caught is within 0.5%.
* **cuDNN's workspace** (patch 0006, ``caffe::cudnn::Workspace`` in src/caffe/util/cudnn.cpp): one
  per thread and device, shared by every cuDNN layer of the training and test nets (they run on
  the same thread); when a convolution call needs more it frees the old one and allocates the new
  need, so it ends as the largest single need of the calls that ran, never past
  ``CAFFE_CUDNN_WORKSPACE_MB`` (``Convolution::Rank`` drops every algorithm that needs more). A
  TEST net runs forward only; a TRAIN layer's weight-gradient call runs when its weights learn,
  its input-gradient call when the gradient propagates. Which algorithm cuDNN's heuristic ranks
  first, and so the need, is decided at run time; the engine logs each choice ("cuDNN conv1
  backward filter: WINOGRAD_NONFUSED, workspace 8190416 bytes"), and :func:`logged_needs` reads
  those lines so an estimate can take the real needs. Without them the need is modelled per call
  (``LayerInfo.cudnn_work``): a 3x3, stride-1 convolution's weight gradient by cuDNN's
  WINOGRAD_NONFUSED F(4x4, 3x3) (:func:`caffetool.layers.convolutions.winograd_nonfused_bytes`), the
  heuristic's first choice for 32 of the record's 42 such calls, every byte as logged; any other call
  by one image's im2col columns, what a GEMM-based algorithm works in. The model cannot foresee the other choices that
  need much more: FFT on small maps (CaffeNet b32's conv3 forward took 237 MiB where it predicts
  64), WINOGRAD_NONFUSED on 5x5 kernels (LeNet b64's conv1: 7.8 MiB against 0.1); give the log.
* **cuDNN itself**: the handle costs nothing visible (16 cuDNN ReLU or pooling layers: +0 MiB over
  the baseline); the first cuDNN convolution adds :data:`CUDNN_CONV_BYTES` once, whatever the
  number of convolutions (1, 4 and 16: +2 MiB each).
* **What NVML saw.** The step's last allocations (the solver's history, made by the first update)
  live for about a millisecond before ``caffe train`` ends and frees them, so a 2 ms sampler can
  miss them: the record's CaffeNet b32 on Caffe's engine measured 1,120 MiB, the estimate less its
  233 MiB of history 1,115 MiB. The estimate counts them: a longer run holds them throughout.
* **A stock engine** (BVLC's cudnn_conv_layer.cpp, no patch 0006): each convolution opens three
  handles and streams per group and a workspace of its own (8 MiB per algorithm at most), every
  other cuDNN layer a handle; :data:`STOCK_HANDLE_BYTES` is what an H100 measured per handle on
  such an engine (benchmarks/gpu/h100-memory.json).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

PAGE = 2 * 2**20  # CUDA's device-memory page
SMALL_SPACING = 512  # cudaMalloc's spacing of small blocks within a page
CUDNN_CONV = ("CuDNNConvolution", "CuDNNDeconvolution")
# Patch 0006's engine: memory_conv_cudnn_{1,4,16} +2.0 MiB over the baseline each, memory_cudnn_relu_16
# and memory_cudnn_pool_16 +0.0 (benchmarks/gpu/h200-2026-11-27-call1/results.json).
CUDNN_CONV_BYTES = 2 * 2**20
# A stock engine (benchmarks/RESULTS.md, "1, 4 and 16 convolutions", raw record
# benchmarks/gpu/h100-memory.json): +30.0 MiB for 1 cuDNN convolution, +114.0 for 4, +448.0 for 16;
# the slope (448.0 - 30.0) / 15 MiB per layer, each layer opening 3 handles and streams (group 1).
CUDNN_STREAMS_PER_GROUP = 3  # BVLC cudnn_conv_layer.cpp
STOCK_WORKSPACE_MB = 8.0  # BVLC cudnn_conv_layer.cpp: workspace_limit_bytes per algorithm, layer and group
STOCK_LAYER_MIB = (448.0 - 30.0) / 15
STOCK_HANDLE_BYTES = int(STOCK_LAYER_MIB * 2**20 / CUDNN_STREAMS_PER_GROUP)
LOGGED = re.compile(r"cuDNN (?P<layer>\S+) (?P<call>forward|backward filter|backward data): "
                    r"(?P<algo>\S+), workspace (?P<bytes>\d+) bytes")


def page_rounding(sizes: Iterable[int]) -> int:
    """Bytes the device holds beyond ``sizes`` (one ``cudaMalloc`` each) and beyond the baseline
    process: large ones in whole pages; small ones packed at :data:`SMALL_SPACING`, first into the
    page of small blocks the baseline already holds, so that a net whose small blocks fit in it
    adds nothing for them (negative: they cost less than their bytes)."""
    extra, packed, small = 0, 0, 0
    for size in sizes:
        if size >= PAGE:
            extra += -(-size // PAGE) * PAGE - size
        elif size > 0:
            packed += -(-size // SMALL_SPACING) * SMALL_SPACING
            small += size
    return extra + max(0, -(-packed // PAGE) - 1) * PAGE - small


def logged_needs(text: str) -> dict[tuple[str, str], int]:
    """(layer, call) -> the largest workspace the engine's log says cuDNN's chosen algorithm took
    (patch 0006 logs every choice, and again when a failing candidate gives way to the next)."""
    needs: dict[tuple[str, str], int] = {}
    for m in LOGGED.finditer(text):
        key = (m.group("layer"), m.group("call"))
        needs[key] = max(needs.get(key, 0), int(m.group("bytes")))
    return needs


def calls(node: Any, train_net: bool) -> list[str]:
    """The cuDNN calls a convolution layer makes in a forward (and, in the TRAIN net, backward) pass,
    by the names the engine logs: a deconvolution's forward pass is the convolution's backward-data
    call and its input gradient the forward call (patch 0006, cudnn_deconv_layer.cu)."""
    transposed = node.info.cudnn == "CuDNNDeconvolution"
    made = ["backward data" if transposed else "forward"]
    if train_net and node.need_backward:
        if node.lr_mults and node.lr_mults[0] != 0:
            made.append("backward filter")
        if any(node.bottom_need):
            made.append("forward" if transposed else "backward data")
    return made


def need(node: Any, call: str, limit: int, known: Mapping[tuple[str, str], int] | None) -> int:
    """One call's workspace: as logged when known, else the first modelled algorithm within ``limit``."""
    if known is not None and (node.name, call) in known:
        return min(known[(node.name, call)], limit)
    modelled = node.info.cudnn_work.get(call, (0,))
    return next((b for b in modelled if b <= limit), min(limit, modelled[-1]))


def shared_workspace(layers: list[tuple[Any, bool]], limit: int,
                     known: Mapping[tuple[str, str], int] | None = None) -> tuple[int, int]:
    """(index into ``layers``, bytes) of the call that sizes the one shared workspace; ``layers``
    are (convolution node, in the TRAIN net) pairs."""
    best, size = 0, 0
    for i, (node, train_net) in enumerate(layers):
        for call in calls(node, train_net):
            bytes_ = need(node, call, limit, known)
            if bytes_ > size:
                best, size = i, bytes_
    return best, size


def stock_bytes(node: Any, workspace_mb: float | None) -> tuple[int, int]:
    """A stock engine's cuDNN layer (BVLC's cudnn_*_layer.cpp): (its handles, its own workspace). A
    convolution opens ``CUDNN_STREAMS_PER_GROUP`` handles per group and one workspace, ``Reshape``'s
    largest per-algorithm need (at most 8 MiB, here one group's im2col columns) times group x 3;
    every other cuDNN layer opens one handle."""
    if node.info.cudnn not in CUDNN_CONV:
        return STOCK_HANDLE_BYTES, 0
    streams = node.info.group * CUDNN_STREAMS_PER_GROUP
    limit = int((workspace_mb or STOCK_WORKSPACE_MB) * 2**20)
    columns = sum(b.count for b in node.info.buffers if b.name == "col_buffer") * 4
    return streams * STOCK_HANDLE_BYTES, streams * min(limit, columns // node.info.group)
