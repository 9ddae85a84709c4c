"""Caffe's own device allocations, call by call: the LD_PRELOAD logger and the reading of its log.

NVML's used memory (the memory group's figure) counts everything on the card: the CUDA context,
cuBLAS's and cuDNN's handles and workspaces, and Caffe's blobs. Where the estimate is off, the
logger (``cudamalloc_log.c``, built here with the system C compiler; the GPU machine is x86-64
too) says which part is: every ``cudaMalloc`` and ``cudaFree`` that ``libcaffe`` makes through its
dynamically linked ``libcudart``, so the sum of live bytes at the peak is what Caffe itself held.
Allocations inside cuBLAS, cuDNN, cuRAND or NCCL do not pass through it (their own runtime or the
driver API), nor does the context: the difference between the two figures is theirs.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("cudamalloc_log.c")
LIBRARY = "libcudamalloc_log.so"
VARIABLE = "CUDAMALLOC_LOG"  # the file the library appends to; unset: no log


def build(target: Path, compiler: str = "cc") -> Path:
    """``cudamalloc_log.c`` as a shared library at ``target`` (no CUDA headers or libraries needed)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-Wall", "-Werror", str(SOURCE), "-o", str(target),
                    "-ldl", "-lpthread"], check=True)
    return target


def peak(log: str) -> dict:
    """The logged calls replayed in order: the most bytes live at once, the sizes live at that
    moment (largest first), and counts that show a log is whole (frees of pointers never seen)."""
    live: dict[str, int] = {}
    total = best = allocations = failed = unmatched = 0
    at_peak: list[int] = []
    for line in log.splitlines():
        parts = line.split()
        if len(parts) != 4 or parts[0] not in ("malloc", "free"):
            continue
        op, size, pointer, status = parts[0], int(parts[1]), parts[2], int(parts[3])
        if status != 0:
            failed += 1
        elif op == "malloc":
            allocations += 1
            live[pointer] = size
            total += size
            if total > best:
                best, at_peak = total, sorted(live.values(), reverse=True)
        elif pointer in live:
            total -= live.pop(pointer)
        elif pointer not in ("(nil)", "0x0"):  # cudaFree(NULL) is a no-op Caffe does make
            unmatched += 1
    return {"peak_live_bytes": best, "sizes_at_peak": at_peak, "allocations": allocations,
            "live_at_exit": total, "failed_calls": failed, "unmatched_frees": unmatched}
