"""The compile-only GPU build: the engine recipe with CUDA, cuDNN and NCCL on, built here.

It proves, without a GPU, that the project's patches let BVLC Caffe compile against current CUDA
(13.0, the nvcc on these machines), cuDNN 9 and NCCL 2: every ``.cu`` file is compiled for the
architecture list and ``libcaffe``, the ``caffe`` binary and pycaffe are linked. The result is
installed into a side prefix (never linked into Python), whose ``caffe --version`` must run and
whose ``caffe device_query`` must fail for want of a GPU.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from caffetool import config
from caffetool.engine import cudaarch, cudakit
from caffetool.engine.fatbin import Architectures
from caffetool.engine.install import install
from caffetool.engine.locate import caffe_env
from caffetool.engine.recipe import BuildOptions
from caffetool.errors import BuildError
from caffetool.proc import exit_status, last_lines, run_checked

def check_prefix() -> Path:
    """Where the compile-checked CUDA engine is installed (a side prefix, bundled by GPU images from PyPI)."""
    return config.cache_home() / "engine-cuda-check"


def suite_folder() -> Path:
    """Where ``--test-suite`` keeps the compile-checked engine's test suite, for a machine with a GPU."""
    return config.cache_home() / "engine-cuda-check-suite"


def toolkit_folder() -> Path:
    """The CUDA toolkit folder compile-only builds use: nvcc's tree and the CUDA wheels, merged once."""
    return cudakit.assemble(config.cache_home() / "cuda-toolkit-13", config.cache_home() / "cuda-wheels")


@dataclass
class CheckResult:
    prefix: Path
    cu_objects: int
    seconds: float
    version: str
    device_query: str
    log: Path | None
    device_code: str  # what libcaffe carries: "sm_75, ..., sm_121, PTX 12.1"


def compile_check(arch: tuple[str, ...] = (), jobs: int | None = None, source: str | None = None,
                  extra_cmake: tuple[str, ...] = (), say: Callable[[str], object] = print,
                  test_suite: bool = False) -> CheckResult:
    """Build the CUDA engine into a side prefix; its ``caffe`` must run, and fail to find a GPU.

    ``arch``: the compute capabilities to build for; empty: every one the kit's nvcc supports
    (:func:`caffetool.engine.cudaarch.default`). ``test_suite``: build Caffe's test suite too, run its CPU half (its GPU half where a GPU is), and
    keep it in :func:`suite_folder` for a machine with a GPU."""
    kit = toolkit_folder()
    prefix = check_prefix()
    options = BuildOptions(cuda=True, cudnn=True, nccl=True, cuda_arch=arch, extra_cmake=(
        f"-DCUDA_TOOLKIT_ROOT_DIR={kit}", f"-DCUDNN_ROOT={kit}",
        f"-DNCCL_INCLUDE_DIR={kit / 'include'}", f"-DNCCL_LIBRARIES={kit / 'lib64' / 'libnccl.so'}",
        *extra_cmake))
    say(f"CUDA toolkit folder: {kit}")
    result = install(prefix=prefix, options=options, source_location=source, jobs=jobs, force=True,
                     say=say, link=False, test_suite=test_suite, keep_suite=suite_folder() if test_suite else None)
    log = Path(result.engine.prefix / "share" / "caffetool" / "build.log")
    text = log.read_text(errors="replace")
    objects = len(set(re.findall(r"Building NVCC \(Device\) object (.+)$", text, re.M)))
    caffe = result.engine.prefix / "bin" / "caffe"
    version = run_checked([caffe, "--version"], what="the CUDA build's `caffe --version`", error=BuildError)
    query = subprocess.run([str(caffe), "device_query", "-gpu", "0"], capture_output=True, text=True,
                           errors="replace", env=caffe_env())
    code = result.engine.manifest.get("device_code") or {}
    return CheckResult(result.engine.prefix, objects, result.seconds, version.stdout.strip(),
                       f"{exit_status(query.returncode)}: {last_lines(query.stderr, 1)}", result.log,
                       cudaarch.describe(Architectures(tuple(code.get("sm", ())), tuple(code.get("ptx", ())))))
