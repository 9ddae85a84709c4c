"""Which GPUs a CUDA engine is built for, and whether it runs on the card at hand.

The default architecture list is every real architecture the installed nvcc can compile for
(``nvcc --list-gpu-code``) from Volta's 7.0 up, with PTX for the newest: each card CUDA knows gets
machine code of its own, and a card newer than the compiler gets PTX the driver compiles when a
program starts. CUDA 13.0 lists 7.5 to 12.1 (Turing; Ampere 8.0, 8.6, 8.7, 8.8; Ada 8.9; Hopper
9.0; Blackwell 10.0, 10.3, 11.0, 12.0, 12.1); CUDA 12.x lists older cards too, which caffetool leaves
to an explicit ``--cuda-arch`` (Maxwell and Pascal: deprecated by CUDA 12, dropped by 13).

An engine records the architectures its ``libcaffe`` actually carries (read by
:mod:`caffetool.engine.fatbin` after the build, since BVLC's ``cmake/Cuda.cmake`` rewrites the list
it is given). Before a GPU command starts, :func:`check_card` compares that record with the card's
compute capability (NVML) and refuses, naming the fix, where no kernel could run: instead of Caffe's
"no kernel image is available for execution on the device" after the data has loaded.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from caffetool.engine import fatbin
from caffetool.engine.fatbin import Architectures
from caffetool.errors import BuildError, ConfigError

OLDEST = 70  # Volta: the oldest architecture the default list keeps
REAL = re.compile(r"^sm_(\d+)$")  # real architectures only (not sm_90a, sm_100f: features of one chip)


def nvcc(extra_cmake: tuple[str, ...] = ()) -> Path:
    """The nvcc a CUDA build uses: the toolkit ``-DCUDA_TOOLKIT_ROOT_DIR=`` names, else PATH's,
    else CUDA's default place."""
    for flag in extra_cmake:
        if flag.startswith("-DCUDA_TOOLKIT_ROOT_DIR="):
            return Path(flag.split("=", 1)[1]) / "bin" / "nvcc"
    found = shutil.which("nvcc")
    return Path(found) if found else Path("/usr/local/cuda/bin/nvcc")


def supported(compiler: Path) -> tuple[str, ...]:
    """The real architectures ``compiler`` compiles for, oldest first (``"90"`` for sm_90)."""
    try:
        done = subprocess.run([str(compiler), "--list-gpu-code"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BuildError(f"a CUDA build needs nvcc; {compiler} does not run ({e}): install the CUDA toolkit or "
                         "name it with --cmake-arg=-DCUDA_TOOLKIT_ROOT_DIR=...") from None
    found = sorted({int(m.group(1)) for line in done.stdout.split() if (m := REAL.match(line.strip()))})
    if done.returncode != 0 or not found:
        raise BuildError(f"`{compiler} --list-gpu-code` listed no GPU architectures (exit {done.returncode}); "
                         "name them with --cuda-arch, e.g. '75 80 86 89 90'")
    return tuple(map(str, found))


def default(compiler: Path) -> tuple[str, ...]:
    """Every architecture ``compiler`` supports from :data:`OLDEST` up (the newest also as PTX)."""
    return tuple(a for a in supported(compiler) if int(a) >= OLDEST)


def parse(text: str, compiler: Path | None = None) -> tuple[str, ...]:
    """``--cuda-arch`` as the build takes it: compute capabilities as ``75`` or ``7.5``, in order,
    each one the compiler supports (where a compiler is given)."""
    arch = []
    for word in text.replace(",", " ").split():
        digits = word.replace(".", "", 1) if re.fullmatch(r"\d+\.\d", word) else word
        if not re.fullmatch(r"\d{2,3}", digits):
            raise ConfigError(f"--cuda-arch {text!r}: give compute capabilities such as '75 80 90' or '7.5 8.0 9.0'")
        arch.append(digits)
    arch = sorted(dict.fromkeys(arch), key=int)
    if compiler is not None:
        known = supported(compiler)
        unknown = [a for a in arch if a not in known]
        if unknown:
            raise ConfigError(f"--cuda-arch: {compiler} cannot compile for {', '.join(unknown)}; it supports "
                              f"{' '.join(known)}")
    return tuple(arch)


def recorded(prefix: Path, manifest: dict) -> Architectures:
    """The device code an installed engine carries: its manifest's record, or (an engine built
    before engines recorded it) read from its ``libcaffe``."""
    code = manifest.get("device_code")
    if code:
        return Architectures(tuple(code.get("sm", ())), tuple(code.get("ptx", ())))
    library = prefix / "lib" / "libcaffe.so"
    return fatbin.architectures(library.resolve()) if library.exists() else Architectures((), ())


def describe(code: Architectures) -> str:
    """``sm_75, sm_90 and PTX 9.0``: how messages and ``engine.info`` name an engine's device code."""
    parts = [f"sm_{c}" for c in code.cubins] + [f"PTX {int(p) // 10}.{int(p) % 10}" for p in code.ptx]
    return ", ".join(parts) or "no device code"


def capability_text(capability: tuple[int, int]) -> str:
    return f"{capability[0]}.{capability[1]}"


def card_capabilities(binding: ModuleType) -> list[tuple[str, tuple[int, int]]]:
    """Each visible GPU's name and compute capability, from an initialised NVML ``binding``."""
    cards = []
    for index in range(binding.nvmlDeviceGetCount()):
        handle = binding.nvmlDeviceGetHandleByIndex(index)
        name = binding.nvmlDeviceGetName(handle)
        major, minor = binding.nvmlDeviceGetCudaComputeCapability(handle)
        cards.append((name.decode() if isinstance(name, bytes) else str(name), (int(major), int(minor))))
    return cards


def nvml_cards() -> list[tuple[str, tuple[int, int]]] | None:
    """The visible GPUs' names and capabilities, or None where NVML cannot answer (no driver, no
    binding): then Caffe's own error stands."""
    try:
        import pynvml  # noqa: PLC0415  (nvidia-ml-py: inert without a driver)

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - any NVML failure means: no answer here
        return None
    try:
        return card_capabilities(pynvml)
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()


def check_card(code: Architectures, gpus: list[int], what: str, fix: str,
               cards: Callable[[], list[tuple[str, tuple[int, int]]] | None] | None = None) -> list[str]:
    """Refuse (ConfigError) where one of ``gpus`` (indexes) gets no kernel from ``code``; return
    notes for cards that run only through PTX compiled at every start. ``what`` names the engine
    or image in the message, ``fix`` the command that rebuilds it for the card (``{arch}`` filled
    with the card's capability)."""
    if not (code.cubins or code.ptx):
        return []
    known = (cards or nvml_cards)()
    if not known:
        return []
    notes = []
    for index in gpus:
        if index >= len(known):
            continue
        name, capability = known[index]
        arch = f"{capability[0]}{capability[1]}"
        if not code.runs_on(capability):
            raise ConfigError(f"GPU {index} ({name}, compute capability {capability_text(capability)}) cannot run "
                              f"{what}: it carries code for {describe(code)}; rebuild it with {fix.format(arch=arch)}")
        if code.jit_only(capability):
            notes.append(f"GPU {index} ({name}, compute capability {capability_text(capability)}) runs {what} through "
                         f"PTX compiled when each process starts; {fix.format(arch=arch)} gives it machine code")
    return notes
