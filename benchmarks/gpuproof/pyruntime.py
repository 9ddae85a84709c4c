"""The Python that runs pycaffe on the GPU machine, carried there: this machine's Python 3.11.

The bundle's pycaffe is built for the Python that built the engine (``_caffe.so`` links Boost.Python
and ``libpython`` 3.11); the GPU machine's own Python is 3.12. So the payload carries the
interpreter itself (one binary), its standard library without the parts nothing here imports
(tests, Tk, IDLE, ...), the NumPy and protobuf that pycaffe was built and run against, and BVLC's
``python/caffe/test`` from the pinned source (without ``test_draw``, which needs pydot): about 15
MiB in one zstd archive. No scikit-image or SciPy travels: engine patch 0015 imports them only
where ``caffe.io`` needs them, and the run shows pycaffe works without them.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import sysconfig
import tarfile
from pathlib import Path

ARCHIVE = "python.tar.zst"
INTERPRETER = "bin/python3"  # in the archive, whichever Python packed it
# Folders and files of the standard library and the packages that no check imports.
LEFT_OUT = frozenset({"test", "tests", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data",
                      "__pycache__", "site-packages", "dist-packages", "f2py", "_pyinstaller", "distutils",
                      f"config-{sys.version_info.major}.{sys.version_info.minor}-{sys.implementation._multiarch}"})
# What pycaffe imports beyond the standard library, as (module whose files travel, where they go in site/).
SITE = (("numpy", "numpy"), ("numpy.libs", "numpy.libs"), ("google.protobuf", "google/protobuf"),
        ("google._upb", "google/_upb"), ("six", "six.py"))
SUITE = "python/caffe/test/"
SUITE_LEFT_OUT = ("test_draw.py",)


def kept(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    parts = Path(info.name).parts
    if any(part in LEFT_OUT for part in parts) or info.name.endswith(".pyi"):
        return None
    return info


def site_files(module: str) -> Path | None:
    """Where ``module`` (a package, a single-file module, or a wheel's ``.libs`` folder) lies."""
    if module.endswith(".libs"):
        folder = Path(importlib.util.find_spec(module.removesuffix(".libs")).origin).parents[1] / module
        return folder if folder.is_dir() else None
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return None
    origin = Path(spec.origin)
    return origin.parent if origin.name == "__init__.py" else origin


def pack(folder: Path, source: Path, level: int = 19) -> Path:
    """``folder/python.tar.zst``: this Python's interpreter and standard library, pycaffe's
    packages from this Python's environment, and BVLC's pycaffe suite from ``source`` (the pinned
    Caffe source tarball)."""
    import zstandard

    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / ARCHIVE
    params = zstandard.ZstdCompressionParameters.from_level(level, enable_ldm=True, window_log=27, threads=-1)
    with open(archive, "wb") as raw, zstandard.ZstdCompressor(compression_params=params).stream_writer(raw) as zst:
        with tarfile.open(fileobj=zst, mode="w|") as tar:
            stdlib = Path(sysconfig.get_path("stdlib"))
            tar.add(os.path.realpath(sys.executable), arcname=INTERPRETER)
            tar.add(stdlib, arcname=f"lib/{stdlib.name}", filter=kept)
            for module, place in SITE:
                files = site_files(module)
                if files is not None:
                    tar.add(files, arcname=f"site/{place}", filter=kept)
            with tarfile.open(source) as bvlc:
                for member in bvlc.getmembers():
                    if member.name.startswith(SUITE) and member.isfile() and \
                            Path(member.name).name not in SUITE_LEFT_OUT:
                        source_file = bvlc.extractfile(member)
                        member.name = "suite/" + member.name.removeprefix(SUITE)
                        tar.addfile(member, source_file)
    return archive


def unpack(archive: Path, root: Path) -> Path:
    """The archive unpacked into ``root``; returns the interpreter."""
    import zstandard

    root.mkdir(parents=True, exist_ok=True)
    with open(archive, "rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as zst:
        with tarfile.open(fileobj=zst, mode="r|") as tar:
            tar.extractall(root, filter="tar")
    return root / INTERPRETER


def environment(root: Path, pycaffe: Path, libraries: Path | None = None) -> dict[str, str]:
    """The variables that make the carried interpreter a Python of its own: its home, its packages
    and the engine's pycaffe on the path, no user site; ``libraries``: the folder of the engine's
    vendored libraries, where the standard library's extension modules find theirs."""
    env = {"PYTHONHOME": str(root), "PYTHONPATH": f"{root / 'site'}{os.pathsep}{pycaffe}", "PYTHONNOUSERSITE": "1",
           "PYTHONDONTWRITEBYTECODE": "1"}
    if libraries is not None:
        env["LD_LIBRARY_PATH"] = str(libraries)
    return env
