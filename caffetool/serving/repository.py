"""A model repository in NVIDIA Triton's layout, for ``demo.serve --model-repository DIR``.

``DIR/NAME/VERSION/`` for each model and version, versions being positive integers as Triton's
are (``lenet/1/``, ``lenet/2/``). A version folder holds one of:

* a caffetool run (its ``manifest.json``; a link to a run folder does), served as ``--run`` serves it;
* an ONNX export (``model.onnx``, as ``caffetool export`` writes it: the preprocessing and labels
  travel in its metadata, or ``labels.txt`` beside it), served on onnxruntime.

Other entries (files, hidden folders, Triton's ``config.pbtxt``) are left alone; a model folder with
no version, or a version folder with neither, is refused by name, before anything loads. Every
version is served; a request that names no version gets the highest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from caffetool.backends import dispatch
from caffetool.backends.devices import CPU, PycaffeDevice
from caffetool.engine import EngineInfo
from caffetool.errors import CaffetoolError, ConfigError
from caffetool.inference import modelfiles
from caffetool.runs.folder import NAMES, RunFolder
from caffetool.serving import detector
from caffetool.serving.catalog import ServedModel

ONNX_MODEL = "model.onnx"  # Triton's name for an onnxruntime model in NAME/N/, and that of a run's ONNX export


@dataclass(frozen=True)
class Entry:
    name: str
    version: str
    path: Path  # the version folder
    kind: str  # "run" or "onnx"


def scan(root: Path) -> list[Entry]:
    """The repository's models and versions, by name then version number."""
    if not root.is_dir():
        raise ConfigError(f"--model-repository {root} is not a folder")
    entries = []
    for model in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        versions = sorted((p for p in model.iterdir() if p.is_dir() and _is_version(p.name)), key=lambda p: int(p.name))
        if not versions:
            raise ConfigError(f"{model} holds no version folder (1/, 2/, ...); put the run or the export in "
                              f"{model / '1'}")
        entries += [Entry(model.name, str(int(v.name)), v, _kind(v)) for v in versions]
    if not entries:
        raise ConfigError(f"--model-repository {root} holds no model: make {root}/NAME/1/ a run folder (or a "
                          f"link to one), or put an export's {ONNX_MODEL} there")
    return entries


def _is_version(name: str) -> bool:
    return name.isascii() and name.isdigit() and int(name) > 0 and name == str(int(name))


def _kind(folder: Path) -> str:
    if RunFolder(folder).manifest.is_file():
        return "run"
    if (folder / ONNX_MODEL).is_file():
        return "onnx"
    raise ConfigError(f"{folder} holds neither a caffetool run ({NAMES['manifest']}) nor an ONNX export "
                      f"({ONNX_MODEL}); make it a link to a run folder, or copy `caffetool export`'s "
                      f"{ONNX_MODEL} into it")


def load(engine: EngineInfo, root: Path, backend: str = "caffe", device: PycaffeDevice = CPU,
         validate: bool = True, say: Callable[[str], None] = lambda _: None) -> list[ServedModel]:
    """Every model version of the repository at ``root`` that loads and is proven (runs on
    ``backend``). One that does not is named in a warning (``say``) and left out, the others are
    served, as Triton serves a repository; where none loads, the first refusal is raised. A backend
    that cannot run on ``device`` is refused before any model loads."""
    from caffetool.serving import onnxmodel  # noqa: PLC0415 - onnx only for a repository

    backend = dispatch.chosen(backend, device).name
    loaded, refused = [], []
    for entry in scan(root):
        try:
            if entry.kind == "onnx":
                model = onnxmodel.load(entry.path / ONNX_MODEL, entry.name)
            else:
                files = modelfiles.from_run(entry.path)
                model = detector.load_model(engine, files, backend, validate, device)
                model.name = entry.name
        except CaffetoolError as e:
            refused.append(type(e)(f"model {entry.name} version {entry.version}: {e}"))
            continue
        loaded.append(ServedModel(entry.name, entry.version, model))
    if not loaded:
        raise refused[0]
    for error in refused:
        say(f"Warning: {error} (not served; the repository's other models are)")
    return loaded
