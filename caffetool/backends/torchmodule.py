"""The ``pytorch`` backend: a PyTorch export (``model.py`` and its weights) as a module in eval mode.

The text is compiled as a module of its own and its class instantiated; the weights are read back
from their serialised form and loaded strictly (every entry named and shaped as the module's own),
so what runs is exactly what was written. A blob that ``forward`` does not return is caught by a
forward hook on the attribute that writes it (``ModelSource.taps``): the export's verification
catches every layer's outputs that way. On ``--gpu N`` the module runs on CUDA device N, where the
installed PyTorch has CUDA.
"""

from __future__ import annotations

import io
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from caffetool import extras
from caffetool.backends.devices import PycaffeDevice
from caffetool.backends.loaded import LoadedModel, ModelSource
from caffetool.errors import ConfigError, ExportError

READS = "pytorch"
CPU_BUILD = (f" (on a machine without a GPU, PyTorch's CPU build is about a fifth of the size: {shlex.quote(sys.executable)}"
             " -m pip install torch --index-url https://download.pytorch.org/whl/cpu)")


def torch_for(what: str) -> Any:
    """``torch``, or an error that says ``what`` needs it and how to install it."""
    extras.need("pytorch", what, CPU_BUILD)
    import torch  # noqa: PLC0415 - an optional extra

    return torch


def load(source: ModelSource, device: PycaffeDevice, outputs: Sequence[str]) -> LoadedModel:
    torch = torch_for("the pytorch backend")
    if device.gpu is not None and device.gpu >= torch.cuda.device_count():
        raise ConfigError(f"--gpu {device.gpu}: PyTorch {torch.__version__} here sees {torch.cuda.device_count()} "
                          "CUDA device(s); use --gpu cpu, or install a PyTorch built with CUDA")
    path = Path(source.path)
    try:
        text, weights = path.read_text(), Path(source.weights).read_bytes()
    except (OSError, UnicodeDecodeError) as e:
        raise ExportError(f"cannot read the PyTorch export {path} and its weights {source.weights} "
                          f"({e.strerror if isinstance(e, OSError) else 'not text'}): export the model again") from None
    module = instance(text, source.class_name, weights, str(path), device.gpu)
    return model_of(module, source.inputs, source.outputs, source.taps, str(path), device.gpu, outputs)


def module_class(source: str, class_name: str, filename: str = "model.py") -> type:
    """The class ``source`` defines, compiled as a module of its own."""
    namespace: dict[str, Any] = {"__name__": "caffetool_exported_model", "__file__": filename}
    try:
        exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - the module the export wrote
    except Exception as e:
        raise ExportError(f"{filename} cannot be run: {type(e).__name__}: {e}") from None
    found = namespace.get(class_name)
    if not isinstance(found, type):
        raise ExportError(f"{filename} defines no class {class_name}: it is not an export of this net")
    return found


def instance(source: str, class_name: str, weights: bytes, filename: str = "model.py", gpu: int | None = None) -> Any:
    """``source``'s ``class_name`` with the serialised state_dict ``weights``, in eval mode, on the CPU
    or CUDA device ``gpu``."""
    torch = torch_for("the pytorch backend")
    module = module_class(source, class_name, filename)()
    try:
        module.load_state_dict(torch.load(io.BytesIO(weights), map_location="cpu", weights_only=True), strict=True)
    except Exception as e:
        raise ExportError(f"the weights cannot be loaded into {filename}'s {class_name}: "
                          f"{str(e).strip().splitlines()[0]}") from None
    module.eval()
    return module if gpu is None else module.to(f"cuda:{gpu}")


def model_of(module: Any, inputs: Sequence[str], returns: Sequence[str], taps: Mapping[str, str] | None = None,
             filename: str = "model.py", gpu: int | None = None, outputs: Sequence[str] = ()) -> LoadedModel:
    """``module`` fed ``inputs`` (forward's arguments, in order), giving ``outputs`` (by default every
    one known) among what forward ``returns`` and the ``taps`` (name -> "ATTRIBUTE:INDEX")."""
    torch = torch_for("the pytorch backend")
    taps = taps or {}
    known = dict.fromkeys([*returns, *taps])
    unknown = [name for name in outputs if name not in known]
    if unknown:
        raise ExportError(f"{filename} gives no blob {unknown[0]!r}: its forward returns {', '.join(returns)}")
    wanted = tuple(outputs) or tuple(known)
    caught: dict[str, np.ndarray] = {}
    for name, tap in taps.items():
        attr, index = tap.rsplit(":", 1)
        part = getattr(module, attr, None)
        if part is None:
            raise ExportError(f"{filename}'s {type(module).__name__} has no attribute {attr!r} for the blob "
                              f"{name!r}: it is not an export of this net")
        part.register_forward_hook(_catch(caught, name, int(index)))
    device = "cpu" if gpu is None else f"cuda:{gpu}"

    def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        caught.clear()
        with torch.inference_mode():
            try:
                out = module(*(torch.from_numpy(feeds[name]).to(device) for name in inputs))
            except Exception as e:
                raise ExportError(f"{filename} cannot run on the inputs: {type(e).__name__}: "
                                  f"{str(e).strip().splitlines()[0]}") from None
        given = dict(zip(returns, out if isinstance(out, tuple) else (out,)))
        return {name: caught[name] if name in caught else given[name].cpu().numpy() for name in wanted}

    return LoadedModel("pytorch", tuple(inputs), wanted, run, module)


def _catch(caught: dict[str, np.ndarray], name: str, index: int) -> Callable:
    def hook(_module: Any, _inputs: Any, output: Any) -> None:
        caught[name] = (output if isinstance(output, tuple) else (output,))[index].detach().cpu().numpy().copy()
    return hook
