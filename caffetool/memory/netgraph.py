"""A Caffe net as Caffe's ``Net::Init`` would lay it out for one phase — without running Caffe.

Layers are filtered by phase, Split layers are inserted where one blob feeds several layers
(``InsertSplits``, util/insert_splits.cpp, with Caffe's own names), shapes are inferred from the
input, a top with its bottom's name at the same index is computed in place (``AppendTop``), and
each layer is marked as needing backward exactly as ``Net::Init`` decides it (net.cpp: a bottom
that needs backward or a parameter with ``lr_mult`` != 0; then, walking back, only layers whose
tops reach a loss, and not when every consumer of their tops skips ``propagate_down``).

Blobs may share memory: each blob has a data key and a gradient key, and blobs with the same key
are one allocation (Split tops share data; Flatten, Reshape, one-input Concat share both).

A layer no rule models is kept: its tops take its first bottom's shape and it is listed in
``Graph.unmodelled``; a layer without bottoms (a ``Python`` data layer) leaves its tops unshaped,
and every layer that reads them is listed too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from caffetool.errors import NetError
from caffetool.layers import catalogue
from caffetool.layers.allocation import INSIDE, LayerInfo, Shape, count
from caffetool.layers.sources import DataTops
from caffetool.nets import state

NAME = re.compile(r'\bname:\s*"([^"]+)"')


@dataclass
class Node:
    name: str
    type: str
    bottoms: list[str]  # blob ids
    tops: list[str]  # blob ids (an in-place top is its bottom's id)
    info: LayerInfo
    line: int | None = None
    need_backward: bool = False
    bottom_need: list[bool] = field(default_factory=list)
    is_data: bool = False
    is_split: bool = False
    source: DataTops | None = None
    lr_mults: list[float] = field(default_factory=list)
    shared_params: list[bool] = field(default_factory=list)  # owned by an earlier layer (same param name)
    loss_weights: list[float] = field(default_factory=list)
    inner: Graph | None = None  # the net an RNN or LSTM runs inside
    bottom_names: list[str] = field(default_factory=list)  # as Caffe names them (after InsertSplits)
    top_names: list[str] = field(default_factory=list)
    propagate_down: list[bool] = field(default_factory=list)

    @property
    def prefetch(self) -> int:
        return self.source.prefetch if self.source else 0


@dataclass
class Graph:
    nodes: list[Node]
    shapes: dict[str, Shape]  # blob id -> shape
    data_key: dict[str, str] = field(default_factory=dict)  # blob id -> the allocation holding its data
    diff_key: dict[str, str] = field(default_factory=dict)  # blob id -> the allocation holding its gradient
    unmodelled: list[tuple[str, str, str]] = field(default_factory=list)  # (layer, type, what was assumed)
    not_counted: list[tuple[str, str]] = field(default_factory=list)  # (layer, what it holds that is not counted)
    setup_diffs: set[str] = field(default_factory=set)  # blobs whose gradient an outer layer zeroes at set-up


def layer_lines(text: str | None) -> dict[str, int]:
    """Line of each ``name:`` inside a layer, for error messages."""
    if not text:
        return {}
    lines: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        for name in NAME.findall(line):
            lines.setdefault(name, number)
    return lines


@dataclass
class _Spec:
    """A layer after ``InsertSplits``: the proto, and its (possibly renamed) bottoms and tops."""

    layer: Any
    name: str
    type: str
    bottoms: list[str]
    tops: list[str]
    loss_weights: list[float]


def _loss_weights(layer: Any) -> list[float]:
    """Explicit ``loss_weight``s, or 1 for a loss layer's first top (``LossLayer::LayerSetUp``)."""
    if layer.loss_weight:
        return list(layer.loss_weight)
    return [1.0] + [0.0] * (len(layer.top) - 1) if catalogue.is_loss(layer.type) else [0.0] * len(layer.top)


def insert_splits(layers: list[Any], where: Any = lambda name: "net") -> list[_Spec]:
    """util/insert_splits.cpp: a top read by several bottoms (or read and weighted as a loss) gets a
    Split layer ``<blob>_<layer>_<i>_split`` with one top ``..._split_<k>`` per reader."""
    last_top: dict[str, tuple[int, int]] = {}
    source: dict[tuple[int, int], tuple[int, int]] = {}
    readers: dict[tuple[int, int], int] = {}
    weights: dict[tuple[int, int], float] = {}
    for i, layer in enumerate(layers):
        for j, blob in enumerate(layer.bottom):
            if blob not in last_top:
                raise NetError(f"{where(layer.name)}: layer {layer.name!r} reads blob {blob!r}, which no earlier "
                               "layer makes")
            source[(i, j)] = last_top[blob]
            readers[last_top[blob]] = readers.get(last_top[blob], 0) + 1
        for j, blob in enumerate(layer.top):
            last_top[blob] = (i, j)
        for j, weight in enumerate(layer.loss_weight[: len(layer.top)]):
            weights[last_top[layer.top[j]]] = weight
            if weight:
                readers[last_top[layer.top[j]]] = readers.get(last_top[layer.top[j]], 0) + 1
    taken: dict[tuple[int, int], int] = {}
    out: list[_Spec] = []
    for i, layer in enumerate(layers):
        bottoms = list(layer.bottom)
        for j, blob in enumerate(bottoms):
            top_idx = source[(i, j)]
            if readers.get(top_idx, 0) > 1:
                k = taken.get(top_idx, 0)
                taken[top_idx] = k + 1
                bottoms[j] = f"{blob}_{layers[top_idx[0]].name}_{top_idx[1]}_split_{k}"
        out.append(_Spec(layer, layer.name, layer.type, bottoms, list(layer.top), _loss_weights(layer)))
        for j, blob in enumerate(layer.top):
            n = readers.get((i, j), 0)
            if n > 1:
                weight = weights.get((i, j), 0.0)
                tops = [f"{blob}_{layer.name}_{j}_split_{k}" for k in range(n)]
                split_weights = [0.0] * (n - 1) + [weight] if weight else [0.0] * n
                out.append(_Spec(None, f"{blob}_{layer.name}_{j}_split", "Split", [blob], tops, split_weights))
    return out


def build(net: Any, phase: str, input_shape: Shape | None, batch: int | None, text: str | None = None,
          source: str = "net", external: tuple[str, ...] = (), setup_diffs: tuple[str, ...] = ()) -> Graph:
    """``net`` is a caffe_pb2.NetParameter (its ``state`` gives the level and stages its layers are
    filtered by, as a solver's ``test_state`` does); ``input_shape`` is (C, H, W) for Data layers;
    ``external`` names blobs whose memory belongs to an outer layer (an unrolled net's inputs)."""
    phase_id = 0 if phase == "train" else 1
    lines = layer_lines(text)
    level, stages = net.state.level, frozenset(net.state.stage)
    layers = _input_layer(net) + list(net.layer)
    specs = insert_splits([layer for layer in layers if state.included(layer, phase_id, level, stages)],
                          lambda name: f"{source}:{lines[name]}" if name in lines else source)
    g = Graph([], {})
    current: dict[str, str] = {}  # blob name -> blob id
    unshaped: set[str] = set()
    param_owners: set[str] = set()
    for spec in specs:
        line = lines.get(spec.name)
        where = f"{source}:{line}" if line else source
        node = _node(spec, phase, input_shape, batch, g, current, unshaped, where, line)
        if node is None:
            continue
        _share_params(node, spec, param_owners)
        node.bottom_names, node.top_names = spec.bottoms, spec.tops
        node.propagate_down = list(spec.layer.propagate_down) if spec.layer is not None else []
        for blob in node.tops:
            if blob.split("@")[0] in external:
                g.data_key[blob] = g.diff_key[blob] = f"outside:{blob}"
        g.nodes.append(node)
    if unshaped and not any(not n.is_data for n in g.nodes):
        culprit = next(name for name, _, why in g.unmodelled if why.startswith("makes"))
        where = f"{source}:{lines[culprit]}" if culprit in lines else source
        raise NetError(f"{where}: layer {culprit!r} makes blobs of unknown shape and every later layer reads them, "
                       "so nothing can be estimated; declare its tops with an Input or DummyData layer of the same "
                       "shapes in a copy of the net")
    _mark_backward(g, bool(net.force_backward))
    g.setup_diffs = {current[name] for name in setup_diffs if name in current}
    for node in g.nodes:
        if node.info.inner is not None:
            node.inner = build(node.info.inner, "train", None, None, source=f"{source}: layer {node.name!r}",
                               external=node.info.inner_external, setup_diffs=node.info.inner_setup_diffs)
    return g


def _input_layer(net: Any) -> list[Any]:
    """The net's own inputs (``input`` with ``input_shape`` or ``input_dim``, as deploy files of Caffe's
    first years declare them) as the Input layer named "input" that Caffe's ``UpgradeNetInput`` puts
    first in the net; none when the net declares none."""
    if not net.input or not (net.input_shape or net.input_dim):
        return []
    layer = type(net)().layer.add(name="input", type="Input", top=list(net.input))
    for i in range(len(net.input)):
        dims = net.input_shape[i].dim if net.input_shape else net.input_dim[4 * i:4 * i + 4]
        layer.input_param.shape.add(dim=list(dims))
    return [layer]


def _node(spec: _Spec, phase: str, input_shape: Shape | None, batch: int | None, g: Graph,
          current: dict[str, str], unshaped: set[str], where: str, line: int | None) -> Node | None:
    """The node of one layer, its tops registered in ``g``; None when its inputs have no known shape."""
    layer = spec.layer
    if (sourced := catalogue.source(spec.type)) is not None:
        tops_info = sourced.tops(layer, input_shape, batch, where)
        node = Node(spec.name, spec.type, [], [], LayerInfo(tops_info.shapes), line, is_data=True, source=tops_info)
        if tops_info.not_counted:
            g.not_counted.append((spec.name, tops_info.not_counted))
        _add_tops(node, spec, g, current, tops_info.shapes)
        if not tops_info.owned:
            for blob in node.tops:
                g.data_key[blob] = f"prefetch:{blob}"
        return node
    bottoms = [current[b] for b in spec.bottoms]
    if any(b in unshaped for b in bottoms) or (not bottoms and catalogue.translation(spec.type, "memory") is None
                                                    and spec.type != "Split"):
        why = "reads blobs of unknown shape" if bottoms else "makes blobs of unknown shape"
        g.unmodelled.append((spec.name, spec.type, why))
        for top in spec.tops:
            blob = f"{top}@{spec.name}"
            current[top] = blob
            unshaped.add(blob)
        return None
    shapes = [g.shapes[b] for b in bottoms]
    if spec.type == "Split":
        info = LayerInfo([shapes[0]] * len(spec.tops))
    elif (rule := catalogue.translation(spec.type, "memory")) is not None:
        info = rule(layer, shapes, phase)
    else:  # a type the catalogue refuses or does not know: a lower bound
        info = LayerInfo([shapes[0]] * len(layer.top))
        shape = "x".join(map(str, shapes[0]))
        g.unmodelled.append((spec.name, spec.type, f"tops shaped like its first input, {shape}"))
    node = Node(spec.name, spec.type, bottoms, [], info, line, is_split=spec.type == "Split",
                loss_weights=spec.loss_weights + [0.0] * (len(spec.tops) - len(spec.loss_weights)))
    _add_tops(node, spec, g, current, info.tops)
    for i, blob in enumerate(node.tops):
        if node.is_split:
            g.data_key[blob] = g.data_key.get(bottoms[0], bottoms[0])
        elif info.alias.get(i) == INSIDE:
            g.data_key[blob] = g.diff_key[blob] = f"inside:{blob}"
        elif i in info.alias:
            k = info.alias[i]
            g.data_key[blob] = g.data_key.get(bottoms[k], bottoms[k])
            g.diff_key[blob] = g.diff_key.get(bottoms[k], bottoms[k])
    return node


def _add_tops(node: Node, spec: _Spec, g: Graph, current: dict[str, str], shapes: list[Shape]) -> None:
    """``Net::AppendTop``: a top named like the bottom at its index is that bottom's blob."""
    for i, top in enumerate(spec.tops):
        if i < len(spec.bottoms) and spec.bottoms[i] == top:
            node.tops.append(current[top])
            continue
        blob = f"{top}@{spec.name}"
        g.shapes[blob] = shapes[i] if i < len(shapes) else shapes[0]
        current[top] = blob
        node.tops.append(blob)


def _share_params(node: Node, spec: _Spec, owners: set[str]) -> None:
    """``Net::AppendParam``: a named parameter seen before is the earlier layer's blob."""
    n = len(node.info.params)
    specs = list(spec.layer.param) if spec.layer is not None else []
    node.lr_mults = [s.lr_mult if s.HasField("lr_mult") else 1.0 for s in specs[:n]] + [1.0] * (n - len(specs))
    node.shared_params = []
    for i in range(n):
        name = specs[i].name if i < len(specs) else ""
        node.shared_params.append(bool(name) and name in owners)
        if name:
            owners.add(name)


def _mark_backward(g: Graph, force: bool) -> None:
    """net.cpp ``Net::Init``: which layers back-propagate and into which bottoms."""
    needs: set[str] = set()
    for node in g.nodes:
        down = node.propagate_down
        node.bottom_need = [down[k] if down else (b in needs) for k, b in enumerate(node.bottoms)]
        node.need_backward = any(b in needs for b in node.bottoms) or any(m != 0 for m in node.lr_mults)
        if node.is_data:
            node.need_backward = False
        if node.need_backward:
            needs.update(node.tops)
    under_loss: set[str] = set()
    skip: set[str] = set()
    for node in reversed(g.nodes):
        names = node.top_names
        contributes = any(w for w in node.loss_weights) or any(n in under_loss for n in names)
        skip_down = all(n in skip for n in names)
        if node.need_backward and skip_down:
            node.need_backward = False
            node.bottom_need = [False] * len(node.bottom_need)
        if not contributes:
            node.need_backward = False
        for k, name in enumerate(node.bottom_names):
            if contributes:
                under_loss.add(name)
            else:
                node.bottom_need[k] = False
            if not node.bottom_need[k]:
                skip.add(name)
    if force:
        for node in g.nodes:
            node.need_backward = not node.is_data
            node.bottom_need = [True] * len(node.bottoms)


def param_count(g: Graph) -> int:
    return sum(count(p) for n in g.nodes for p, shared in zip(n.info.params, n.shared_params) if not shared)
