"""Nets written for another fork of Caffe, refused with the layer, its type and the fork named.

Many published models were written for a fork that added layer types, parameter fields or Python
layers BVLC Caffe never had: Faster R-CNN's ``ROIPooling`` and its ``rpn.proposal_layer``, SegNet's
``Upsample``, PSPNet's and DeepLab's ``Interp``, the YOLO ports' ``Region``, SSD's training layers.
Such a net fails to parse (protobuf's 'Message type "caffe.LayerParameter" has no field named
"upsample_param"') or, once parsed, cannot be built by the engine. :func:`unknown_field` and
:func:`check` turn both into one :class:`~caffetool.errors.UnsupportedLayer` that names the file and
line, the layer, its type, the fork it comes from and what caffetool runs instead;
:mod:`caffetool.nets.prototxt` calls them on every net it reads, so every task says the same.

Which fork defines what is the engine's own table, ``caffe.forks`` (``LAYER_TYPES``, ``FIELDS``,
``PYTHON_MODULES``, ``describe``), read from the pycaffe whose ``caffe_pb2`` parsed the net. The
layer catalogue (:mod:`caffetool.layers.catalogue`) says which types caffetool knows: a type declared
there passes even where the fork table names it. Without the fork table (a pycaffe that lacks it)
an unknown field is still named with its layer, just without the fork.

Limits: a layer type that no fork table knows is left to each task (the memory estimate counts it as
unmodelled, the exports and Caffe itself refuse it), and a Python layer is refused only when its
module is a known fork's and cannot be found on ``sys.path``: a user's own Python layers are
imported, and named when they fail, where Caffe builds the net (:mod:`caffetool.nets.check`).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import re
import sys
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from google.protobuf.message import Message

from caffetool.errors import NetError, UnsupportedLayer

UNKNOWN_FIELD = re.compile(r'Message type "[\w.]+" has no field named "(\w+)"')
TOKEN = re.compile(r'''"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|\#[^\n]*|[{}<>:]|[^\s{}<>:"'\#]+''')
LAYER_BLOCKS = ("layer", "layers")
DOCS = "docs/reference/layers.md lists every type"


@dataclass
class Block:
    """A ``name { ... }`` block of a prototxt: its field name, where it opens, and its fields (the
    first value of each with the offset of that value; a sub-block with where it opens)."""

    name: str | None
    start: int
    fields: dict[str, tuple[str, int]] = field(default_factory=dict)

    def value(self, key: str) -> str | None:
        return self.fields[key][0] if key in self.fields else None


def fork_table(message: Message) -> ModuleType | None:
    """``caffe.forks`` of the pycaffe whose ``caffe_pb2`` made ``message``; None where it has none."""
    module = type(message).__module__
    package = module.rsplit(".proto.", 1)[0] if ".proto." in module else module.split(".")[0]
    try:
        return importlib.import_module(f"{package}.forks")
    except ImportError:
        return None


def unknown_field(error: Exception, text: str, where: str, message: Message) -> NetError | None:
    """The error for protobuf's ``error`` when it is a field no layer of this engine has, naming the
    layer that sets it (None for any other parse error, or a field outside a layer)."""
    found = UNKNOWN_FIELD.search(str(error))
    line, column = error.GetLine(), error.GetColumn()  # type: ignore[attr-defined]
    if found is None or not line:
        return None
    path = _blocks_at(text, _offset(text, line, column))
    layers = [i for i, block in enumerate(path) if block.name in LAYER_BLOCKS]
    if not layers:
        return None
    layer = path[layers[-1]]
    name, kind = layer.value("name") or "?", layer.value("type") or "?"
    setting = ".".join([*(b.name or "?" for b in path[layers[-1] + 1:]), found.group(1)])
    table = fork_table(message)
    fork = _describe(table, table and (table.FIELDS.get(setting) or table.LAYER_TYPES.get(kind)))
    at = f"{where}:{line}:{column}"
    if layer.name == "layers" or _known(kind):  # a V1 layer's type is an enum of BVLC's own types
        if fork is None:
            return NetError(f"{at}: layer {name!r} ({kind}) sets {setting}, which is not a field of {kind} in BVLC "
                            "Caffe 1.0 or in a fork caffetool knows of; correct or remove it")
        return _refusal(at, name, kind, f"({kind}) sets {setting}", fork)
    return _refusal(at, name, kind, f"has type {kind!r} and sets {setting}", fork, both=True)


def check(message: Message, text: str, where: str) -> None:
    """Refuse the first layer of the net in ``message`` (parsed from ``text``; a solver's inline nets
    too) whose type comes from a fork and is not in the catalogue, or that is a fork's Python layer
    whose module cannot be imported."""
    table = fork_table(message)
    if table is None:
        return
    nets = _nets(message)
    if not any(_suspect(layer, table) for net in nets for layer in net.layer):
        return  # the common case, without scanning the text
    blocks = _layer_blocks(text)
    for layer in (layer for net in nets for layer in net.layer):
        if not _suspect(layer, table):
            continue
        block = next((b for b in blocks if b.value("name") == layer.name), None)
        if layer.type == "Python":
            module = layer.python_param.module
            raise _refusal(_at(where, text, block, "python_param"), layer.name, layer.type,
                           f"has type 'Python' and runs the module {module!r}",
                           _describe(table, table.PYTHON_MODULES[module]),
                           lacks="which is not on sys.path or PYTHONPATH")
        raise _refusal(_at(where, text, block, "type"), layer.name, layer.type, f"has type {layer.type!r}",
                       _describe(table, table.LAYER_TYPES[layer.type]))


def _nets(message: Message) -> list[Any]:
    """The nets in ``message``: itself for a net, a solver's inline nets, none for anything else."""
    kind = type(message).__name__
    if kind == "NetParameter":
        return [message]
    if kind != "SolverParameter":
        return []
    return [getattr(message, f) for f in ("net_param", "train_net_param") if message.HasField(f)] + \
        list(message.test_net_param)


def _suspect(layer: Any, table: ModuleType) -> bool:
    """Whether ``layer`` is a fork's: its type (unless the catalogue declares it), or its Python module,
    where that cannot be found."""
    if layer.type == "Python":
        return layer.python_param.module in table.PYTHON_MODULES and not _importable(layer.python_param.module)
    return layer.type in table.LAYER_TYPES and not _known(layer.type)


def _known(layer_type: str) -> bool:
    from caffetool.layers import catalogue  # noqa: PLC0415 - only for a layer that is suspect already

    return catalogue.entry(layer_type) is not None


def _importable(module: str) -> bool:
    """Whether ``module`` can be found on ``sys.path``, without running any of its packages' code
    (``importlib.util.find_spec`` would import the parent packages)."""
    if module in sys.modules:
        return True
    parts = module.split(".")
    search: Any = None
    for i in range(len(parts)):
        try:
            spec = importlib.machinery.PathFinder.find_spec(".".join(parts[:i + 1]), search)
        except (ImportError, ValueError):
            return False
        if spec is None:
            return False
        search = spec.submodule_search_locations
        if search is None and i < len(parts) - 1:
            return False
    return True


def _describe(table: ModuleType | None, fork: Any) -> str | None:
    """The fork table's words for ``fork`` ('the SegNet fork of Caffe (alexgkendall/caffe-segnet)')."""
    return table.describe(fork) if table is not None and fork is not None else None


def _refusal(at: str, name: str, kind: str, subject: str, fork: str | None, both: bool = False,
             lacks: str = "which caffetool's engine does not have") -> UnsupportedLayer:
    if fork is not None:
        origin = f"{'they come' if both else 'it comes'} from {fork}"
    else:
        origin = f"no fork caffetool knows of defines {'them' if both else 'it'}"
    return UnsupportedLayer(f"{at}: layer {name!r} {subject}, {lacks}: {origin}. {supported()}", name, kind, fork)


def supported() -> str:
    """What the engine runs, from the catalogue: BVLC Caffe 1.0's layers and each fork's few."""
    from caffetool.layers import catalogue  # noqa: PLC0415 - only when refusing
    from caffetool.layers.entry import LayerType  # noqa: PLC0415

    added: dict[str, list[str]] = {}
    for name, kind in catalogue.CATALOGUE.items():
        if kind.fork != LayerType.fork:
            added.setdefault(kind.fork, []).append(name)
    extra = "".join(f", plus {_listed(names)} from {fork}" for fork, names in added.items())
    return f"caffetool runs the layers of {LayerType.fork}{extra}; {DOCS}"


def _listed(names: list[str]) -> str:
    return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]


def _at(where: str, text: str, block: Block | None, key: str) -> str:
    """``where:LINE`` of the ``key`` field of ``block`` (else of the block), or ``where`` alone."""
    if block is None:
        return where
    offset = block.fields[key][1] if key in block.fields else block.start
    return f"{where}:{text.count(chr(10), 0, offset) + 1}"


def _offset(text: str, line: int, column: int) -> int:
    """The offset of protobuf's 1-based ``line`` and ``column`` in ``text``."""
    starts = [0, *(m.end() for m in re.finditer("\n", text))]
    return starts[min(line, len(starts)) - 1] + max(column - 1, 0)


def _walk(text: str, until: int | None = None) -> tuple[list[Block], list[Block]]:
    """Every layer block of ``text`` in order (at any depth: a solver's inline nets too), and the
    blocks open at offset ``until`` (outermost first). Strings and comments are skipped, so a
    brace inside either does not count."""
    stack: list[Block] = []
    layers: list[Block] = []
    opened_at: list[Block] | None = None
    word: str | None = None
    key: str | None = None
    for token in TOKEN.finditer(text):
        t = token.group()
        if until is not None and opened_at is None and token.start() >= until:
            opened_at = list(stack)
        if t.startswith("#"):
            continue
        if t in "{<":
            if stack and (key or word):  # a sub-block: where it opens
                stack[-1].fields.setdefault(key or word or "", ("", token.start()))
            stack.append(Block(key or word, token.start()))
            if stack[-1].name in LAYER_BLOCKS:
                layers.append(stack[-1])
            word = key = None
        elif t in "}>":
            if stack:
                stack.pop()
            word = key = None
        elif t == ":":
            key = word
        elif key is not None:  # a field's value
            if stack:
                stack[-1].fields.setdefault(key, (t[1:-1] if t[:1] in "\"'" else t, token.start()))
            key = None
        else:
            word = t
    return layers, opened_at if opened_at is not None else list(stack)


def _layer_blocks(text: str) -> list[Block]:
    return _walk(text)[0]


def _blocks_at(text: str, offset: int) -> list[Block]:
    """The blocks open at ``offset``, each with its fields (those after ``offset`` too)."""
    return _walk(text, offset)[1]
