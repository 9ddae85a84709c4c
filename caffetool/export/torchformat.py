"""The PyTorch export format: ``model.py`` (one ``nn.Module``, :mod:`.torchnet`) and its weights
``model.pt`` beside it, verified as the very text and bytes written. The module takes any batch and
leaves the preprocessing to its caller, so it has none of the ONNX export's options; its name must
be one Python can import and must not hide a module Python already finds. ``export.check`` reads
both files back and runs them as written; running a ``model.py`` executes it, so the check does that
in a child process within a time limit (:mod:`.torchchild`).

Its row in :data:`.formats.FORMATS` names these functions; :mod:`.exporter` calls them.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from caffetool import __version__
from caffetool.errors import ConfigError, ExportError
from caffetool.export import preprocessing, torchchild, torchnet, verify

if TYPE_CHECKING:
    from caffetool.export.request import ExportRequest

NAME = "pytorch"  # --to pytorch, and the record's "format"
WEIGHTS_SUFFIX = ".pt"  # the state_dict, beside model.py and named after it
RECORD_SUFFIX = ".pytorch.export.json"  # a.py -> a.pytorch.export.json


@dataclass
class ModuleAndWeights:
    """What a PyTorch export writes: the module's text and its serialised state_dict."""
    source: str
    weights: bytes


def check_name(out: Path) -> None:
    """Refuse a model file Python cannot import by its name, or one that would hide a module Python
    already finds (``torch.py``: ``import torch`` beside it, in the model or in PyTorch, loads it)."""
    if not torchnet.importable(out.stem):
        raise ConfigError(f"--out {out}: {out.stem!r} is not a name Python can import; choose one such as "
                          f"{torchnet.module_name(out.stem)}{out.suffix} (nothing was changed)")
    if torchnet.shadowed(out.stem):
        raise ConfigError(f"--out {out}: {out.stem!r} is the name of a module Python already imports (the model "
                          f"imports torch, and torch the standard library and more), which {out.name} would hide "
                          f"from any program run beside it; choose another name, such as "
                          f"{torchnet.module_name(out.stem)}{out.suffix} (nothing was changed)")


def weights_of(model: Path) -> Path:
    """A PyTorch export's weights: beside its model.py, named after it."""
    return model.with_suffix(WEIGHTS_SUFFIX)


def convert(net_param: Any, net: Any, request: ExportRequest, name: str) -> torchnet.TorchConverted:
    """The net as a module whose docstring says what it was made from and where its record is."""
    files, out = request.files, request.out
    about = (f"{net_param.name or name} as PyTorch code: Caffe's deploy net {Path(files.deploy).name} "
             f"with the weights {Path(files.weights).name}, exported by caffetool {__version__} and verified "
             f"against Caffe layer by layer (see {out.stem}{RECORD_SUFFIX}).")
    return torchnet.convert(net_param, net, name, about, weights_of(out).name)


def finish(converted: torchnet.TorchConverted, _p: preprocessing.Preprocessing | None, _labels: list[str] | None,
           _request: ExportRequest) -> ModuleAndWeights:
    return ModuleAndWeights(converted.source, torchnet.serialised(converted))


def contents(written: ModuleAndWeights, out: Path) -> dict[Path, bytes]:
    return {out: written.source.encode(), weights_of(out): written.weights}


def runner(written: ModuleAndWeights, converted: torchnet.TorchConverted, filename: str) -> verify.Run:
    return torchnet.runner(written.source, written.weights, converted, filename)


def checked(_written: ModuleAndWeights, converted: torchnet.TorchConverted, path: Path,
            seconds: float) -> AbstractContextManager[verify.Run]:
    """``export.check``'s runner: the file at ``path`` and its weights run in a child process, each
    step within ``seconds``."""
    return torchchild.checked(path, weights_of(path), converted.class_name, list(converted.inputs),
                              torchnet.layer_outputs(converted), converted.outputs, seconds)


def record(_written: ModuleAndWeights, converted: torchnet.TorchConverted, labels: list[str] | None,
           request: ExportRequest) -> dict:
    """The PyTorch export's keys of its record: what a caller needs to use the module."""
    return {"format": NAME, "weights_file": weights_of(request.out).name, "class": converted.class_name,
            "inputs": {blob: ["N", *shape] for blob, shape in converted.inputs.items()},
            "outputs": [verify.output_blobs(converted)[o] for o in converted.outputs],
            "labels": labels}


def read(path: Path) -> ModuleAndWeights:
    """A PyTorch export's model.py with the weights beside it, as written."""
    weights_file = weights_of(path)
    try:
        return ModuleAndWeights(path.read_text(), weights_file.read_bytes())
    except (OSError, UnicodeDecodeError) as e:
        raise ExportError(f"cannot read the PyTorch export {path} and its weights {weights_file.name} "
                          f"({e.strerror if isinstance(e, OSError) else 'not text'}): export the model again") from None


def reconvert(_written: ModuleAndWeights, path: Path, net_param: Any, net: Any,
              name: str) -> tuple[torchnet.TorchConverted, dict[str, Any]]:
    """The net converted as the export was (its attributes are named after Caffe's layers); a PyTorch
    export has no options of its own."""
    return torchnet.convert(net_param, net, name, "", weights_of(path).name), {}
