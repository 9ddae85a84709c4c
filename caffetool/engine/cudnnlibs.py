"""cuDNN 9's sub-libraries: present beside ``libcudnn.so.9`` and loadable, checked without a GPU.

Since cuDNN 9 the library an engine links (``libcudnn.so.9``) is a shim: at its first call it opens
its sub-libraries by name (``dlopen``), from its own folder — the graph API, the precompiled and
runtime-compiled engines, the heuristics and the legacy ops, convolution and RNN APIs. ``ldd`` of
the engine therefore never shows them, and a bundle, an image or a hand-copied folder that carries
``libcudnn.so.9`` without all of them builds, links and passes ``caffe --version``, then fails at the
first convolution on a GPU with ``CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED``. This module names them
(NVIDIA's cuDNN 9 API overview lists them; the nvidia-cudnn-cu13 9.12 to 9.28 wheels carry exactly
these), finds the folder the engine's ``libcudnn.so.9`` resolves to, and checks that each is there
and that the loader resolves everything each one needs (the driver's ``libcuda.so.1`` excepted:
the driver brings it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from caffetool.engine import elf
from caffetool.engine.cudalibs import DRIVER_SONAMES

SUBLIBRARIES: dict[int, tuple[str, ...]] = {
    9: ("libcudnn_graph.so.9", "libcudnn_engines_precompiled.so.9", "libcudnn_engines_runtime_compiled.so.9",
        "libcudnn_heuristic.so.9", "libcudnn_ops.so.9", "libcudnn_cnn.so.9", "libcudnn_adv.so.9"),
}


@dataclass(frozen=True)
class CudnnCheck:
    """Where the engine's cuDNN is and what of it is missing or cannot load."""

    folder: Path | None  # None: the engine does not link cuDNN, or the loader cannot find it
    files: tuple[str, ...] = ()  # every libcudnn*.so.<major> in the folder
    absent: tuple[str, ...] = ()  # declared sub-libraries not in the folder
    unresolved: dict[str, tuple[str, ...]] = field(default_factory=dict)  # file -> needs the loader cannot find

    @property
    def ok(self) -> bool:
        return self.folder is not None and not self.absent and not self.unresolved

    def summary(self) -> str:
        """One line for ``engine.info``, a bundle's install and ``docker.check``."""
        if self.folder is None:
            return "libcudnn.so.9 not found by the loader"
        if self.ok:
            return f"{len(self.files)} libraries in {self.folder}, every sub-library present and resolving"
        problems = [f"missing {', '.join(self.absent)}"] if self.absent else []
        problems += [f"{name} cannot find {', '.join(needs)}" for name, needs in sorted(self.unresolved.items())]
        return f"in {self.folder}: {'; '.join(problems)}"


def check_folder(folder: Path, major: int = 9) -> CudnnCheck:
    """The sub-libraries of cuDNN ``major`` in ``folder``, each resolved as the loader would."""
    files = tuple(sorted(p.name for p in folder.glob(f"libcudnn*.so.{major}")))
    absent = tuple(name for name in SUBLIBRARIES.get(major, ()) if name not in files)
    unresolved = {}
    for name in files:
        needs = tuple(d.soname for d in elf.dependencies(folder / name) if d.path is None
                      and d.soname not in DRIVER_SONAMES)
        if needs:
            unresolved[name] = needs
    return CudnnCheck(folder, files, absent, unresolved)


def check_engine(library: Path, major: int = 9) -> CudnnCheck | None:
    """The check of the cuDNN that ``library`` (an engine's ``libcaffe``) loads; None where it
    links no cuDNN."""
    soname = f"libcudnn.so.{major}"
    for dependency in elf.dependencies(library):
        if dependency.soname == soname:
            if dependency.path is None:
                return CudnnCheck(None)
            return check_folder(dependency.path.resolve().parent, major)
    return None
