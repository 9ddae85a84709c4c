"""A Caffe net as Caffe's ``Net::Init`` would lay it out for one phase — without running Caffe.

Layers are filtered by phase, shapes are inferred from the input, Split layers are inserted
where one blob feeds several layers (Caffe's ``InsertSplits``), in-place layers share their
bottom's blob, and each layer is marked as needing backward the way ``Net::Init`` decides it
(learnable parameters, or a bottom that needs backward, and a path to a loss).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from caffetool.errors import ConfigError, NetError
from caffetool.memory.layers import DATA_LAYERS, Buffer, LayerInfo, Shape, count, rule


NAME = re.compile(r'\bname:\s*"([^"]+)"')


@dataclass
class Node:
    name: str
    type: str
    bottoms: list[str]
    tops: list[str]  # blob ids (in-place tops reuse the bottom's id)
    info: LayerInfo
    line: int | None = None
    need_backward: bool = False
    is_data: bool = False
    is_split: bool = False
    prefetch: int = 0
    lr_mults: list[float] = field(default_factory=list)
    bottom_versions: list[str] = field(default_factory=list)  # which write of each bottom is read
    top_versions: list[str] = field(default_factory=list)


@dataclass
class Graph:
    nodes: list[Node]
    shapes: dict[str, Shape]  # blob id -> shape
    loss_blobs: set[str]
    split_tops: set[str]  # blobs that share their data with the split's bottom


def included(layer: Any, phase: int) -> bool:
    """Whether ``layer`` (a LayerParameter) is in the net of ``phase`` (0 TRAIN, 1 TEST), by its include/exclude rules."""
    if layer.include:
        return any(not r.HasField("phase") or r.phase == phase for r in layer.include)
    return not any(r.HasField("phase") and r.phase == phase for r in layer.exclude)


def layer_lines(text: str | None) -> dict[str, int]:
    """Line of each ``name:`` inside a layer, for error messages."""
    if not text:
        return {}
    lines = {}
    for number, line in enumerate(text.splitlines(), start=1):
        for name in NAME.findall(line):
            lines.setdefault(name, number)
    return lines


def build(net: Any, phase: str, input_shape: Shape | None, batch: int | None, text: str | None = None,
          source: str = "net") -> Graph:
    """``net`` is a caffe_pb2.NetParameter; ``input_shape`` is (C, H, W) for Data layers."""
    phase_id = 0 if phase == "train" else 1
    lines = layer_lines(text)
    layers = [layer for layer in net.layer if included(layer, phase_id)]
    shapes: dict[str, Shape] = {}
    current: dict[str, str] = {}  # blob name -> current blob id (in-place writes keep the id)
    version: dict[str, str] = {}  # blob name -> current version (every write makes a new one)
    nodes: list[Node] = []
    for layer in layers:
        line = lines.get(layer.name)
        if layer.type in DATA_LAYERS:
            node = _data_node(layer, input_shape, batch, shapes, current, line, source)
            node.top_versions = [f"{t}#{layer.name}" for t in layer.top]
            version.update(zip(layer.top, node.top_versions))
            nodes.append(node)
            continue
        try:
            bottoms = [current[b] for b in layer.bottom]
        except KeyError as e:
            where = f"{source}:{line}" if line else source
            raise NetError(f"{where}: layer {layer.name!r} reads blob {e.args[0]!r}, which no earlier layer makes") from None
        info = rule(layer, line, source)(layer, [shapes[b] for b in bottoms], phase)
        tops = []
        for i, top in enumerate(layer.top):
            if top in layer.bottom:  # in place: the top is the bottom's blob
                tops.append(current[top])
            else:
                blob_id = f"{top}@{layer.name}"
                shapes[blob_id] = info.tops[i] if i < len(info.tops) else info.tops[0]
                current[top] = blob_id
                tops.append(blob_id)
        mults = [p.lr_mult if p.HasField("lr_mult") else 1.0 for p in layer.param]
        mults += [1.0] * (len(info.params) - len(mults))
        read = [version[b] for b in layer.bottom]
        version.update({t: f"{t}#{layer.name}" for t in layer.top})
        nodes.append(Node(layer.name, layer.type, bottoms, tops, info, line, lr_mults=mults,
                          bottom_versions=read, top_versions=[version[t] for t in layer.top]))
    loss_blobs = {n.tops[0] for n in nodes if n.type == "SoftmaxWithLoss"}
    graph = _insert_splits(Graph(nodes, shapes, loss_blobs, set()))
    _mark_backward(graph)
    return graph


def _data_node(layer: Any, input_shape: Shape | None, batch: int | None, shapes: dict[str, Shape],
               current: dict[str, str], line: int | None, source: str) -> Node:
    """A data layer's node: its tops' shapes from the layer, ``--input-shape`` and the batch."""
    if layer.type == "Input":
        dims = [tuple(s.dim) for s in layer.input_param.shape]
        dims = dims + [dims[-1]] * (len(layer.top) - len(dims))
        top_shapes = [((batch,) + d[1:]) if batch else d for d in dims]
        prefetch = 0
    elif layer.type == "DummyData":
        dims = [tuple(s.dim) for s in layer.dummy_data_param.shape]
        top_shapes = [((batch,) + d[1:]) if batch else d for d in dims]
        prefetch = 0
    else:
        n = batch or layer.data_param.batch_size
        crop = layer.transform_param.crop_size
        if input_shape is None:
            where = f"{source}:{line}" if line else source
            raise ConfigError(f"{where}: Data layer {layer.name!r} reads images of unknown shape; "
                              "give --input-shape C,H,W")
        c, h, w = input_shape
        if crop:
            h = w = crop
        top_shapes = [(n, c, h, w), (n,)][: len(layer.top)]
        prefetch = layer.data_param.prefetch if layer.data_param.HasField("prefetch") else 4
    tops = []
    for name, shape in zip(layer.top, top_shapes):
        blob_id = f"{name}@{layer.name}"
        shapes[blob_id] = shape
        current[name] = blob_id
        tops.append(blob_id)
    return Node(layer.name, layer.type, [], tops, LayerInfo(top_shapes), line, is_data=True, prefetch=prefetch)


def _insert_splits(g: Graph) -> Graph:
    """A blob version read by several layers gets a Split with one top (own diff) per reader."""
    readers: dict[str, list[tuple[Node, int]]] = {}
    for node in g.nodes:
        for k, v in enumerate(node.bottom_versions):
            readers.setdefault(v, []).append((node, k))
    nodes = list(g.nodes)
    for v, users in readers.items():
        if len(users) < 2:
            continue
        producer = next(n for n in nodes if v in n.top_versions)
        blob = producer.tops[producer.top_versions.index(v)]
        tops = []
        for k, (node, slot) in enumerate(users):
            split_id = f"{blob}_split_{k}"
            g.shapes[split_id] = g.shapes[blob]
            g.split_tops.add(split_id)
            tops.append(split_id)
            if blob in node.tops:  # in place on what is now a split top
                node.tops = [split_id if t == blob else t for t in node.tops]
            node.bottoms[slot] = split_id
        split = Node(f"{blob.split('@')[0]}_split", "Split", [blob], tops,
                     LayerInfo([g.shapes[blob]] * len(tops)), is_split=True)
        nodes.insert(nodes.index(producer) + 1, split)
    g.nodes = nodes
    return g


def _mark_backward(g: Graph) -> None:
    needs: set[str] = set()
    for node in g.nodes:
        if node.is_data:
            continue
        learns = any(m != 0 for m in node.lr_mults[: len(node.info.params)])
        node.need_backward = learns or any(b in needs for b in node.bottoms)
        if node.need_backward:
            needs.update(node.tops)
    # layers whose tops reach no loss are not back-propagated (Net::Init's blobs_under_loss)
    under = set(g.loss_blobs)
    for node in reversed(g.nodes):
        if any(t in under for t in node.tops):
            under.update(node.bottoms)
        elif node.need_backward and node.type not in ("SoftmaxWithLoss",):
            node.need_backward = False


def param_count(g: Graph) -> int:
    return sum(count(p) for n in g.nodes for p in n.info.params)


def buffers(node: Node) -> list[Buffer]:
    return node.info.buffers
