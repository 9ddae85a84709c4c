"""The backends, declared as data, and the one door to them: :func:`load`.

Each row names a backend as ``--backend`` takes it and the module that loads it (imported only when
the backend is used, since each imports its framework). The module declares ``READS``, which model
file the backend runs — ``"caffe"`` (the deploy net and weights), ``"onnx"`` or ``"pytorch"`` (a
verified export, which the caller makes: this package knows nothing of exporting) — and
``load(source, device, outputs)``. The row says whether the backend can run on a GPU (a ``--gpu N``
for one that cannot is refused here, before any file is read) and whether its model keeps every
layer's blobs for a server to show (only Caffe's: the others fuse layers).

A new backend is one module with ``READS`` and ``load`` and one row of :data:`BACKENDS`.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

from caffetool.backends.devices import CPU, PycaffeDevice
from caffetool.backends.loaded import LoadedModel, ModelSource
from caffetool.choices import choose
from caffetool.errors import ConfigError


@dataclass(frozen=True)
class Backend:
    name: str  # as --backend takes it
    module: str  # caffetool.backends.<module>: its READS and load(source, device, outputs)
    about: str  # for --backend's help
    gpu: bool  # runs on a GPU with --gpu N, else on the CPU only
    activations: bool  # its model keeps every layer's blobs (the model's ``net``)

    @property
    def loader(self) -> ModuleType:
        return importlib.import_module(f"caffetool.backends.{self.module}")

    @property
    def reads(self) -> str:
        """The model file it runs: "caffe", "onnx" or "pytorch"."""
        return self.loader.READS


BACKENDS = {row.name: row for row in (
    Backend("caffe", "pycaffe", "pycaffe, exact", gpu=True, activations=True),
    Backend("opencv", "opencvdnn", "cv2.dnn", gpu=False, activations=False),
    Backend("onnxruntime", "onnxrt", "the run's ONNX export, made if missing", gpu=False, activations=False),
    Backend("pytorch", "torchmodule", "the run's PyTorch export, made if missing", gpu=True, activations=False),
)}


def chosen(name: str, device: PycaffeDevice = CPU) -> Backend:
    """The row of ``--backend name``, refused where it cannot run on ``device``."""
    row = BACKENDS[choose(name, BACKENDS, "--backend")]
    if device.gpu is not None and not row.gpu:
        on_gpus = " and ".join(b.name for b in BACKENDS.values() if b.gpu)
        raise ConfigError(f"--gpu {device.gpu} runs the {on_gpus} backends; the {row.name} backend runs on the "
                          "CPU (use --gpu cpu)")
    return row


def load(name: str, source: ModelSource, device: PycaffeDevice = CPU, outputs: Sequence[str] = ()) -> LoadedModel:
    """The model in ``source`` on backend ``name`` and ``device``, its passes giving ``outputs``
    (by default, the model's own outputs)."""
    return chosen(name, device).loader.load(source, device, tuple(outputs))


def help_text() -> str:
    """``--backend``'s help: each backend and what it runs."""
    rows = [f"{row.name} ({row.about})" for row in BACKENDS.values()]
    return f"{', '.join(rows[:-1])} or {rows[-1]}"
