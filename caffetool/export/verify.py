"""An export checked against Caffe: the same inputs through pycaffe and the model, layer by layer.

pycaffe runs the net one layer at a time (``Net._forward(i, i)``), so each layer's outputs are read
right after that layer — including the versions of a blob that an in-place layer overwrites next.
onnxruntime runs an ONNX model twice: once with every layer's output made a graph output (the layer
table), and once as exported (the outputs a user gets, and top-1 agreement on them); a PyTorch
model runs once, each layer's outputs caught by a hook on its attribute (:mod:`.torchnet`). What
the model gives a user (the exported graph's outputs; what a PyTorch module's ``forward`` returns) is
compared too, with the same tolerance: a model whose layers agree but whose outputs do not (a
``forward`` that returns something else than its last layer computed) fails.

A layer's error is relative to its blob's scale: ``max |caffe - model| / max(|caffe|, |model|)`` over
every image; a blob that is zero in both has error 0. A layer whose Caffe output is not finite
(NaN or infinity: non-finite weights, or an overflow) fails the verification however well the model
agrees, since such a model answers nothing useful. The verification fails at the first layer past
the tolerance or not finite.

A DetectionOutput layer (the SSD fork's) gives a list of rows, [image, label, confidence, xmin, ymin,
xmax, ymax], whose length depends on the values: its output is compared as detections. The rows of
the images verified (not those of a fixed batch's padding) must be as many as Caffe's, with the same
image and label in the same order; their confidences and boxes then count as the layer's error, as
any blob's. Caffe orders equal confidences by prior, which the model's rounding may swap: rows whose
confidences tie within the tolerance are matched in whichever of their orders fits best, and at an
image's ``keep_top_k`` cut the last tied rows are compared by confidence alone (Caffe kept one of
boxes of equal confidence, the model may keep another). A model that keeps one box more or less, or
another box (a confidence at the threshold, an overlap at the suppression's threshold, within float
rounding of Caffe's), differs there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from caffetool.backends import onnxrt
from caffetool.export.onnxnet import Compared, Converted


@dataclass
class LayerFigures:
    layer: str
    type: str
    blob: str
    max_abs: float = 0.0
    scale: float = 0.0
    non_finite: int = 0  # values of Caffe's output that are NaN or infinite
    mismatch: str = ""  # what differs beyond numbers (detections: their count, images or labels)

    @property
    def rel(self) -> float:
        return self.max_abs / self.scale if self.scale > 0 else (0.0 if self.max_abs == 0 else float("inf"))

    def add(self, caffe: np.ndarray, value: np.ndarray) -> None:
        if caffe.shape != value.shape and caffe.size == value.size:
            value = value.reshape(caffe.shape)  # Caffe keeps trailing 1-axes a model may not
        if caffe.shape != value.shape:
            self.max_abs = float("inf")
            return
        self.non_finite += int(caffe.size - np.count_nonzero(np.isfinite(caffe)))
        finite = np.isfinite(caffe) & np.isfinite(value)
        same_special = ~finite & ((caffe == value) | (np.isnan(caffe) & np.isnan(value)))
        if not np.all(finite | same_special):
            self.max_abs = float("inf")
            return
        if finite.any():
            a, b = caffe[finite].astype(np.float64), value[finite].astype(np.float64)
            self.max_abs = max(self.max_abs, float(np.abs(a - b).max()))
            self.scale = max(self.scale, float(np.abs(a).max()), float(np.abs(b).max()))

    def take(self, caffe: np.ndarray, value: np.ndarray, n: int) -> None:
        """One batch's outputs, of which the first ``n`` items are the images verified."""
        self.add(caffe[:n], value[:n])

    def record(self) -> dict:
        made = {"layer": self.layer, "type": self.type, "blob": self.blob, "max_abs_error": self.max_abs,
                "max_rel_error": self.rel, "scale": self.scale, "non_finite": self.non_finite}
        return {**made, "mismatch": self.mismatch} if self.mismatch else made

    @property
    def failed(self) -> bool:
        return self.non_finite > 0


@dataclass
class DetectionFigures(LayerFigures):
    """A DetectionOutput's rows compared as detections (see the module's docstring). ``tie``: the
    difference in confidence within which rows of one image and label may come in either order (the
    verification's tolerance, of Caffe's largest confidence); ``cut``: the layer's ``keep_top_k``.
    ``rows``: Caffe's detections compared (its rows of -1 for a batch without any are not)."""

    tolerance: float = 0.0
    cut: int | None = None
    rows: int = 0

    def take(self, caffe: np.ndarray, value: np.ndarray, n: int) -> None:
        mine, theirs = detection_rows(caffe, n), detection_rows(value, n)
        if theirs is None or len(mine) != len(theirs):
            found = "rows that are not 7 numbers each" if theirs is None else f"{len(theirs):,} rows"
            self._differs(f"{found} where Caffe gives {len(mine):,}")
            return
        same = np.all(mine[:, :2] == theirs[:, :2], axis=1)
        if not same.all():
            row = int(np.argmin(same))
            self._differs(f"row {row} is image {theirs[row, 0]:g}, label {theirs[row, 1]:g} where Caffe's is image "
                          f"{mine[row, 0]:g}, label {mine[row, 1]:g}")
            return
        self.rows += int(np.count_nonzero(mine[:, 1] != -1))
        tie = self.tolerance * float(np.abs(mine[:, 2]).max(initial=0.0))
        self.add(mine[:, 2:], _matched(mine, theirs, tie, self.cut)[:, 2:])

    def _differs(self, what: str) -> None:
        self.mismatch = self.mismatch or what
        self.max_abs = float("inf")


def _matched(mine: np.ndarray, theirs: np.ndarray, tie: float, cut: int | None) -> np.ndarray:
    """``theirs`` (rows of the same images and labels as Caffe's ``mine``, in the same order) with each
    run of rows whose confidences in Caffe tie within ``tie`` put in the order that matches Caffe's
    best (nearest first): Caffe orders equal confidences by prior, which a model's rounding may swap.
    Where an image's rows end at ``cut`` (``keep_top_k``), its last such run is compared by confidence
    alone: of boxes of equal confidence at the cut, Caffe kept one and the model may keep the other."""
    out = theirs.copy()
    starts = [0] + [k for k in range(1, len(mine))
                    if not np.array_equal(mine[k, :2], mine[k - 1, :2]) or mine[k - 1, 2] - mine[k, 2] > tie]
    starts.append(len(mine))
    for begin, end in zip(starts, starts[1:]):
        free = list(range(begin, end))
        for k in range(begin, end):
            best = min(free, key=lambda j: float(np.abs(mine[k, 2:] - theirs[j, 2:]).max()))
            free.remove(best)
            out[k] = theirs[best]
        image = mine[begin, 0]
        last_of_image = end == len(mine) or mine[end, 0] != image
        if cut is not None and last_of_image and int(np.count_nonzero(mine[:, 0] == image)) == cut:
            out[begin:end, 3:] = mine[begin:end, 3:]
    return out


def detection_rows(blob: np.ndarray, n: int) -> np.ndarray | None:
    """A DetectionOutput's rows (R x 7) of images 0..n-1, in their order; None if the blob is not rows."""
    if blob.size % 7:
        return None
    rows = blob.reshape(-1, 7)
    return rows[rows[:, 0] < n]


DETECTIONS = "DetectionOutput"  # the layer type whose output is compared as detections
RETURNED = "returned"  # the type of a model's output compared as a user gets it


def figures_of(c: Compared, blob: str, tolerance: float) -> LayerFigures:
    """The figures of one compared output: as detections for a DetectionOutput, else as a blob."""
    if c.type == DETECTIONS:
        return DetectionFigures(c.layer, c.type, blob, tolerance=tolerance, cut=c.cut)
    return LayerFigures(c.layer, c.type, blob)


@dataclass
class Verification:
    tolerance: float
    source: str
    layers: list[LayerFigures]
    images: int = 0
    top1_agree: int | None = None
    output_max_abs: float = 0.0
    outputs: list[str] = field(default_factory=list)
    returned: list[LayerFigures] = field(default_factory=list)  # the model's outputs as a user gets them

    def first_past(self) -> LayerFigures | None:
        return next((f for f in [*self.layers, *self.returned] if not f.rel <= self.tolerance or f.failed), None)

    @property
    def passed(self) -> bool:
        return self.first_past() is None

    def table(self) -> list[str]:
        width = max([len(f"{f.layer} ({f.type})") for f in [*self.layers, *self.returned]] + [5])
        lines = [f"{'layer'.ljust(width)}  {'max abs error':>13}  {'max rel error':>13}"]
        for f in [*self.layers, *self.returned]:
            mark = ("" if f is not self.first_past() else "  <- not finite" if f.failed else
                    f"  <- {f.mismatch}" if f.mismatch else "  <- past the tolerance")
            lines.append(f"{f'{f.layer} ({f.type})'.ljust(width)}  {f.max_abs:13.3e}  {f.rel:13.3e}{mark}")
        return lines

    @property
    def detections(self) -> int | None:
        """The detections compared, row by row, where the net gives detections."""
        found = [f.rows for f in self.layers if isinstance(f, DetectionFigures)]
        return sum(found) if found else None

    def summary(self) -> str:
        agree = (f"top-1 agrees on {self.top1_agree:,} of {self.images:,} images" if self.top1_agree is not None
                 else f"{self.images:,} inputs")
        if self.detections is not None:
            agree += f"; {self.detections:,} detections compared row by row"
        return f"{agree}; outputs within {self.output_max_abs:.3g} ({self.source})"

    def record(self) -> dict:
        past = self.first_past()
        return {"tolerance": self.tolerance, "passed": self.passed, "source": self.source, "images": self.images,
                "top1_agreement": self.top1_agree, "output_max_abs_error": self.output_max_abs,
                "outputs": self.outputs, "first_past_tolerance": past.layer if past else None,
                **({"detections": self.detections} if self.detections is not None else {}),
                "layers": [f.record() for f in self.layers], "returned": [f.record() for f in self.returned]}


Run = Callable[[dict[str, np.ndarray]], tuple[dict[str, np.ndarray], dict[str, np.ndarray]]]


def onnx_runner(model: onnx.ModelProto, converted: Converted) -> Run:
    """The ONNX model's side of :func:`verify`: once with every layer's output made a graph output,
    once as exported."""
    every = onnxrt.model_of(model, [name for c in converted.compared for _, name in c.outputs])
    plain = onnxrt.model_of(model, converted.outputs)
    return lambda fed: (every(fed), plain(fed))


def verify(net: Any, converted: Converted, batches: Iterable[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]],
           tolerance: float, batch: int | None, source: str, run: Run) -> Verification:
    """Run every batch — (pycaffe's feeds, the model's feeds), input name -> (n, ...) array — through
    pycaffe layer by layer and through the model (``run(feeds)`` gives (every compared output, the
    model's outputs), by name), and compare."""
    figures = [figures_of(c, blob, tolerance) for c in converted.compared for blob, _ in c.outputs]
    detections = {name: c for c in converted.compared if c.type == DETECTIONS for _, name in c.outputs}
    result = Verification(tolerance, source, figures, outputs=list(converted.outputs))
    blob_of = output_blobs(converted)
    final = converted.outputs[-1] if converted.outputs else None
    names = [name for c in converted.compared for _, name in c.outputs]
    result.returned = [_returned_figures(detections.get(name), blob_of[name], tolerance) for name in converted.outputs]
    result.top1_agree = 0
    for caffe_feeds, model_feeds in batches:
        n = len(next(iter(caffe_feeds.values())))
        fed = {k: _padded(v, batch) for k, v in model_feeds.items()}
        caffe_values = _caffe_layers(net, converted, {k: _padded(v, batch) for k, v in caffe_feeds.items()})
        layer_values, outputs = run(fed)
        for f, value, name in zip(figures, caffe_values, names):
            f.take(value, layer_values[name], n)
        for f, name in zip(result.returned, converted.outputs):
            f.take(net.blobs[blob_of[name]].data, outputs[name], n)
        result.output_max_abs = max([result.output_max_abs, *(f.max_abs for f in result.returned)])
        if final in detections:
            result.top1_agree = None
        elif final is not None and result.top1_agree is not None:
            mine = net.blobs[blob_of[final]].data[:n].reshape(n, -1)
            theirs = outputs[final][:n]
            if mine.shape[1] <= 1:
                result.top1_agree = None
            elif theirs.size == mine.size:
                result.top1_agree += int((mine.argmax(1) == theirs.reshape(n, -1).argmax(1)).sum())
        result.images += n
    return result


def _returned_figures(detections: Compared | None, blob: str, tolerance: float) -> LayerFigures:
    """The figures of one output of the model as a user gets it: as detections where a DetectionOutput
    layer writes it, else as a blob."""
    if detections is not None:
        return DetectionFigures(blob, RETURNED, blob, tolerance=tolerance, cut=detections.cut)
    return LayerFigures(blob, RETURNED, blob)


def output_blobs(converted: Converted) -> dict[str, str]:
    """The Caffe blob each model output is: its own name, but for a net input that an in-place layer
    rewrites, whose last version is ``BLOB/LAYER`` (the input keeps the name)."""
    written = {name: blob for c in converted.compared for blob, name in c.outputs}
    return {name: written.get(name, name) for name in converted.outputs}


def _padded(x: np.ndarray, batch: int | None) -> np.ndarray:
    """A fixed-batch model's input: the last, short batch filled up with copies of its first row."""
    if batch is None or len(x) == batch:
        return np.ascontiguousarray(x, np.float32)
    return np.ascontiguousarray(np.concatenate([x, np.repeat(x[:1], batch - len(x), 0)]), np.float32)


def _caffe_layers(net: Any, converted: Converted, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Each compared output's value right after its layer ran, in the order of ``converted.compared``."""
    for name, x in feeds.items():
        net.blobs[name].reshape(*x.shape)
    net.reshape()
    for name, x in feeds.items():
        net.blobs[name].data[...] = x
    values, done = [], -1
    for c in converted.compared:
        net._forward(done + 1, c.index)
        done = c.index
        values += [net.blobs[blob].data.copy() for blob, _ in c.outputs]
    if done + 1 < len(net.layers):
        net._forward(done + 1, len(net.layers) - 1)
    return values
