"""Compiling the engine through ccache, when it is installed: a rebuild with nothing changed in seconds.

An engine is built in a fresh staging folder each time (:mod:`caffetool.engine.install`), under a
random name, and its sources are unpacked and patched anew, so nothing of a previous build is there
to reuse; ccache keeps the compiler's outputs by the content of what it compiled instead. Three of
its settings make a staging build hit its cache: ``CCACHE_BASEDIR`` is the staging folder (the
random name is rewritten out of every path on the compiler's command line; patch 0008 writes its
unity batches with relative paths for the same reason), ``CCACHE_NOHASHDIR`` (the working folder is
not part of the key), and the sloppiness that lets it reuse results whose headers are new files with
the same content (``include_file_mtime``, ``include_file_ctime``: every unpacked or generated header
is new) and compilations with the precompiled headers of patch 0008 (``pch_defines``,
``time_macros``, as ccache's manual asks for precompiled headers). ccache's depend mode
(``CCACHE_DEPEND``) keys on the compiler's own list of the headers read, so a compilation it has not
seen costs no extra preprocessor run: measured here, a first build through ccache took 140 s without
it and 106 s with it (117 s without ccache); the rebuild took 8-9 s either way (27 of 27 compilations
reused). The user's own ccache settings (its folder, its size, other sloppiness, a depend mode turned
off) are kept.

Limits: only C and C++ go through ccache; a CUDA engine's ``.cu`` files are compiled by nvcc
directly (Caffe's CMake compiles them with FindCUDA, which takes no launcher).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from caffetool.choices import unwritable

SLOPPINESS = ("include_file_mtime", "include_file_ctime", "pch_defines", "time_macros")
# ccache --print-stats counters (ccache 4.x): a hit is either kind, a miss is a compilation it ran
HITS = ("direct_cache_hit", "preprocessed_cache_hit")
MISSES = ("cache_miss",)


@dataclass
class CacheCounts:
    hits: int = 0
    misses: int = 0

    def __sub__(self, other: CacheCounts) -> CacheCounts:
        return CacheCounts(self.hits - other.hits, self.misses - other.misses)


def found() -> str | None:
    """The ccache to compile through: on PATH, unless ``CCACHE_DISABLE`` is set (ccache's own switch)
    or its cache folder cannot be used (:func:`unusable`): the cache is optional, a build is not."""
    if os.environ.get("CCACHE_DISABLE", "").lower() not in ("", "0", "false", "no"):
        return None
    launcher = shutil.which("ccache")
    return None if launcher is None or unusable(launcher) else launcher


def unusable(ccache: str) -> str | None:
    """Why ccache's cache folder (``CCACHE_DIR``, its configuration's ``cache_dir``) cannot hold a
    cache, or None: a file where the folder should be, or a folder this user may not write."""
    try:
        done = subprocess.run([ccache, "-k", "cache_dir"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return f"`ccache -k cache_dir` failed ({e})"
    if done.returncode != 0 or not done.stdout.strip():
        return f"`ccache -k cache_dir` failed ({(done.stderr or done.stdout).strip()[:200]})"
    folder = Path(done.stdout.strip())
    if (found := unwritable(folder)) is None:
        return None
    return f"its cache folder {folder} is not a folder" if "not a folder" in found[1] else \
        f"its cache folder {folder} is not writable"


def cmake_flags(ccache: str) -> list[str]:
    """CMake's compiler launchers for C and C++."""
    return [f"-DCMAKE_C_COMPILER_LAUNCHER={ccache}", f"-DCMAKE_CXX_COMPILER_LAUNCHER={ccache}"]


def environment(staging: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with the settings that let a build in
    ``staging`` reuse what an earlier staging folder compiled."""
    env = dict(os.environ if base is None else base)
    sloppy = [s for s in env.get("CCACHE_SLOPPINESS", "").replace(" ", "").split(",") if s]
    env.setdefault("CCACHE_DEPEND", "true")
    env.update(CCACHE_BASEDIR=str(staging), CCACHE_NOHASHDIR="true",
               CCACHE_SLOPPINESS=",".join(dict.fromkeys([*sloppy, *SLOPPINESS])))
    return env


def counts(ccache: str) -> CacheCounts:
    """ccache's running totals of hits and misses (read twice: the difference is one build's)."""
    try:
        out = subprocess.run([ccache, "--print-stats"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return CacheCounts()
    values = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\t(\d+)$", out, re.M)}
    return CacheCounts(sum(values.get(k, 0) for k in HITS), sum(values.get(k, 0) for k in MISSES))
