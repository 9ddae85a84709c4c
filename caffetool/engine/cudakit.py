"""A CUDA toolkit folder for compile-only GPU builds on machines without a full CUDA install.

The CUDA 13 compiler (nvcc, cudart) may be present while cuBLAS, cuRAND, cuDNN and NCCL are not.
Their PyPI wheels carry the headers and libraries; this module unpacks them and merges them with
nvcc's own tree into one toolkit-shaped folder (``bin/``, ``include/``, ``lib64/`` with unversioned
``.so`` links) that CMake's FindCUDA accepts. Binaries built against it link, but only run where a
GPU driver is present.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from caffetool import fsio
from caffetool.errors import BuildError
from caffetool.proc import run_checked

# Wheels whose CUDA major version matches nvcc 13.0 (the *-cu13 spellings of cuBLAS, cuRAND and
# CCCL are empty placeholders on PyPI).
WHEELS: tuple[str, ...] = (
    "nvidia-cublas==13.0.2.14",
    "nvidia-curand==10.4.0.35",
    "nvidia-cuda-cccl==13.0.85",
    "nvidia-cudnn-cu13==9.12.0.46",
    "nvidia-nccl-cu13==2.27.7",
)


def nvcc_root() -> Path:
    nvcc = shutil.which("nvcc")
    if not nvcc:
        raise BuildError("nvcc is not on PATH; a compile-only CUDA build needs the CUDA compiler")
    real = Path(nvcc).resolve()
    if real.parent.name != "bin" or not (real.parent.parent / "include" / "cuda_runtime.h").exists():
        # a wrapper script (``exec /usr/local/cuda-X/bin/nvcc``): ask nvcc where it lives
        done = subprocess.run([nvcc, "--dryrun", "-c", "-x", "cu", "/dev/null", "-o", "/dev/null"],
                              capture_output=True, text=True)
        for line in done.stderr.splitlines():
            if "TOP=" in line:
                return Path(line.split("TOP=", 1)[1].strip()).resolve()
        raise BuildError(f"cannot tell where the CUDA toolkit of {nvcc} is")
    return real.parent.parent


def assemble(out: Path, wheels_dir: Path) -> Path:
    """Build (once) the merged toolkit folder ``out``; returns it."""
    if (out / ".complete").exists():
        return out
    root = nvcc_root()
    wheels_dir.mkdir(parents=True, exist_ok=True)
    run_checked([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", wheels_dir, *WHEELS],
                what="pip download of the CUDA library wheels", error=BuildError)
    with fsio.staged_dir(out) as tmp:
        (tmp / "include").mkdir()
        (tmp / "lib64").mkdir()
        for name in ("bin", "nvvm"):
            if (root / name).exists():
                os.symlink(root / name, tmp / name)
        _link_children(root / "include", tmp / "include")
        _link_children(root / "lib64", tmp / "lib64")
        for wheel in sorted(wheels_dir.glob("nvidia_*.whl")):
            unpacked = tmp / "wheels" / wheel.stem.split("-")[0]
            with zipfile.ZipFile(wheel) as z:
                z.extractall(unpacked)
            for package in (unpacked / "nvidia").iterdir():
                _link_children(package / "include", tmp / "include")
                _link_children(package / "lib", tmp / "lib64")
        for lib in list((tmp / "lib64").glob("*.so.*")):  # libcublas.so.13 -> libcublas.so
            plain = tmp / "lib64" / (lib.name.split(".so.")[0] + ".so")
            if not plain.exists():
                os.symlink(lib.name, plain)
        (tmp / ".complete").write_text(" ".join(WHEELS) + "\n")
    return out


def _link_children(source: Path, dest: Path) -> None:
    """Link every entry of ``source`` into ``dest``: relative links for entries inside the folder
    being assembled (it is renamed when complete), absolute ones for nvcc's own tree."""
    if not source.is_dir():
        return
    inside = dest.parent.resolve()
    for child in source.iterdir():
        target = dest / child.name
        if target.exists() or target.is_symlink():
            continue
        real = child.resolve()
        os.symlink(os.path.relpath(real, dest) if inside in real.parents else real, target)
