"""A Caffe deploy net with its weights as PyTorch code: ``model.py`` (one ``nn.Module``) and its
``state_dict``, and how the verification runs them.

As in :mod:`.onnxnet`, the layers are those Caffe itself kept (``include``/``exclude`` applied; the
Split layers it inserts left out: a Python variable fans out by itself), with the shapes Caffe gave
each blob. Each layer becomes an attribute named after it, each blob a variable of ``forward`` named after it:
ASCII identifiers (the name's NFKC form, which Python itself reads identifiers as, with every other
character ``_``), never a keyword, a name the module or ``nn.Module`` already holds, nor another
layer's or blob's name, so no two can meet once Python reads them. Every other string of the net
reaches ``model.py`` as a Python literal (:mod:`.torchcode`). The module's own file name must be
importable and must not hide a module Python already finds (``torch.py`` beside it would hide
PyTorch from it). The verification runs the exact text and the exact bytes that are written, loaded
as the ``pytorch`` backend loads an export (:mod:`caffetool.backends.torchmodule`), every layer's
outputs caught by a forward hook on its attribute and the net's outputs taken from what ``forward``
returns, as a user gets them.
"""

from __future__ import annotations

import importlib.machinery
import io
import keyword
import re
import sys
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from caffetool.backends import torchmodule
from caffetool.backends.torchmodule import module_class
from caffetool.errors import ExportError
from caffetool.export import torchcode
from caffetool.export.onnxnet import Compared, cut_of, kept_layers
from caffetool.layers import catalogue
from caffetool.layers.caffelayer import Layer

CPU_BUILD = torchmodule.CPU_BUILD  # how to install PyTorch, said where the export needs it


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
    return torchmodule.torch_for("exporting to PyTorch")


def refusals(net_param: Any) -> None:
    """Refuse, before anything is built, the first layer the PyTorch export cannot write: by name and type."""
    for layer in net_param.layer:
        if (why := catalogue.refusal(layer.type, "onnx")) is not None:
            raise ExportError(f"layer {layer.name!r} ({layer.type}) cannot be exported: {why}")
        if not catalogue.covered(layer.type, "pytorch"):
            onnx = ("the ONNX export (caffetool export without --to) covers it" if catalogue.covered(layer.type, "onnx")
                    else "nor does the ONNX export")
            raise ExportError(f"layer {layer.name!r} ({layer.type}) cannot be exported to PyTorch: the PyTorch export "
                              f"does not cover {layer.type} layers; {onnx}")


def convert(net_param: Any, net: Any, name: str, about: str, weights_name: str) -> TorchConverted:
    """``net_param`` (the deploy NetParameter) with the weights and shapes of ``net`` (pycaffe's) as
    ``model.py`` and a state_dict; ``about`` opens the file's docstring."""
    refusals(net_param)
    order, kept = kept_layers(net_param, net)
    class_name = _class_name(net_param.name or name)
    inputs = {blob: tuple(net.blobs[blob].data.shape[1:])
              for blob in [*net_param.input, *(t for layer in kept if layer.type == "Input" for t in layer.top)]}
    variable = _Names(_module_names() | {"self", class_name})
    arguments = {variable.of(blob): "(N, " + ", ".join(map(str, shape)) + ")" for blob, shape in inputs.items()}
    attribute = _Names(_reserved())
    attributes, steps, compared, helpers, state = [], [], [], set(), {}
    current = {blob: variable.of(blob) for blob in inputs}
    learned = net.params
    last = {}
    for layer in kept:
        if catalogue.omitted(layer.type, "pytorch"):  # the inputs are forward's arguments; Silence computes nothing
            continue
        missing = [b for b in layer.bottom if b not in current]
        if missing:
            raise ExportError(f"layer {layer.name!r} reads {missing[0]!r}, which no layer before it writes")
        attr = attribute.of(layer.name)
        params = [np.array(b.data, np.float32) for b in learned[layer.name]] if layer.name in learned else []
        item = Layer(layer, [current[b] for b in layer.bottom], [variable.of(t) for t in layer.top],
                     [tuple(net.blobs[b].data.shape) for b in layer.bottom],
                     [tuple(net.blobs[t].data.shape) for t in layer.top], params)
        made = catalogue.translation(layer.type, "pytorch")(item)
        attributes.append(torchcode.Attribute(attr, layer.name, made.build))
        args = ", ".join(item.bottoms)
        steps.append(torchcode.Step(tuple(item.tops), made.call.format(*item.bottoms, self=f"self.{attr}", args=args)))
        helpers.update(made.helpers)
        state.update({f"{attr}.{key}": np.ascontiguousarray(value) for key, value in made.state.items()})
        current.update(zip(layer.top, item.tops))
        names = tuple((top, f"{attr}:{i}") for i, top in enumerate(layer.top))
        last.update(names)
        compared.append(Compared(layer.name, layer.type, order.index(layer.name), names, cut_of(layer)))
    returned = [blob for blob in net.outputs if blob in last]
    source = torchcode.source(class_name, about, attributes, arguments, steps, [current[b] for b in returned],
                              helpers, weights_name)
    return TorchConverted(source, class_name, state, inputs, [last[b] for b in returned], compared)


def identifier(name: str) -> str:
    """``name`` as an ASCII identifier: its NFKC form (``ｆｉ`` and ``ﬁ`` are ``fi`` to Python too) with
    every other character ``_``, ``_`` before a leading digit, one ``_`` for leading ones (``__x`` in a
    class would be mangled); keywords and clashes are the caller's."""
    base = re.sub(r"[^0-9A-Za-z_]", "_", unicodedata.normalize("NFKC", name))
    base = re.sub(r"^__+", "_", base)
    return f"_{base}" if not base or base[0].isdigit() else base


class _Names:
    """Python names for Caffe's (:func:`identifier`), never a keyword nor a name ``taken``: a suffix
    where two would meet."""

    def __init__(self, taken: set[str]) -> None:
        self.taken, self.given = set(taken), {}

    def of(self, caffe_name: str) -> str:
        if caffe_name not in self.given:
            base = identifier(caffe_name)
            base = f"{base}_" if keyword.iskeyword(base) or keyword.issoftkeyword(base) else base
            name, k = base, 1
            while name in self.taken:
                k += 1
                name = f"{base}_{k}"
            self.taken.add(name)
            self.given[caffe_name] = name
        return self.given[caffe_name]


def _module_names() -> set[str]:
    """The names ``model.py`` itself defines or imports at its top level."""
    return {*torchcode.MODULE_NAMES, *torchcode.HELPERS}


def _reserved() -> set[str]:
    """Names an attribute of an ``nn.Module`` cannot take (its own methods and fields)."""
    nn = torch_module().nn
    return set(dir(nn.Module())) | {"forward"}


def importable(name: str) -> bool:
    """Whether ``name`` can be a module Python imports (``import name``)."""
    return name.isascii() and name.isidentifier() and not keyword.iskeyword(name)


def shadowed(name: str) -> bool:
    """Whether a module file named ``name`` would hide a module Python already finds (the standard
    library's, ``torch``, anything installed): ``torch.py`` beside ``model.py`` is what ``import torch``
    would load there, for the model and for PyTorch's own imports. The current folder is not looked
    in: what it holds is what the file would sit beside."""
    if name in sys.stdlib_module_names or name in sys.builtin_module_names:
        return True
    here = Path.cwd().resolve()
    elsewhere = [p for p in sys.path if p and Path(p).resolve() != here]
    try:
        return importlib.machinery.PathFinder.find_spec(name, elsewhere) is not None
    except (ImportError, ValueError):
        return True


def module_name(stem: str) -> str:
    """``stem`` as a module name Python can import and that hides none: ``bvlc-net`` -> ``bvlc_net``,
    ``1net`` -> ``model_1net``, ``torch`` -> ``torch_model``."""
    name = re.sub(r"[^0-9A-Za-z_]", "_", unicodedata.normalize("NFKC", stem))
    name = name if name and not name[0].isdigit() else f"model_{name}"
    name = f"{name}_" if keyword.iskeyword(name) else name
    return f"{name}_model" if shadowed(name) else name


def _class_name(net_name: str) -> str:
    name = identifier(net_name).lstrip("_") or "Net"
    name = name if not name[0].isdigit() else f"Net_{name}"
    name = name[0].upper() + name[1:]
    return f"{name}Net" if name in _module_names() or keyword.iskeyword(name) else name


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


def runner(source: str, weights: bytes, converted: TorchConverted, filename: str = "model.py"
           ) -> Callable[[dict[str, np.ndarray]], tuple[dict[str, np.ndarray], dict[str, np.ndarray]]]:
    """What the verification calls with each batch: (every layer's outputs, forward's outputs), by
    compared name, from ``source`` with ``weights`` in eval mode."""
    module = torchmodule.instance(source, converted.class_name, weights, filename)
    return module_runner(module, list(converted.inputs), layer_outputs(converted), converted.outputs, filename)


def layer_outputs(converted: TorchConverted) -> list[str]:
    """Every layer output the verification compares, as ``ATTRIBUTE:INDEX``."""
    return [name for c in converted.compared for _, name in c.outputs]


def module_runner(module: Any, inputs: list[str], layers: list[str], outputs: list[str], filename: str
                  ) -> Callable[[dict[str, np.ndarray]], tuple[dict[str, np.ndarray], dict[str, np.ndarray]]]:
    """``module`` run once per batch: each of ``layers`` ("ATTRIBUTE:INDEX") caught by a hook on its
    attribute, ``outputs`` taken from what ``forward`` returns, in its order (never from a hook: a
    forward that returns another tensor than its last layer's is what a user would get)."""
    hooked = {f"{HOOKED}{name}": name for name in layers}
    model = torchmodule.model_of(module, inputs, outputs, hooked, filename)

    def run(feeds: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        got = model(feeds)
        return {name: got[f"{HOOKED}{name}"] for name in layers}, {name: got[name] for name in outputs}
    return run


HOOKED = "hooked "  # a layer output's name among what the backend's model gives, apart from forward's returns


def attribute_of(layer_name: str) -> str:
    """The attribute of ``model.py``'s module that a layer named ``layer_name`` becomes (where no other
    layer's name meets it once Python's characters are applied, which would add a suffix)."""
    return _Names(_reserved()).of(layer_name)
