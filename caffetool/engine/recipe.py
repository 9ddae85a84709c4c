"""The engine recipe, declared as data: which source, which patches, which packages, which flags.

BVLC Caffe has had no release since 2018 and no current distribution ships it. Debian's source
package of 2021 is the best-kept copy: its orig tarball is BVLC/caffe at commit 99bd997, and its
patch series fixes the build against newer libraries. caffetool pins both tarballs by sha256, so
a copy from apt, a local folder or any URL is the same bytes, and adds its own patches for what
broke after 2021 (see ``patches/``).
"""

from __future__ import annotations

import platform
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

from caffetool.apt import SourcePackage, Tarball
from caffetool.errors import BuildError, ConfigError

CAFFE_SOURCE = SourcePackage(
    package="caffe",
    version="1.0.0+git20180821.99bd997-8",
    suite="bullseye",
    component="main",
    upstream_commit="99bd997",
    tarballs=(
        Tarball(
            "caffe_1.0.0+git20180821.99bd997.orig.tar.gz",
            "e0eb3f06794f7402c77b7dec8e8480273ee1a1bb192e9122b621a69d4147ad0c",
            8_518_844,
        ),
        Tarball(
            "caffe_1.0.0+git20180821.99bd997-8.debian.tar.xz",
            "07cf073227494a6b07234e40cb5df91db566616593eef9baafdc4d06ad159f21",
            14_928,
        ),
    ),
)

PATCH_DIR = Path(__file__).with_name("patches")

# caffetool's own patches, applied in this order after Debian's series. Each file's header
# says what it fixes and why. The fixes touch only code that the chosen options compile, so all
# are applied to every build; the tuning patches (OpenMP in the CPU layers) are left out of a
# --stock build, which is BVLC Caffe as it builds today, the reference that speed is measured against.
# 0011 adds layers (the SSD fork's inference layers) and pycaffe's check of a net before it is built:
# what models the engine can open, so every build has it, --stock included.
FIX_PATCHES: tuple[str, ...] = (
    "0001-protobuf-3.21-SetTotalBytesLimit.patch",
    "0002-cudnn-8-algorithm-selection.patch",
    "0003-cuda-13-device-query.patch",
    "0010-pycaffe-io-on-current-libraries.patch",
    "0011-ssd-inference-layers.patch",
    "0015-pycaffe-imports-without-scikit-image-and-scipy.patch",
)
TUNING_PATCHES: tuple[str, ...] = (
    "0004-openmp-cpu-layers.patch",
    "0006-gpu-algorithms-once-shared-cudnn-handle.patch",
    "0007-pycaffe-passes-release-the-gil.patch",
    "0009-threads-follow-the-cpu.patch",
)
# How the engine is compiled (unity batches, precompiled headers), not what it computes: every build,
# --stock included, so that the stock reference costs no more to build than the engine.
BUILD_PATCHES: tuple[str, ...] = (
    "0008-unity-build-precompiled-headers.patch",
)
# The GPU training loop without host waits: the loss kept on the device, one fused update, the
# iteration replayed as a CUDA graph. Tuning, so not in a --stock build; written against the tree
# the unity build's patch leaves, so applied after it.
GPU_LOOP_PATCHES: tuple[str, ...] = (
    "0012-gpu-loss-stays-on-the-device.patch",
    "0013-gpu-fused-solver-update.patch",
    "0014-gpu-iteration-as-a-cuda-graph.patch",
)
PROJECT_PATCHES: tuple[str, ...] = FIX_PATCHES + TUNING_PATCHES + BUILD_PATCHES + GPU_LOOP_PATCHES
# Applied only to --blas mkl builds (it changes only FindMKL.cmake), so OpenBLAS engines keep theirs.
MKL_PATCHES: tuple[str, ...] = (
    "0005-mkl-gnu-openmp-threading.patch",
)

# The BLAS libraries an engine can be built with: caffetool's name -> Caffe's CMake BLAS value.
BLAS: dict[str, str] = {
    "openblas": "Open",
    "mkl": "MKL",
}
# MKL where its wheels exist (x86-64): on the AVX-512 Xeon caffetool is measured on, the tuned engine
# trains LeNet 1.10-1.23x as fast on MKL as on OpenBLAS (benchmarks/RESULTS.md); elsewhere OpenBLAS.
DEFAULT_BLAS = "mkl" if platform.machine() == "x86_64" else "openblas"

# Debian/Ubuntu packages needed to fetch, patch and build the engine: a list of its own, which
# ./bootstrap reads too (it installs them while pip installs the Python side).
BUILD_PACKAGES: tuple[str, ...] = tuple(
    line.strip() for line in Path(__file__).with_name("build-packages.txt").read_text().splitlines()
    if line.strip() and not line.lstrip().startswith("#"))

# Where Debian puts each OpenBLAS build (libopenblas-{openmp,pthread}-dev), by multiarch triplet.
MULTIARCH = sysconfig.get_config_var("MULTIARCH") or f"{platform.machine()}-linux-gnu"
OPENBLAS_OPENMP = {
    "OpenBLAS_LIB": f"/usr/lib/{MULTIARCH}/openblas-openmp/libopenblas.so",
    "OpenBLAS_INCLUDE_DIR": f"/usr/include/{MULTIARCH}/openblas-openmp",
}

# Python modules pycaffe imports at `import caffe`, with the PyPI names that provide them.
PYCAFFE_MODULES: dict[str, str] = {
    "numpy": "numpy",
    "google.protobuf": "protobuf",
    "six": "six",
    "skimage": "scikit-image",
}


def blas_name(options: dict) -> str:
    """An engine's BLAS by its ``--blas`` name, from its manifest's recorded options."""
    cmake = options.get("blas")
    return next((name for name, value in BLAS.items() if value == cmake), str(cmake))


@dataclass(frozen=True)
class BuildOptions:
    """What varies between engine builds. Two installs with equal options are interchangeable."""

    cuda: bool = False
    cudnn: bool = False
    nccl: bool = False
    cuda_arch: tuple[str, ...] = ()
    blas: str = ""  # CMake's BLAS value; empty: DEFAULT_BLAS for a CPU engine, OpenBLAS for a CUDA one
    extra_cmake: tuple[str, ...] = field(default=())
    stock: bool = False  # BVLC Caffe without caffetool's tuning: serial layers, threaded OpenBLAS

    def __post_init__(self) -> None:
        # A CUDA engine computes on the GPU; its CPU mode (checks) needs no MKL beside the CUDA libraries.
        if not self.blas:
            object.__setattr__(self, "blas", BLAS["openblas"] if self.cuda else BLAS[DEFAULT_BLAS])

    @property
    def patches(self) -> tuple[str, ...]:
        return (FIX_PATCHES + BUILD_PATCHES if self.stock else PROJECT_PATCHES) + (MKL_PATCHES if self.mkl else ())

    @property
    def mkl(self) -> bool:
        return self.blas == BLAS["mkl"]

    @property
    def openmp(self) -> bool:
        """OpenMP layers for CPU builds; CUDA builds keep Caffe's serial CPU code (their CPU mode is
        for checks, and nvcc's host compiler flags are left as the verified CUDA build has them)."""
        return not self.stock and not self.cuda

    def as_dict(self) -> dict[str, object]:
        return {
            "cpu_only": not self.cuda,
            "use_cudnn": self.cudnn,
            "use_nccl": self.nccl,
            "cuda_arch": list(self.cuda_arch),
            "blas": self.blas,
            "openmp": self.openmp,
            "stock": self.stock,
            "extra_cmake": list(self.extra_cmake),
        }


def cmake_flags(options: BuildOptions, python: str, install_prefix: Path, mkl_root: Path | None = None) -> list[str]:
    """The CMake command-line definitions for one build, recorded verbatim in the manifest.

    ``mkl_root``: the MKLROOT an MKL build links against (:mod:`caffetool.engine.mkl`).
    """
    flags = {
        "CMAKE_BUILD_TYPE": "Release",
        "CMAKE_INSTALL_PREFIX": str(install_prefix),
        "CPU_ONLY": "OFF" if options.cuda else "ON",
        "USE_CUDNN": "ON" if options.cudnn else "OFF",
        "USE_NCCL": "ON" if options.nccl else "OFF",
        "BLAS": options.blas,
        "BUILD_SHARED_LIBS": "ON",
        "BUILD_python": "ON",
        "BUILD_python_layer": "ON",
        "python_version": "3",
        "PYTHON_EXECUTABLE": python,
        "USE_LMDB": "ON",
        "USE_LEVELDB": "ON",
        "USE_OPENCV": "ON",
        "BUILD_docs": "OFF",
        "BUILD_matlab": "OFF",
        # MKL's GNU threading layer needs GCC's OpenMP runtime even where the layers are serial.
        "USE_OPENMP": "ON" if options.openmp or options.mkl else "OFF",
    }
    if options.mkl:
        if mkl_root is None:
            raise BuildError("an MKL build needs the MKLROOT it links against (engine.mkl.assemble)")
        flags.update(MKL_ROOT=str(mkl_root), MKL_USE_SINGLE_DYNAMIC_LIBRARY="OFF", MKL_THREADING="GNU")
    elif options.openmp:
        flags.update(OPENBLAS_OPENMP)
    if options.cuda:
        # Caffe's Cuda.cmake "Auto"/"All" lists include architectures CUDA 11+ rejects.
        bins = " ".join(options.cuda_arch)
        flags.update(
            CUDA_ARCH_NAME="Manual",
            CUDA_ARCH_BIN=bins,
            CUDA_ARCH_PTX=options.cuda_arch[-1] if options.cuda_arch else "",
        )
    return [f"-D{k}={v}" for k, v in flags.items()] + list(options.extra_cmake)


# CMake definitions caffetool makes itself (:func:`cmake_flags`), and what sets each instead of a
# ``--cmake-arg``: CMake takes the last definition, so a user's would win and leave caffetool's
# record of the build (or the install itself: CMAKE_INSTALL_PREFIX) wrong after minutes of building.
OWN_DEFINITIONS = {
    "CMAKE_INSTALL_PREFIX": "--prefix", "CPU_ONLY": "--cuda", "USE_CUDNN": "--cudnn", "USE_NCCL": "--nccl",
    "BLAS": "--blas", "CUDA_ARCH_NAME": "--cuda-arch", "CUDA_ARCH_BIN": "--cuda-arch", "CUDA_ARCH_PTX": "--cuda-arch",
    "MKL_ROOT": "--blas mkl", "USE_OPENMP": "--stock", "PYTHON_EXECUTABLE": "the Python that runs caffetool",
    "python_version": "the Python that runs caffetool", "BUILD_SHARED_LIBS": "caffetool's recipe",
    "BUILD_python": "caffetool's recipe", "BUILD_python_layer": "caffetool's recipe",
}


def check_cmake_args(extra: tuple[str, ...] | list[str]) -> None:
    """Refuse a ``--cmake-arg`` that defines what caffetool defines itself, naming what sets it."""
    for arg in extra:
        if not arg.startswith("-D"):
            continue
        name = arg[2:].split("=", 1)[0].split(":", 1)[0].strip()
        if name in OWN_DEFINITIONS:
            raise ConfigError(f"--cmake-arg {arg}: caffetool sets {name} itself ({OWN_DEFINITIONS[name]} decides it); "
                              "drop that --cmake-arg (nothing was built)")
