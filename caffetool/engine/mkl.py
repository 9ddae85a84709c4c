"""Intel MKL for the engine, from PyPI's wheels: no Intel installer, no site but PyPI.

The ``mkl`` wheel carries MKL's shared libraries (versioned names only: ``libmkl_core.so.3``) and
``mkl-include`` its headers. Caffe's FindMKL wants an ``MKLROOT`` holding ``include/mkl.h`` and
``lib/libmkl_*.so``, so the wheels' data folders are unpacked once into such a tree in the cache,
with the unversioned links a linker looks for. The wheels are pinned by version and sha256 (pip's
``--require-hashes``), so every MKL engine is built against the same bytes.

The engine links ``mkl_intel_lp64 + mkl_gnu_thread + mkl_core`` (patch 0005: MKL on GCC's OpenMP
runtime, the one the engine's layers use). ``mkl_core`` loads its CPU-specific kernels
(``libmkl_avx512.so.3``, ``libmkl_vml_avx2.so.3`` ...) at run time from its own folder, so the
engine carries all of them beside ``libcaffe``: the binary picks the best kernels on whatever x86-64
machine runs it. That makes an MKL engine about 500 MiB larger than an OpenBLAS one.
"""

from __future__ import annotations

import platform
import shutil
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from caffetool import fsio
from caffetool.engine import elf
from caffetool.errors import BuildError, ConfigError
from caffetool.proc import run_checked


@dataclass(frozen=True)
class Wheel:
    requirement: str
    sha256: str


VERSION = "2026.2.0"
WHEELS: tuple[Wheel, ...] = (
    Wheel(f"mkl=={VERSION}", "eaab1875ce9f47ab3c66d5632cef06baf768c05781f2f28847bdbc4343500ed7"),
    Wheel(f"mkl-include=={VERSION}", "889cc72057a1671fee1e9a8beb2fc4e0d222ba78c08b6d69584dae03fbec4822"),
)
# What the engine links (patch 0005's GNU threading line) ...
LINKED: tuple[str, ...] = ("libmkl_intel_lp64.so.3", "libmkl_gnu_thread.so.3", "libmkl_core.so.3")
# ... and what mkl_core loads beside itself for the CPU it finds: BLAS kernels and vector-math
# (VML, Caffe's vsAdd, vsExp ...) kernels from SSE4.2 ("mc3", "def") to AVX10.
KERNELS: tuple[str, ...] = tuple(
    f"libmkl_{kind}.so.3"
    for kind in ("def", "mc3", "avx2", "avx512", "avx10",
                 "vml_def", "vml_mc3", "vml_avx2", "vml_avx512", "vml_avx10", "vml_cmpt")
)
RUNTIME: tuple[str, ...] = LINKED + KERNELS
COMPLETE = ".complete"


def root(cache: Path) -> Path:
    """Where the MKLROOT of the pinned version is assembled."""
    return cache / "mkl" / VERSION


def assemble(cache: Path) -> Path:
    """The MKLROOT (``include/``, ``lib/``) of the pinned wheels, downloaded and unpacked once."""
    if platform.machine() != "x86_64":
        raise ConfigError(f"MKL runs on x86-64 only, not {platform.machine()}; build with --blas openblas")
    out = root(cache)
    if (out / COMPLETE).exists():
        return out
    with fsio.staged_dir(out, BuildError) as tmp:
        wheels = tmp / "wheels"
        _download(wheels)
        for wheel in sorted(wheels.glob("*.whl")):
            _unpack_data(wheel, tmp)
        shutil.rmtree(wheels)
        missing = [name for name in RUNTIME if not (tmp / "lib" / name).is_file()]
        if missing or not (tmp / "include" / "mkl.h").is_file():
            raise BuildError(f"the MKL {VERSION} wheels lack {', '.join(missing) or 'include/mkl.h'}")
        for name in LINKED:  # libmkl_core.so.3 -> libmkl_core.so, what `-lmkl_core` finds
            (tmp / "lib" / name.split(".so.")[0]).with_suffix(".so").symlink_to(name)
        (tmp / COMPLETE).write_text(" ".join(w.requirement for w in WHEELS) + "\n")
    return out


def _download(dest: Path) -> None:
    """pip-download the pinned wheels, each checked against its sha256 by pip."""
    dest.mkdir()
    requirements = dest / "requirements.txt"
    requirements.write_text("".join(f"{w.requirement} --hash=sha256:{w.sha256}\n" for w in WHEELS))
    run_checked(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--require-hashes",
         "-q", "-d", dest, "-r", requirements],
        what=f"pip download of the MKL {VERSION} wheels (PyPI, or the index pip is configured with)",
        error=BuildError,
    )
    requirements.unlink()


def _unpack_data(wheel: Path, out: Path) -> None:
    """Extract a wheel's ``*.data/data/{include,lib}`` members into ``out/include`` and ``out/lib``,
    keeping of the libraries only those the engine loads."""
    with zipfile.ZipFile(wheel) as z:
        for member in z.infolist():
            parts = Path(member.filename).parts
            if member.is_dir() or len(parts) < 4 or not parts[0].endswith(".data") or parts[1] != "data":
                continue
            rel = Path(*parts[2:])
            if rel.parts[0] == "include" or (rel.parts[0] == "lib" and len(rel.parts) == 2 and rel.name in RUNTIME):
                target = out / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                with z.open(member) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst)


def vendor(mklroot: Path, staged_prefix: Path) -> list[str]:
    """Copy MKL's run-time libraries beside ``libcaffe`` in a staged install, and drop the
    MKLROOT (a cache folder) from the ``RUNPATH`` the build gave the engine's binaries, so the
    install needs nothing outside itself."""
    lib = staged_prefix / "lib"
    for name in RUNTIME:
        shutil.copyfile(mklroot / "lib" / name, lib / name)
        (lib / name).chmod(0o755)
    linked = str(mklroot / "lib")
    for path in sorted(staged_prefix.rglob("*")):
        if path.is_file() and not path.is_symlink() and path.name not in RUNTIME and elf.is_elf(path):
            entries = [e for e in elf.runpath(path).split(":") if e]
            if linked in entries:
                elf.set_runpath(path, [e for e in entries if e != linked])
    return list(RUNTIME)
