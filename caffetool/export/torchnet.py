"""A Caffe deploy net with its weights as PyTorch code: ``model.py`` (one ``nn.Module``) and its
``state_dict``, and how the verification runs them.

As in :mod:`.onnxnet`, the layers are those Caffe itself kept (``include``/``exclude`` applied; the
Split layers it inserts left out: a Python variable fans out by itself), with the shapes Caffe gave
each blob. Each layer becomes an attribute named after it (characters Python does not allow in a
name become ``_``), each blob a variable of ``forward`` named after it. The verification runs the
exact text and the exact bytes that are written: the source compiled, the weights read back from
their serialised form, every layer's outputs caught by a forward hook on its attribute.
"""

from __future__ import annotations

import io
import keyword
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from caffetool import extras
from caffetool.errors import ExportError
from caffetool.export import onnxlayers, torchcode, torchlayers
from caffetool.export.caffelayer import Layer, kept_layers
from caffetool.export.onnxnet import Compared

SKIPPED = ("Input", "Silence")  # no attribute: the inputs are forward's arguments; Silence computes nothing
CPU_BUILD = (" (on a machine without a GPU, PyTorch's CPU build is about a fifth of the size: pip install torch "
             "--index-url https://download.pytorch.org/whl/cpu)")


@dataclass
class TorchConverted:
    source: str  # model.py
    class_name: str
    state: dict[str, np.ndarray]  # state_dict key -> value
    inputs: dict[str, tuple[int, ...]]  # forward's arguments, by Caffe blob -> Caffe's shape of one item
    outputs: list[str]  # compared names of what forward returns
    compared: list[Compared]  # (Caffe blob, "ATTRIBUTE:INDEX") per layer output


def torch_module() -> Any:
    """``torch``, or an error that says how to install it."""
    extras.need("pytorch", "exporting to PyTorch", CPU_BUILD)
    import torch  # noqa: PLC0415 - an optional extra

    return torch


def refusals(net_param: Any) -> None:
    """Refuse, before anything is built, the first layer the PyTorch export cannot write: by name and type."""
    for layer in net_param.layer:
        if layer.type in onnxlayers.REFUSED:
            raise ExportError(f"layer {layer.name!r} ({layer.type}) cannot be exported: "
                              f"{onnxlayers.REFUSED[layer.type]}")
        if layer.type not in torchlayers.TRANSLATIONS and layer.type not in SKIPPED:
            onnx = "the ONNX export (caffetool export without --to) covers it" if layer.type in onnxlayers.CONVERTERS \
                else "nor does the ONNX export"
            raise ExportError(f"layer {layer.name!r} ({layer.type}) cannot be exported to PyTorch: the PyTorch export "
                              f"does not cover {layer.type} layers; {onnx}")


def convert(net_param: Any, net: Any, name: str, about: str, weights_name: str) -> TorchConverted:
    """``net_param`` (the deploy NetParameter) with the weights and shapes of ``net`` (pycaffe's) as
    ``model.py`` and a state_dict; ``about`` opens the file's docstring."""
    refusals(net_param)
    order, kept = kept_layers(net_param, net)
    taken = _reserved()
    inputs = {blob: tuple(net.blobs[blob].data.shape[1:])
              for blob in [*net_param.input, *(t for layer in kept if layer.type == "Input" for t in layer.top)]}
    variable = _Names(taken | {"self"})
    arguments = {variable.of(blob): "(N, " + ", ".join(map(str, shape)) + ")" for blob, shape in inputs.items()}
    attribute = _Names(taken)
    attributes, steps, compared, helpers, state = [], [], [], set(), {}
    current = {blob: variable.of(blob) for blob in inputs}
    learned = net.params
    last = {}
    for layer in kept:
        if layer.type in SKIPPED:
            continue
        missing = [b for b in layer.bottom if b not in current]
        if missing:
            raise ExportError(f"layer {layer.name!r} reads {missing[0]!r}, which no layer before it writes")
        attr = attribute.of(layer.name)
        params = [np.array(b.data, np.float32) for b in learned[layer.name]] if layer.name in learned else []
        item = Layer(layer, [current[b] for b in layer.bottom], [variable.of(t) for t in layer.top],
                     [tuple(net.blobs[b].data.shape) for b in layer.bottom],
                     [tuple(net.blobs[t].data.shape) for t in layer.top], params)
        made = torchlayers.TRANSLATIONS[layer.type](item)
        attributes.append(torchcode.Attribute(attr, layer.name, made.build))
        args = ", ".join(item.bottoms)
        steps.append(torchcode.Step(tuple(item.tops), made.call.format(*item.bottoms, self=f"self.{attr}", args=args)))
        helpers.update(made.helpers)
        state.update({f"{attr}.{key}": np.ascontiguousarray(value) for key, value in made.state.items()})
        current.update(zip(layer.top, item.tops))
        names = tuple((top, f"{attr}:{i}") for i, top in enumerate(layer.top))
        last.update(names)
        compared.append(Compared(layer.name, layer.type, order.index(layer.name), names))
    returned = [blob for blob in net.outputs if blob in last]
    class_name = _class_name(net_param.name or name)
    source = torchcode.source(class_name, about, attributes, arguments, steps, [current[b] for b in returned],
                              helpers, weights_name)
    return TorchConverted(source, class_name, state, inputs, [last[b] for b in returned], compared)


class _Names:
    """Python names for Caffe's: ``_`` for what a name cannot hold, a suffix where two would meet."""

    def __init__(self, taken: set[str]) -> None:
        self.taken, self.given = set(taken), {}

    def of(self, caffe_name: str) -> str:
        if caffe_name not in self.given:
            base = re.sub(r"\W", "_", caffe_name)
            base = f"_{base}" if not base or base[0].isdigit() else base
            base = f"{base}_" if keyword.iskeyword(base) else base
            name, k = base, 1
            while name in self.taken:
                k += 1
                name = f"{base}_{k}"
            self.taken.add(name)
            self.given[caffe_name] = name
        return self.given[caffe_name]


def _reserved() -> set[str]:
    """Names an attribute of an ``nn.Module`` cannot take (its own methods and fields)."""
    nn = torch_module().nn
    return set(dir(nn.Module())) | {"forward"}


def importable(name: str) -> bool:
    """Whether ``name`` can be a module Python imports (``import name``)."""
    return name.isidentifier() and not keyword.iskeyword(name)


def module_name(stem: str) -> str:
    """``stem`` as a module name Python can import: ``bvlc-net`` -> ``bvlc_net``, ``1net`` -> ``model_1net``."""
    name = re.sub(r"\W", "_", stem)
    name = name if name and not name[0].isdigit() else f"model_{name}"
    return f"{name}_" if keyword.iskeyword(name) else name


def _class_name(net_name: str) -> str:
    name = re.sub(r"\W", "_", net_name)
    name = name if name and not name[0].isdigit() else f"Net_{name}"
    name = name[0].upper() + name[1:]
    clash = set(torchcode.HELPERS) | {"Path", "F", "nn", "torch", "load", "annotations"}
    return f"{name}Net" if name in clash or keyword.iskeyword(name) else name


def serialised(converted: TorchConverted) -> bytes:
    """The state_dict as ``torch.save`` writes it, every entry checked against the module's own
    (names and shapes) by ``load_state_dict(strict=True)``."""
    torch = torch_module()
    model = module_class(converted.source, converted.class_name)()
    try:
        model.load_state_dict({k: torch.from_numpy(v) for k, v in converted.state.items()}, strict=True)
    except RuntimeError as e:
        raise ExportError(f"the weights do not fit the written module: {str(e).strip().splitlines()[0]}") from None
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.getvalue()


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


def runner(source: str, weights: bytes, converted: TorchConverted, filename: str = "model.py"
           ) -> Callable[[dict[str, np.ndarray]], tuple[dict[str, np.ndarray], dict[str, np.ndarray]]]:
    """What the verification calls with each batch: (every layer's outputs, forward's outputs), by
    compared name, from ``source`` with ``weights`` in eval mode."""
    torch = torch_module()
    model = module_class(source, converted.class_name, filename)()
    try:
        model.load_state_dict(torch.load(io.BytesIO(weights), map_location="cpu", weights_only=True), strict=True)
    except Exception as e:
        raise ExportError(f"the weights cannot be loaded into {filename}'s {converted.class_name}: "
                          f"{str(e).strip().splitlines()[0]}") from None
    model.eval()
    caught: dict[str, np.ndarray] = {}

    def catch(attr: str) -> Callable:
        def hook(_module: Any, _inputs: Any, output: Any) -> None:
            for i, value in enumerate(output if isinstance(output, tuple) else (output,)):
                caught[f"{attr}:{i}"] = value.detach().numpy().copy()
        return hook

    for c in converted.compared:
        attr = c.outputs[0][1].rsplit(":", 1)[0]
        module = getattr(model, attr, None)
        if module is None:
            raise ExportError(f"{filename}'s {converted.class_name} has no attribute {attr!r} for the deploy net's "
                              f"layer {c.layer!r}: it is not an export of this net")
        module.register_forward_hook(catch(attr))

    def run(feeds: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        caught.clear()
        with torch.inference_mode():
            try:
                out = model(*(torch.from_numpy(feeds[blob]) for blob in converted.inputs))
            except Exception as e:
                raise ExportError(f"{filename} cannot run on the inputs: {type(e).__name__}: "
                                  f"{str(e).strip().splitlines()[0]}") from None
        outs = out if isinstance(out, tuple) else (out,)
        return dict(caught), {name: value.numpy() for name, value in zip(converted.outputs, outs)}
    return run
