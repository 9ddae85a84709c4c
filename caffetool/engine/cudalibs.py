"""The CUDA libraries a GPU engine loads, and the PyPI wheels that provide them, declared as data.

A bundle never carries these (they are large, licensed for redistribution only by NVIDIA's own
wheels, and must match the machine's driver): like PyTorch's wheels it names the wheels it needs,
and its ELF files look for the libraries where those wheels put them inside ``site-packages``.
The folder layout changed with CUDA 13: the toolkit libraries moved into ``nvidia/cu13/lib``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CudaLibrary:
    soname: str
    wheel: str  # the PyPI distribution
    requirement: str  # what a bundle declares: any release with this soname
    folder: str  # where the wheel installs it, relative to site-packages


CUDA_LIBRARIES: dict[int, tuple[CudaLibrary, ...]] = {
    13: (
        CudaLibrary("libcudart.so.13", "nvidia-cuda-runtime", "nvidia-cuda-runtime>=13,<14", "nvidia/cu13/lib"),
        CudaLibrary("libcublas.so.13", "nvidia-cublas", "nvidia-cublas>=13,<14", "nvidia/cu13/lib"),
        CudaLibrary("libcublasLt.so.13", "nvidia-cublas", "nvidia-cublas>=13,<14", "nvidia/cu13/lib"),
        CudaLibrary("libcurand.so.10", "nvidia-curand", "nvidia-curand>=10.4,<11", "nvidia/cu13/lib"),
        CudaLibrary("libcudnn.so.9", "nvidia-cudnn-cu13", "nvidia-cudnn-cu13>=9,<10", "nvidia/cudnn/lib"),
        CudaLibrary("libnccl.so.2", "nvidia-nccl-cu13", "nvidia-nccl-cu13>=2,<3", "nvidia/nccl/lib"),
    ),
    12: (
        CudaLibrary("libcudart.so.12", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu12>=12,<13",
                    "nvidia/cuda_runtime/lib"),
        CudaLibrary("libcublas.so.12", "nvidia-cublas-cu12", "nvidia-cublas-cu12>=12,<13", "nvidia/cublas/lib"),
        CudaLibrary("libcublasLt.so.12", "nvidia-cublas-cu12", "nvidia-cublas-cu12>=12,<13", "nvidia/cublas/lib"),
        CudaLibrary("libcurand.so.10", "nvidia-curand-cu12", "nvidia-curand-cu12>=10.3,<10.4", "nvidia/curand/lib"),
        CudaLibrary("libcudnn.so.9", "nvidia-cudnn-cu12", "nvidia-cudnn-cu12>=9,<10", "nvidia/cudnn/lib"),
        CudaLibrary("libcudnn.so.8", "nvidia-cudnn-cu12", "nvidia-cudnn-cu12>=8,<9", "nvidia/cudnn/lib"),
        CudaLibrary("libnccl.so.2", "nvidia-nccl-cu12", "nvidia-nccl-cu12>=2,<3", "nvidia/nccl/lib"),
    ),
}

# Provided by the NVIDIA driver, never by a wheel or a bundle.
DRIVER_SONAMES = frozenset({"libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1"})


def cuda_major(sonames: set[str]) -> int | None:
    """The CUDA major version a set of needed sonames implies (from the runtime's), or None for CPU."""
    for major in CUDA_LIBRARIES:
        if f"libcudart.so.{major}" in sonames:
            return major
    return None


def library(major: int, soname: str) -> CudaLibrary | None:
    return next((lib for lib in CUDA_LIBRARIES[major] if lib.soname == soname), None)


def is_cuda_soname(soname: str) -> bool:
    return any(lib.soname == soname for libs in CUDA_LIBRARIES.values() for lib in libs)


def requirement(lib: CudaLibrary, built_against: list[str]) -> str:
    """What a bundle declares for ``lib``: its wheel at the version the engine was built against, or
    newer within the major (NVIDIA supports running on a newer minor than the one built against,
    never an older one); the wheel's whole major where the build's version is not known."""
    for pin in built_against:
        name, _, version = pin.partition("==")
        if name == lib.wheel and version:
            return f"{lib.wheel}>={version},<{lib.requirement.rsplit(',<', 1)[1]}"
    return lib.requirement


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def installed(names: list[str]) -> dict[str, str | None]:
    """The version of each wheel installed in this Python (None: not installed)."""
    from importlib import metadata  # noqa: PLC0415 - 30 ms at every command's start otherwise

    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def too_old(requirements: list[str]) -> list[str]:
    """Each requirement (``name>=floor,<ceiling``) that the installed wheel of this Python misses,
    as "name VERSION (needs >=floor)"; a wheel not installed counts as missing."""
    missing = []
    for req in requirements:
        name, _, spec = req.partition(">=")
        floor, _, ceiling = spec.partition(",<")
        have = installed([name])[name]
        if have is None:
            missing.append(f"{name} not installed (needs >={floor})")
            continue
        if version_tuple(have) < version_tuple(floor) or (ceiling and version_tuple(have) >= version_tuple(ceiling)):
            missing.append(f"{name} {have} (needs >={floor},<{ceiling})")
    return missing
