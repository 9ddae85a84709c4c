"""The CPU's vector instructions, to pick BLAS kernels on the machine that runs the engine.

OpenBLAS chooses its kernels from the CPU's family and model numbers. A virtual CPU whose model
OpenBLAS 0.3.21 does not know (cloud machines reporting only "Intel Xeon Processor") gets the
generic SSE3 kernels ("Prescott") even when it has AVX-512: measured on such a machine, LeNet's
GEMMs ran 2 to 3 times slower than with the SkylakeX kernels. ``OPENBLAS_CORETYPE`` names the
kernels instead. caffetool derives it from the instruction sets the operating system reports, at
run time, so the engine binary stays portable and a user's own setting always wins.

An MKL engine (``engine.install --blas mkl``) picks its kernels itself, but MKL's memory manager
keeps the buffers of every BLAS call for reuse: measured on LeNet at batch 64, about 10 MiB (17%)
more than the net's own blobs, which the memory estimator cannot know. ``MKL_DISABLE_FAST_MM``
makes MKL free them after each call, so what Caffe allocates is again what ``memory.estimate``
computes. And MKL's products differ in the last bits with the thread count (LeNet's scores by up
to 8e-6 between 1 and 2 threads), so ``evaluate`` in one process and ``caffe test`` in another
could disagree on an image at the decision boundary; ``MKL_CBWR=AUTO,STRICT`` (MKL's strict
conditional numerical reproducibility) makes them bitwise equal for any thread count, at no cost
measured on LeNet. OpenBLAS ignores both variables.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
# OpenBLAS kernel families, best first, with the instructions each needs (x86-64 flag names).
KERNELS: tuple[tuple[str, frozenset[str]], ...] = (
    ("SkylakeX", frozenset({"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"})),
    ("Haswell", frozenset({"avx2", "fma"})),
)


def flags(cpuinfo: Path = CPUINFO) -> frozenset[str]:
    """The instruction-set flags of the first CPU (empty where /proc/cpuinfo has none, e.g. on ARM)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def openblas_kernel(available: frozenset[str]) -> str | None:
    """The best OpenBLAS kernel family these instructions run, or None to leave OpenBLAS's choice."""
    return next((name for name, needed in KERNELS if needed <= available), None)


def blas_environment(environ: Mapping[str, str], cpuinfo: Path = CPUINFO) -> dict[str, str]:
    """``OPENBLAS_CORETYPE`` for this CPU, ``MKL_DISABLE_FAST_MM`` and ``MKL_CBWR``, each unless the
    environment already sets it."""
    wanted = {"MKL_DISABLE_FAST_MM": "1", "MKL_CBWR": "AUTO,STRICT"}
    if kernel := openblas_kernel(flags(cpuinfo)):
        wanted["OPENBLAS_CORETYPE"] = kernel
    return {name: value for name, value in wanted.items() if name not in environ}
