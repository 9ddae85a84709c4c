"""A ``caffetool export`` model served on its own, without Caffe's files: what a model repository's
``NAME/N/model.onnx`` is.

Everything the demo needs travels in the model (:mod:`caffetool.export.preprocessing`): how images are
fed to it and its class names (else ``labels.txt`` beside it, else classes go by index). A model made
``--with-preprocessing`` takes raw images, not what the demo prepares: it is refused, by name. A model
exported with a fixed ``--batch N`` is run N images a pass, a short pass filled up as the export's
verification fills it. It runs on the ``onnxruntime`` backend (:mod:`caffetool.backends.onnxrt`).

An export of a detection net (SSD) is served as a :class:`~caffetool.serving.detector.Detector`: its
preprocessing says so (``"resize": "stretch"``, which only a detection net's export writes), and it
is fed exactly as the demo feeds the deploy net on Caffe (:class:`caffetool.inference.preprocess.Stretch`),
so it finds the same boxes. Its answer is its last output (a deploy net ends with its
``DetectionOutput``), rows of seven; its labels name label ids, the background's line included.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from caffetool.errors import ExportError, NetError
from caffetool.inference import preprocess
from caffetool.inference.modelfiles import ModelFiles
from caffetool.runs import labelfile
from caffetool.serving.classifier import Classifier
from caffetool.serving.detector import COLUMNS, Detector, per_image


def load(path: Path, name: str) -> Classifier | Detector:
    """The exported model at ``path`` ready to classify (or detect), called ``name``; proven by one
    forward pass."""
    from caffetool.backends import onnxrt  # noqa: PLC0415 - onnx only for these models
    from caffetool.export import preprocessing  # noqa: PLC0415

    started = time.perf_counter()
    model = onnxrt.read_model(path)
    props = {p.key: p.value for p in model.metadata_props}
    if props.get(preprocessing.IN_GRAPH, "false") not in ("true", "false"):
        raise ExportError(f"{path}: its {preprocessing.IN_GRAPH!r} metadata is {props[preprocessing.IN_GRAPH]!r}, "
                          "where caffetool writes \"true\" or \"false\"; export the model again")
    if props.get(preprocessing.IN_GRAPH) == "true":
        raise ExportError(f"{path} was exported --with-preprocessing: it takes raw images, and the demo feeds "
                          "prepared ones; export it again without --with-preprocessing to serve it")
    initialized = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initialized]
    dims = [d.dim_value for d in inputs[0].type.tensor_type.shape.dim] if len(inputs) == 1 else []
    if len(dims) != 4 or not all(dims[1:]):
        raise ExportError(f"{path} does not take one image input (N, C, H, W) with fixed C, H and W")
    p = preprocessing.Preprocessing.from_metadata(props, (dims[1], dims[2], dims[3]), str(path))
    labels = _labels(props, path)
    if p.stretch:
        return _detector(model, path, name, p, labels, inputs[0].name, dims, started)
    data, output = inputs[0].name, model.graph.output[0].name
    exported = onnxrt.model_of(model, [output])

    fixed = dims[0] or None  # an export made with --batch N takes exactly N images a pass

    def forward(blob: np.ndarray) -> np.ndarray:
        if fixed is None:
            return exported({data: blob})[output].reshape(len(blob), -1)
        return np.concatenate([run_padded(blob[start:start + fixed]) for start in range(0, len(blob), fixed)])

    def run_padded(part: np.ndarray) -> np.ndarray:
        """A pass of ``fixed`` images: a short one filled up with copies of its first image, as the
        export's verification fills it; only the given images' rows are kept."""
        n = len(part)
        full = np.concatenate([part, np.repeat(part[:1], fixed - n, 0)]) if n < fixed else part
        return exported({data: full})[output][:n].reshape(n, -1)

    probs = forward(np.zeros((1, *dims[1:]), np.float32))[0]
    labels = labels or [str(i) for i in range(probs.size)]
    if probs.size != len(labels):
        raise NetError(f"{path}: its labels name {len(labels)} classes, the model outputs {probs.size}")
    colour = preprocess.Colour(p.image_dims, p.channel_swap, p.raw_scale) if p.channels == 3 else None
    transform = preprocess.Transform(p.channels, p.height, p.width, p.input_scale, p.mean, p.white_on_black, colour)
    return Classifier(name, "onnxruntime", transform, labels, ModelFiles(path, path, _labels_file(path)),
                      _forward=forward, blobs=(data, output), load_seconds=round(time.perf_counter() - started, 3))


def _detector(model: Any, path: Path, name: str, p: Any, labels: list[str] | None, data: str, dims: list[int],
              started: float) -> Detector:
    """The export of a detection net as a :class:`Detector`: its last output's rows per image, the
    images fed stretched as :mod:`caffetool.inference.preprocess` feeds them to Caffe."""
    from caffetool.backends import onnxrt  # noqa: PLC0415

    answer = model.graph.output[-1]
    columns = [d.dim_value for d in answer.type.tensor_type.shape.dim][-1:]
    if columns != [len(COLUMNS)]:
        raise ExportError(f"{path}: its preprocessing is a detection net's, but its output {answer.name!r} is not "
                          f"rows of {len(COLUMNS)} ({', '.join(COLUMNS)}); export the model again")
    exported = onnxrt.model_of(model, [answer.name])
    fixed = dims[0] or None

    def forward(blob: np.ndarray) -> np.ndarray:
        step = fixed or len(blob)
        return np.concatenate([rows(blob[start:start + step]) for start in range(0, len(blob), step)])

    def rows(part: np.ndarray) -> np.ndarray:
        """One pass: a short one of a fixed batch filled with copies of its first image, whose rows
        (image ids past the given images') are dropped."""
        n = len(part)
        full = np.concatenate([part, np.repeat(part[:1], fixed - n, 0)]) if fixed and n < fixed else part
        return per_image(exported({data: full})[answer.name], n)

    forward(np.zeros((1, *dims[1:]), np.float32))
    swap = (p.channel_swap or tuple(range(p.channels))) if p.channels == 3 else None  # None: the steps' RGB
    transform = preprocess.Transform(p.channels, p.height, p.width, p.input_scale, p.mean, p.white_on_black,
                                     stretch=preprocess.Stretch(swap))
    return Detector(name, "onnxruntime", transform, labels, ModelFiles(path, path, _labels_file(path)),
                    _forward=forward, blobs=(data, answer.name), load_seconds=round(time.perf_counter() - started, 3))


def _labels(props: dict[str, str], path: Path) -> list[str] | None:
    from caffetool.export import preprocessing  # noqa: PLC0415

    if preprocessing.LABELS in props:
        try:
            labels = json.loads(props[preprocessing.LABELS])
        except ValueError as e:
            raise ExportError(f"{path}: its {preprocessing.LABELS!r} metadata cannot be read ({e})") from None
        if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
            raise ExportError(f"{path}: its {preprocessing.LABELS!r} metadata is not a JSON list of class names "
                              f"(it is {type(labels).__name__}); export the model again")
        return labels
    beside = _labels_file(path)
    return labelfile.read(beside) if beside else None


def _labels_file(path: Path) -> Path | None:
    beside = path.parent / labelfile.FILE
    return beside if beside.is_file() else None
