"""Normalize, Permute, PriorBox and DetectionOutput: the SSD fork's inference layers.

Wei Liu's SSD (weiliu89/caffe, branch ssd; Liu et al., "SSD: Single Shot MultiBox Detector", ECCV
2016) added them to Caffe; the engine has them from its patch 0011, with the fork's field numbers, so
the published prototxt and caffemodel files (OpenCV's res10 face detector, MobileNet-SSD, VGG-SSD)
read unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from caffetool.errors import NetError
from caffetool.layers.allocation import (BACKWARD, FORWARD, INT, PROPAGATE, SETUP, Buffer, LayerInfo, Shape,
                                         count)
from caffetool.layers.caffelayer import Layer
from caffetool.layers.entry import LayerType
from caffetool.layers.torchlayer import TorchLayer

if TYPE_CHECKING:
    from caffetool.layers.onnxgraph import OnnxGraph

SSD_FORK = "the SSD fork of Caffe (weiliu89/caffe, branch ssd)"


def _memory_priors_per_cell(layer: Any) -> int:
    """PriorBox's boxes per feature-map cell, as its ``LayerSetUp`` counts them: per ``min_size`` a
    square, another of side sqrt(min x max) when max sizes are given, and one per aspect ratio
    other than 1 (ratios within 1e-6 of one already listed are dropped; ``flip`` adds 1/r)."""
    p = layer.prior_box_param
    if not p.min_size:
        raise NetError(f"PriorBox layer {layer.name!r} needs a min_size")
    if p.max_size and len(p.max_size) != len(p.min_size):
        raise NetError(f"PriorBox layer {layer.name!r} needs one max_size per min_size, or none")
    ratios = [1.0]
    for ratio in p.aspect_ratio:
        if not any(abs(ratio - known) < 1e-6 for known in ratios):
            ratios.append(ratio)
            if p.flip:
                ratios.append(float(np.float32(1.0 / ratio)))  # the fork keeps them as floats
    others = sum(abs(ratio - 1.0) >= 1e-6 for ratio in ratios)
    return len(p.min_size) * (1 + bool(p.max_size) + others)


def _memory_detection_rows(layer: Any, num: int, priors: int) -> int:
    """The most rows DetectionOutput's forward can reshape its top to: per image and class but the
    background, at most ``nms_param.top_k`` boxes survive (every prior without it), at most
    ``keep_top_k`` per image across classes; with none at all, one row per image."""
    p = layer.detection_output_param
    top_k = p.nms_param.top_k if p.nms_param.HasField("top_k") else -1
    per_class = priors if top_k < 0 else min(top_k, priors)
    classes = p.num_classes - (0 <= p.background_label_id < p.num_classes)
    per_image = classes * per_class
    if p.keep_top_k > -1:
        per_image = min(per_image, p.keep_top_k)
    return max(num * per_image, num)


# --- the exports (ONNX and PyTorch) --------------------------------------------------------------

CENTER_SIZE, CORNER_SIZE = 2, 3  # PriorBoxParameter.CodeType (CORNER, 1, is the default)
FLT_MAX = float(np.finfo(np.float32).max)


def _priors(l: Layer) -> np.ndarray:
    """PriorBox's top, (1, 2, H x W x priors x 4), computed as its Forward_cpu does from the layer's
    parameters and its bottoms' shapes: it depends on nothing else, so both exports hold it as a
    constant. The fork's arithmetic is kept: sizes are whole pixels (``min_size`` and ``max_size`` read
    into ints), ratios, sizes and centres in float, each corner divided by the image size in double."""
    p = l.param.prior_box_param
    f32 = np.float32
    ratios = [f32(1)]
    for ratio in (f32(r) for r in p.aspect_ratio):
        if not any(abs(ratio - known) < 1e-6 for known in ratios):
            ratios.append(ratio)
            if p.flip:
                ratios.append(f32(1.0 / float(ratio)))
    sizes: list[tuple[np.float32, np.float32]] = []
    for s, given in enumerate(p.min_size):
        smallest = int(given)
        sizes.append((f32(smallest), f32(smallest)))
        if p.max_size:
            side = f32(np.sqrt(float(smallest * int(p.max_size[s]))))
            sizes.append((side, side))
        for ratio in ratios:
            if abs(float(ratio) - 1.0) >= 1e-6:
                root = np.sqrt(ratio)
                sizes.append((f32(smallest) * root, f32(smallest) / root))
    height, width = l.bottom_shapes[0][2:4]
    image_h, image_w = (p.img_h, p.img_w) if p.img_h or p.img_w else (p.img_size, p.img_size)
    if not (image_h and image_w):
        image_h, image_w = l.bottom_shapes[1][2:4]
    step_h, step_w = (p.step_h, p.step_w) if p.step_h or p.step_w else (p.step, p.step)
    if not (step_h > 0 and step_w > 0):
        step_h, step_w = f32(image_h) / f32(height), f32(image_w) / f32(width)
    offset = f32(p.offset)
    centre_x = ((np.arange(width, dtype=f32) + offset) * f32(step_w)).astype(np.float64)
    centre_y = ((np.arange(height, dtype=f32) + offset) * f32(step_h)).astype(np.float64)
    half_w = np.array([w for w, _ in sizes], f32).astype(np.float64) / 2.0
    half_h = np.array([h for _, h in sizes], f32).astype(np.float64) / 2.0
    cx, cy = centre_x[None, :, None], centre_y[:, None, None]
    boxes = np.stack(np.broadcast_arrays((cx - half_w) / float(image_w), (cy - half_h) / float(image_h),
                                         (cx + half_w) / float(image_w), (cy + half_h) / float(image_h)), -1)
    boxes = boxes.astype(f32)
    if p.clip:
        boxes = np.clip(boxes, f32(0), f32(1))
    variance = [f32(v) for v in p.variance] or [f32(0.1)]
    variances = np.broadcast_to(np.array(variance * (4 // len(variance)), f32), boxes.shape)
    return np.stack([boxes.reshape(-1), variances.reshape(-1)])[None]


def _permutation(l: Layer) -> list[int]:
    """Permute's full order: the axes ``order`` names, then the others in their order (permute_layer.cpp)."""
    order = [int(axis) for axis in l.param.permute_param.order]
    return order + [axis for axis in range(len(l.bottom_shapes[0])) if axis not in order]


def _scale(l: Layer) -> np.ndarray:
    """Normalize's scale shaped to broadcast over an item: one value, or one per channel (C, 1, ...)."""
    rank = len(l.bottom_shapes[0])
    scale = l.blobs[0].astype(np.float32)
    return scale.reshape(()) if l.param.norm_param.channel_shared else scale.reshape(-1, *[1] * (rank - 2))


def _onnx_half(g: OnnxGraph, x: str, which: int, hint: str) -> str:
    """The first (0) or second (1) pair of a box's four numbers along the last axis."""
    return g.op1("Slice", [x, g.ints(f"{hint}/start", [2 * which]), g.ints(f"{hint}/end", [2 * which + 2]),
                           g.ints(f"{hint}/axis", [-1])], hint)


def _onnx_decoded(g: OnnxGraph, l: Layer, priors_count: int, loc_classes: int) -> str:
    """The location predictions decoded against the priors (bbox_util.hpp ``DecodeBBox``), as
    (N, priors, loc classes, 4): the same operations in the same order as the C++, pair by pair
    ((xmin, ymin), (xmax, ymax))."""
    p = l.param.detection_output_param
    name = l.name
    loc = g.op1("Reshape", [l.bottoms[0], g.ints(f"{name}/loc_shape", [-1, priors_count, loc_classes, 4])], name)
    priors = g.op1("Reshape", [l.bottoms[2], g.ints(f"{name}/prior_shape", [2, priors_count, 1, 4])], name)
    box = g.op1("Gather", [priors, g.const(f"{name}/boxes", 0, np.int64)], name, axis=0)
    low, high = _onnx_half(g, box, 0, name), _onnx_half(g, box, 1, name)
    loc_low, loc_high = _onnx_half(g, loc, 0, name), _onnx_half(g, loc, 1, name)
    if not p.variance_encoded_in_target:
        variance = g.op1("Gather", [priors, g.const(f"{name}/variances", 1, np.int64)], name, axis=0)
        loc_low = g.op1("Mul", [_onnx_half(g, variance, 0, name), loc_low], name)
        loc_high = g.op1("Mul", [_onnx_half(g, variance, 1, name), loc_high], name)
    if p.code_type == CENTER_SIZE:
        size = g.op1("Sub", [high, low], name)
        two = g.const(f"{name}/two", 2.0)
        centre = g.op1("Div", [g.op1("Add", [low, high], name), two], name)
        centre = g.op1("Add", [g.op1("Mul", [loc_low, size], name), centre], name)
        half = g.op1("Div", [g.op1("Mul", [g.op1("Exp", [loc_high], name), size], name), two], name)
        low, high = g.op1("Sub", [centre, half], name), g.op1("Add", [centre, half], name)
    elif p.code_type == CORNER_SIZE:
        size = g.op1("Sub", [high, low], name)
        low = g.op1("Add", [low, g.op1("Mul", [loc_low, size], name)], name)
        high = g.op1("Add", [high, g.op1("Mul", [loc_high, size], name)], name)
    else:
        low, high = g.op1("Add", [low, loc_low], name), g.op1("Add", [high, loc_high], name)
    return g.op1("Concat", [low, high], name, axis=-1)


def _limits(l: Layer, priors_count: int) -> tuple[int, float, int | None]:
    """(candidates per class, confidence threshold, keep_top_k or None for all) as
    detection_output_layer.cpp reads them: ``top_k`` and ``keep_top_k`` of -1 or below keep all, no
    ``confidence_threshold`` is -FLT_MAX."""
    p = l.param.detection_output_param
    top_k = p.nms_param.top_k if p.nms_param.HasField("top_k") else -1
    threshold = float(p.confidence_threshold) if p.HasField("confidence_threshold") else -FLT_MAX
    return (priors_count if top_k <= -1 else min(top_k, priors_count), threshold,
            None if p.keep_top_k <= -1 else int(p.keep_top_k))


def _onnx_candidates(g: OnnxGraph, l: Layer, decoded: str, classes: list[int], priors_count: int,
                     k: int) -> tuple[str, str]:
    """Each image's and class's ``k`` best scores, best first (TopK: equal scores in index order, as
    the C++'s stable sort), (N, classes, k), and their decoded boxes, (N, classes, k, 4)."""
    p = l.param.detection_output_param
    name = l.name
    total = p.num_classes
    conf = g.op1("Reshape", [l.bottoms[1], g.ints(f"{name}/conf_shape", [-1, priors_count, total])], name)
    conf = g.op1("Transpose", [conf], name, perm=[0, 2, 1])
    chosen = g.ints(f"{name}/classes", classes)
    if classes != list(range(total)):
        conf = g.op1("Gather", [conf, chosen], name, axis=1)
    if p.share_location:
        boxes = g.op1("Transpose", [decoded], name, perm=[0, 2, 1, 3])
        if len(classes) > 1:
            boxes = g.op1("Expand", [boxes, g.ints(f"{name}/per_class", [1, len(classes), 1, 1])], name)
    else:
        boxes = g.op1("Gather", [g.op1("Transpose", [decoded], name, perm=[0, 2, 1, 3]), chosen], name, axis=1)
    scores, index = g.op("TopK", [conf, g.ints(f"{name}/top_k", [k])], name, 2, axis=2, largest=1, sorted=1)
    index = g.op1("Expand", [g.op1("Unsqueeze", [index, g.ints(f"{name}/last", [-1])], name),
                             g.ints(f"{name}/coords", [1, 1, 1, 4])], name)
    return scores, g.op1("GatherElements", [boxes, index], name, axis=2)


def _onnx_kept(g: OnnxGraph, l: Layer, scores: str, boxes: str, k: int, threshold: float) -> str:
    """1 where a candidate survives: above the threshold and kept by ONNX's NonMaxSuppression, run per
    image and class (each its own batch of NonMaxSuppression) on the candidates alone; (N x classes, k).

    NonMaxSuppression suppresses a box whose IoU with a kept one exceeds the threshold, as
    bbox_util.cpp ``ApplyNMS`` keeps one whose overlap is at most it, the IoU computed alike (no
    +1 pixel terms). It is given each candidate's rank (k for the best, down to 1) as its score, 0 for
    one at or below the confidence threshold with a score threshold of 0: the order is the candidates'
    own, whatever a runtime does with equal scores, and no runtime needs a negative score threshold
    (OpenCV's refuses one). Boxes go in as :func:`_onnx_apart` makes them."""
    p = l.param.detection_output_param
    name = l.name
    suppressed = g.op1("Reshape", [_onnx_apart(g, l, boxes, k), g.ints(f"{name}/nms_boxes", [-1, k, 4])], name)
    flat = g.op1("Reshape", [scores, g.ints(f"{name}/nms_scores", [-1, k])], name)
    above = g.op1("Greater", [flat, g.const(f"{name}/threshold", threshold)], name)
    ranks = g.op1("Where", [above, g.const(f"{name}/ranks", np.arange(k, 0, -1)), g.const(f"{name}/below", 0.0)], name)
    selected = g.op1("NonMaxSuppression", [suppressed, g.op1("Unsqueeze", [ranks, g.ints(f"{name}/one", [1])], name),
                                           g.ints(f"{name}/max_out", [k]),
                                           g.const(f"{name}/iou", [p.nms_param.nms_threshold]),
                                           g.const(f"{name}/score", [0.0])], name)
    where = g.op1("Gather", [selected, g.ints(f"{name}/batch_and_box", [0, 2])], name, axis=1)
    ones = g.op1("ConstantOfShape", [g.op1("Slice", [g.op1("Shape", [where], name), g.ints(f"{name}/s0", [0]),
                                                     g.ints(f"{name}/s1", [1])], name)],
                 name, value=g.value(np.ones(1, np.float32)))
    zeros = g.op1("ConstantOfShape", [g.op1("Shape", [flat], name)], name, value=g.value(np.zeros(1, np.float32)))
    kept = g.op1("ScatterND", [zeros, where, ones], name)
    return g.op1("Mul", [kept, g.op1("Cast", [above], name, to=g.FLOAT)], name)


def _onnx_apart(g: OnnxGraph, l: Layer, boxes: str, k: int) -> str:
    """The candidates (N, classes, k, 4) as NonMaxSuppression is to see them. A box without area (its
    corners the wrong way round, or equal, on an axis) overlaps nothing in Caffe's ``JaccardOverlap``;
    NonMaxSuppression would swap wrong corners, and OpenCV's finds two boxes without area identical.
    Each such candidate becomes a unit square of its own past every box's coordinates (candidate j at
    M + 2 + 2j, M the largest |coordinate|), which overlaps nothing either."""
    name = l.name
    low, high = _onnx_half(g, boxes, 0, name), _onnx_half(g, boxes, 1, name)
    flat = g.op1("Cast", [g.op1("LessOrEqual", [high, low], name)], name, to=g.FLOAT)
    empty = g.op1("Cast", [g.reduce("ReduceMax", flat, [-1], name, True)], name, to=g.BOOL)
    largest = g.reduce("ReduceMax", g.op1("Abs", [boxes], name), [0, 1, 2, 3], name, True)
    away = g.op1("Add", [largest, g.const(f"{name}/away", (2.0 + 2.0 * np.arange(k)).reshape(k, 1))], name)
    corner = g.op1("Add", [away, g.const(f"{name}/unit", 1.0)], name)
    return g.op1("Concat", [g.op1("Where", [empty, away, low], name), g.op1("Where", [empty, corner, high], name)],
                 name, axis=-1)


def _onnx_best(g: OnnxGraph, l: Layer, kept: str, scores: str, keep_top_k: int) -> str:
    """``kept`` (N, per_image) narrowed to each image's ``keep_top_k`` best scores; of equal scores the
    earlier in (class, rank) order, as the C++'s stable sort over its label-ordered list."""
    name = l.name
    if keep_top_k == 0:
        return g.op1("Mul", [kept, g.const(f"{name}/none", 0.0)], name)
    shown = g.op1("Where", [g.op1("Cast", [kept], name, to=g.BOOL), scores,
                            g.const(f"{name}/minus_inf", -np.inf)], name)
    _, best = g.op("TopK", [shown, g.ints(f"{name}/keep_top_k", [keep_top_k])], name, 2, axis=1, largest=1,
                   sorted=1)
    zeros = g.op1("ConstantOfShape", [g.op1("Shape", [kept], name)], name, value=g.value(np.zeros(1, np.float32)))
    ones = g.op1("ConstantOfShape", [g.op1("Shape", [best], name)], name, value=g.value(np.ones(1, np.float32)))
    return g.op1("Mul", [kept, g.op1("ScatterElements", [zeros, best, ones], name, axis=1)], name)


def _onnx_rows(g: OnnxGraph, l: Layer, found: tuple[str, str, str, list[int], int] | None) -> None:
    """The top, (1, 1, D, 7): the kept candidates in (image, class, rank) order — NonZero's order over
    (N, classes x k) — as [image, label, confidence, xmin, ymin, xmax, ymax]; with none kept in the
    whole batch, one row [image, -1, ...] per image, as the C++ writes it. ``found``: (kept, scores,
    boxes, classes, k), None where no class can keep anything."""
    name = l.name
    shape = g.op1("Shape", [l.bottoms[0]], name)
    images = g.op1("Slice", [shape, g.ints(f"{name}/b0", [0]), g.ints(f"{name}/b1", [1])], name)
    last = g.op1("Squeeze", [images, g.ints(f"{name}/b", [0])], name)
    ids = g.op1("Range", [g.const(f"{name}/from", 0, np.int64), last, g.const(f"{name}/step", 1, np.int64)], name)
    column = g.ints(f"{name}/column", [1])
    none = g.op1("Concat", [g.op1("Unsqueeze", [g.op1("Cast", [ids], name, to=g.FLOAT), column], name),
                            g.op1("ConstantOfShape",
                                  [g.op1("Concat", [images, g.ints(f"{name}/six", [6])], name, axis=0)],
                                  name, value=g.value(np.full(1, -1, np.float32)))], name, axis=1)
    if found is None:
        g.op1("Reshape", [none, g.ints(f"{name}/top_shape", [1, 1, -1, 7])], name, l.tops[0])
        return
    kept, scores, boxes, classes, k = found
    index = g.op1("Reshape", [g.op1("NonZero", [g.op1("Reshape", [kept, g.ints(f"{name}/all", [-1])], name)], name),
                              g.ints(f"{name}/flat", [-1])], name)
    image = g.op1("Div", [index, g.const(f"{name}/per_image", len(classes) * k, np.int64)], name)
    rank = g.op1("Sub", [g.op1("Div", [index, g.const(f"{name}/k", k, np.int64)], name),
                         g.op1("Mul", [image, g.const(f"{name}/classes_count", len(classes), np.int64)], name)], name)
    label = g.op1("Gather", [g.const(f"{name}/labels", classes), rank], name, axis=0)
    confidence = g.op1("Gather", [g.op1("Reshape", [scores, g.ints(f"{name}/all_scores", [-1])], name), index], name,
                       axis=0)
    box = g.op1("Gather", [g.op1("Reshape", [boxes, g.ints(f"{name}/all_boxes", [-1, 4])], name), index], name, axis=0)
    columns = [g.op1("Unsqueeze", [x, column], name)
               for x in (g.op1("Cast", [image], name, to=g.FLOAT), label, confidence)]
    rows = g.op1("Concat", [*columns, box], name, axis=1)
    count_ = g.op1("Shape", [index], name)
    empty = g.op1("Cast", [g.op1("Equal", [count_, g.ints(f"{name}/zero", [0])], name)], name, to=g.INT64)
    take = g.op1("Add", [count_, g.op1("Mul", [empty, images], name)], name)
    chosen = g.op1("Slice", [g.op1("Concat", [rows, none], name, axis=0), g.ints(f"{name}/first", [0]), take,
                             g.ints(f"{name}/rows", [0])], name)
    g.op1("Reshape", [chosen, g.ints(f"{name}/top_shape", [1, 1, -1, 7])], name, l.tops[0])


def _onnx_detections(g: OnnxGraph, l: Layer) -> None:
    """DetectionOutput as operators: decode, pick each class's candidates, suppress, keep the best of
    each image, write the rows (detection_output_layer.cpp ``Forward_cpu``)."""
    p = l.param.detection_output_param
    if p.nms_param.eta < 1:
        raise l.refuse(f"nms_param.eta is {p.nms_param.eta:g}: adaptive suppression lowers the threshold after each "
                       "kept box, which ONNX's NonMaxSuppression (one threshold) cannot express; the PyTorch export "
                       "(--to pytorch) covers it")
    priors_count = int(np.prod(l.bottom_shapes[2][2:])) // 4
    classes = [c for c in range(p.num_classes) if c != p.background_label_id]
    k, threshold, keep_top_k = _limits(l, priors_count)
    if not classes or k == 0:
        _onnx_rows(g, l, None)
        return
    decoded = _onnx_decoded(g, l, priors_count, 1 if p.share_location else p.num_classes)
    scores, boxes = _onnx_candidates(g, l, decoded, classes, priors_count, k)
    kept = _onnx_kept(g, l, scores, boxes, k, threshold)
    per_image = len(classes) * k
    if keep_top_k is not None and keep_top_k < per_image:
        shape = g.ints(f"{l.name}/per_image_shape", [-1, per_image])
        kept = _onnx_best(g, l, g.op1("Reshape", [kept, shape], l.name),
                          g.op1("Reshape", [scores, shape], l.name), keep_top_k)
    _onnx_rows(g, l, (kept, scores, boxes, classes, k))


class Normalize(LayerType):
    """L2 normalisation across channels (or the whole item), then a learned scale (normalize_layer.cpp)."""

    fork = SSD_FORK

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """normalize_layer.cpp of the engine (patch 0011). The scale is one value per channel, or a blob
        of no axes when ``channel_shared``. Reshape sizes ``norm_`` and ``dot_`` (one per item, or per
        item and position unless ``across_spatial``) and ``channel_buffer_`` (C) without touching them,
        and fills ``channel_ones_`` (C). Forward writes the norms; backward writes ``dot_`` only when a
        gradient goes to the input, and only the GPU backward sums the scale's gradient per channel
        into ``channel_buffer_``. In-place use is refused by the engine."""
        p = layer.norm_param
        shape = bottoms[0]
        if len(shape) < 2:
            raise NetError(f"Normalize layer {layer.name!r} needs at least two axes (items and channels), "
                           f"its input has {len(shape)}")
        channels = shape[1]
        norms = shape[0] if p.across_spatial else shape[0] * count(shape[2:])
        buffers = [Buffer("norm", norms, FORWARD), Buffer("dot", norms, PROPAGATE),
                   Buffer("channel_buffer", channels, f"gpu-{BACKWARD}", param=0),
                   Buffer("channel_ones", channels, SETUP)]
        scale: Shape = () if p.channel_shared else (channels,)
        return LayerInfo([shape], [scale], 2 * count(shape), buffers)

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
        p = l.param.norm_param
        rank = len(l.bottom_shapes[0])
        squares = g.reduce("ReduceSumSquare", l.bottoms[0], list(range(1, rank)) if p.across_spatial else [1], l.name,
                           True)
        norm = g.op1("Sqrt", [g.op1("Add", [squares, g.const(f"{l.name}/eps", p.eps)], l.name)], l.name)
        g.op1("Mul", [g.op1("Div", [l.bottoms[0], norm], l.name), g.const(f"{l.name}/scale", _scale(l))],
              l.name, l.tops[0])

    @staticmethod
    def pytorch(l: Layer) -> TorchLayer:
        p = l.param.norm_param
        scale = _scale(l)
        return TorchLayer(f"Normalize({tuple(scale.shape)}, {bool(p.across_spatial)}, {float(p.eps)!r})",
                          {"weight": scale}, helpers=("Normalize",))


class Permute(LayerType):
    """The axes of a blob in another order (permute_layer.cpp)."""

    fork = SSD_FORK

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """permute_layer.cpp of the engine (patch 0011): the axes ``order`` names, then the others in
        their order. ``order_``, ``bottom_steps_`` and ``top_steps_`` (an int per axis) are written or
        read at set-up. The identity order shares the bottom's data and gradient, as Flatten does;
        any other copies into a top of its own and, backward, into the bottom's gradient."""
        shape = bottoms[0]
        order: list[int] = []
        for axis in layer.permute_param.order:
            if axis >= len(shape) or axis in order:
                raise NetError(f"Permute layer {layer.name!r}: permute_param.order {list(layer.permute_param.order)} "
                               f"is not an order of the {len(shape)} axes of its input")
            order.append(axis)
        order += [axis for axis in range(len(shape)) if axis not in order]
        buffers = [Buffer(name, len(shape), SETUP, INT) for name in ("order", "bottom_steps", "top_steps")]
        identity = order == list(range(len(shape)))
        return LayerInfo([tuple(shape[axis] for axis in order)], buffers=buffers, alias={0: 0} if identity else {})

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
        g.op1("Transpose", [l.bottoms[0]], l.name, l.tops[0], perm=_permutation(l))

    @staticmethod
    def pytorch(l: Layer) -> TorchLayer:
        return TorchLayer(f"Permute({tuple(_permutation(l))})", helpers=("Permute",))


class PriorBox(LayerType):
    """The default boxes of one feature map, with their variances (prior_box_layer.cpp)."""

    fork = SSD_FORK

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """prior_box_layer.cpp of the engine (patch 0011): one set of priors for the whole batch,
        1 x 2 x (H x W x priors per cell x 4), boxes then variances, from the feature map's height and
        width (Caffe's legacy axes 2 and 3). ``box_sizes_`` (two floats per prior of a cell, a
        ``Blob<float>`` whatever the net's type) and ``variance_`` (4) are filled at set-up."""
        shape = bottoms[0]
        height = shape[2] if len(shape) > 2 else 1
        width = shape[3] if len(shape) > 3 else 1
        priors = _memory_priors_per_cell(layer)
        buffers = [Buffer("box_sizes", 2 * priors, SETUP, INT), Buffer("variance", 4, SETUP)]
        return LayerInfo([(1, 2, height * width * priors * 4)], buffers=buffers)

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
        """A constant: the priors depend only on the layer's parameters and its bottoms' shapes."""
        g.op1("Constant", [], l.name, l.tops[0], value=g.value(_priors(l)))

    @staticmethod
    def pytorch(l: Layer) -> TorchLayer:
        """A buffer: the priors depend only on the layer's parameters and its bottoms' shapes."""
        priors = _priors(l)
        return TorchLayer(f"PriorBox({tuple(priors.shape)})", {"priors": priors}, helpers=("PriorBox",))


class DetectionOutput(LayerType):
    """Boxes decoded from the priors, kept per class by non-maximum suppression (detection_output_layer.cpp)."""

    fork = SSD_FORK

    @staticmethod
    def memory(layer: Any, bottoms: list[Shape], phase: str) -> LayerInfo:
        """detection_output_layer.cpp of the engine (patch 0011). Reshape gives the top 1 x 1 x 1 x 7
        and ``bbox_preds_`` the location predictions' shape, touching neither; forward decodes into
        ``bbox_preds_`` and reshapes the top to 1 x 1 x D x 7 for the D detections kept, which only
        the input decides. The top is given its largest such shape (:func:`_memory_detection_rows`),
        so the estimate holds for any input; it exceeds what the detections found take by 28 bytes a
        row at most (res10: 200 rows, 5.6 KB an image). No gradient: the engine's backward refuses to
        propagate."""
        p = layer.detection_output_param
        if not p.HasField("num_classes"):
            raise NetError(f"DetectionOutput layer {layer.name!r} needs num_classes")
        loc = bottoms[0]
        priors = count(bottoms[2][2:]) // 4
        rows = _memory_detection_rows(layer, loc[0], priors)
        return LayerInfo([(1, 1, rows, 7)], macc=count(loc), buffers=[Buffer("bbox_preds", count(loc), FORWARD)],
                         bottom_diff="none")

    @staticmethod
    def onnx(g: OnnxGraph, l: Layer) -> None:
        _onnx_detections(g, l)

    @staticmethod
    def pytorch(l: Layer) -> TorchLayer:
        p = l.param.detection_output_param
        k, threshold, keep_top_k = _limits(l, int(np.prod(l.bottom_shapes[2][2:])) // 4)
        code = {CENTER_SIZE: "CENTER_SIZE", CORNER_SIZE: "CORNER_SIZE"}.get(p.code_type, "CORNER")
        eta = float(p.nms_param.eta)
        return TorchLayer(f"DetectionOutput({p.num_classes}, {bool(p.share_location)}, {p.background_label_id}, "
                          f"{code!r}, {bool(p.variance_encoded_in_target)}, {threshold!r}, "
                          f"{float(p.nms_param.nms_threshold)!r}, {k}, {-1 if keep_top_k is None else keep_top_k}"
                          + (f", eta={eta!r})" if eta < 1 else ")"), helpers=("DetectionOutput",))
