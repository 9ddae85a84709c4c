"""The scratch memory of the OpenMP engine's convolution (engine patch 0004), sized as the engine sizes it.

caffetool's engine splits a convolution's batch over T CPU threads (``OMP_NUM_THREADS``). A 2-D,
ungrouped convolution whose kernel is not 1x1 multiplies chunks of images in one GEMM
(``BaseConvolutionLayer::chunk_images``): each thread holds a chunk's columns and outputs side by
side, and BVLC's ``col_buffer_`` is never touched on the CPU. Other convolutions keep
``col_buffer_`` for the first thread and one more column buffer per extra thread. Either way each
extra thread accumulates its own weight gradient. A stock engine has none of this.
"""

from __future__ import annotations

import math
from caffetool.layers.allocation import BACKWARD, FORWARD, Buffer, ConvWork

CHUNK_BYTES = 8 << 20  # kChunkBytes, include/caffe/util/parallel.hpp
ENGINE_FLOAT = 4  # the engine computes in float, whatever --dtype the estimate scales by


def chunk_images(work: ConvWork, threads: int) -> int:
    """Images per GEMM, as ``chunk_images`` computes it (1: one image at a time)."""
    if not work.chunkable:
        return 1
    most = max(1, min(CHUNK_BYTES // (ENGINE_FLOAT * (work.col + work.top)), work.batch))
    share = math.ceil(work.batch / threads)
    per_thread = math.ceil(share / most)
    return math.ceil(share / per_thread)


def buffers(work: ConvWork, threads: int) -> tuple[list[Buffer], bool]:
    """The extra buffers with ``threads`` CPU threads, and whether ``col_buffer_`` stays unused on the CPU."""
    threads = max(1, min(threads, work.batch))  # batch_threads(): never more threads than images
    chunk = chunk_images(work, threads)
    extra = []
    if chunk > 1:
        threads = min(threads, math.ceil(work.batch / chunk))
        extra.append(Buffer("chunk_buffers", threads * chunk * (work.col + work.top), "cpu-" + FORWARD))
    elif threads > 1 and not work.one_by_one:
        extra.append(Buffer("thread_col_buffers", (threads - 1) * work.col, "cpu-" + FORWARD))
    if threads > 1:
        extra.append(Buffer("thread_weight_diffs", (threads - 1) * work.weights, "cpu-" + BACKWARD, param=0))
    return extra, chunk > 1
