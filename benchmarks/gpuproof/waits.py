"""How often a training iteration makes the host wait for the GPU, counted through the CUDA
runtime's and cuBLAS's own calls.

``hostwaits.c`` (built here with the system C compiler into an LD_PRELOAD library; the GPU machine
is x86-64 too) counts every blocking copy, synchronisation and cuBLAS reduction returned to host
memory that ``libcaffe`` makes, and writes the counts at exit. The ``training`` group trains LeNet
2,000 iterations without tests under it on each engine: the baseline waits about three times an
iteration (the loss), the engine under test only when it displays (every 100 iterations).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("hostwaits.c")
LIBRARY = "libhostwaits.so"
VARIABLE = "HOSTWAITS_LOG"  # the file the counts are written to at exit; unset: none
# The counters that make the host wait (a copy between two device buffers does not).
WAITING = ("memcpy_device_to_host", "memcpy_host_to_device", "device_synchronize", "stream_synchronize",
           "event_synchronize", "cublas_result_to_host")


def build(target: Path, compiler: str = "cc") -> Path:
    """``hostwaits.c`` as a shared library at ``target`` (no CUDA headers or libraries needed)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-Wall", "-Werror", str(SOURCE), "-o", str(target), "-ldl"],
                   check=True)
    return target


def read(text: str, iterations: int) -> dict:
    """The counts, their sum over the waiting kinds, and that sum per iteration."""
    counts = {name: int(value) for name, value in (line.split() for line in text.splitlines() if line.strip())}
    waits = sum(counts.get(name, 0) for name in WAITING)
    return {"counts": counts, "waits": waits, "waits_per_iteration": round(waits / iterations, 4)}
