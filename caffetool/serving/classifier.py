"""A trained model loaded once for the demo: deploy net, weights, labels and the transform.

The files and the transform come from :mod:`.modelfiles` (a run's, or given one by one). The model is
first built in a child process
(Caffe aborts the process on a corrupt file), so a bad model fails start-up with a clear message,
not the first request.
The model runs on one of :mod:`caffetool.backends` (loaded through :mod:`caffetool.export.served`:
Caffe's files for pycaffe, exact, and OpenCV 4; the run's export, made and verified against Caffe
when missing, for the others); forward passes run one at a time behind a lock, since the Caffe and
OpenCV net objects are not thread-safe. Only a backend whose model keeps every layer's blobs
(pycaffe's) shows a layer's activations.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from caffetool.backends import dispatch
from caffetool.backends.devices import CPU, PycaffeDevice
from caffetool.engine import EngineInfo, import_caffe
from caffetool.errors import ConfigError, NetError, RunError
from caffetool.inference import modelfiles, preprocess
from caffetool.inference.modelfiles import ModelFiles, input_shape, transform_of
from caffetool.nets import check, prototxt
from caffetool.runs import labelfile
from caffetool.runs.folder import RunFolder
from caffetool.export import served
from caffetool.serving import grids


class UnknownLayer(ConfigError):
    """A layer asked for by name that the net does not have, or whose output is not 4-D."""


class NoVisualizations(ConfigError):
    """Visualizations asked of a model that cannot show them (OpenCV backend, no 4-D layer)."""


class NotAClassifier(ConfigError):
    """A detection model given where a classifier is needed."""


@dataclass
class Classifier:
    name: str
    backend: str
    transform: preprocess.Transform
    labels: list[str]
    files: ModelFiles
    max_pixels: int = preprocess.MAX_PIXELS
    max_decoded_bytes: int = preprocess.MAX_DECODED_BYTES
    _forward: object = None
    _net: Any = None  # the caffe.Net (a backend with activations only): activations and filters
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _filters_png: bytes | None = None
    blobs: tuple[str, str] = ("data", "prob")  # the deploy net's input and output blob names
    load_seconds: float | None = None  # loading and checking the model took
    kind: ClassVar[str] = "classification"  # what the server answers for it (a detector's is "detection")

    def describe(self) -> dict:
        t = self.transform
        described = {"name": self.name, "kind": self.kind, "backend": self.backend,
                     "input_shape": [1, t.channels, t.height, t.width],
                     "classes": self.labels, "run": str(self.files.run) if self.files.run else None,
                     "weights": str(self.files.weights), "scale": t.scale, "white_on_black": t.white_on_black,
                     "colour": None}
        if t.colour is not None:
            c = t.colour
            described["colour"] = {
                "image_dims": list(c.image_dims or (t.height, t.width)), "oversample": c.oversample,
                "channel_swap": list(c.channel_swap) if c.channel_swap else None, "raw_scale": c.raw_scale,
                "mean": None if t.mean is None else [float(v) for v in t.mean] if t.mean.ndim == 1 else "image"}
        return described

    def rows(self, blob: np.ndarray) -> np.ndarray:
        """The class probabilities of each row of a (N, C, H, W) blob (an inference request's images)."""
        with self._lock:
            return self._forward(np.ascontiguousarray(blob, np.float32))

    def probabilities(self, blob: np.ndarray) -> np.ndarray:
        """The class probabilities of a (N, C, H, W) blob; N oversampled crops are averaged,
        as ``caffe.Classifier.predict`` averages them."""
        probs = self.rows(blob)
        return probs[0] if len(probs) == 1 else probs.mean(0)

    def classify(self, data: bytes, top: int = 5, want_input: bool = False) -> dict:
        prepared = self.prepare(data)
        start = time.perf_counter()
        probs = self.probabilities(prepared.blob)
        return self.answer(prepared, probs, top, want_input, (time.perf_counter() - start) * 1e3)

    def prepare(self, data: bytes) -> preprocess.Prepared:
        """An uploaded image as the net's input (its blob: one row, or the oversampled crops)."""
        return preprocess.prepare(data, self.transform, self.max_pixels, self.max_decoded_bytes)

    def answer(self, prepared: preprocess.Prepared, probs: np.ndarray, top: int, want_input: bool,
               forward_ms: float) -> dict:
        """The JSON API's answer for an image: its top ``top`` classes from ``probs``, and the timings."""
        k = max(1, min(int(top), len(self.labels)))
        order = np.argsort(-probs)[:k]
        result = {
            "top": [{"label": self.labels[i], "index": int(i), "prob": float(probs[i])} for i in order],
            "timings_ms": {"decode": round(prepared.decode_ms, 3), "preprocess": round(prepared.preprocess_ms, 3),
                           "forward": round(forward_ms, 3)},
            "forward_ms": round(forward_ms, 3),
            "crops": int(prepared.blob.shape[0]),
            "inverted": prepared.inverted,
            "model": self.name,
        }
        if want_input:
            result["input_png"] = grids.png(prepared.seen)
        return result

    def visualize(self, data: bytes, layer: str | None = None) -> dict:
        """The first convolution's filters and ``layer``'s activations for this image (default: the
        first convolution's), as PNG grids (:mod:`.grids`), with the layers that can be shown.

        The image is prepared as for :meth:`classify`, its centre crop only.
        """
        if self._net is None:
            fix = ("serve its run or its deploy net and weights with --backend caffe" if self.files.weights
                   and Path(self.files.weights).suffix == ".caffemodel" else
                   "an ONNX model holds no Caffe net to show; serve the run it was exported from")
            raise NoVisualizations(f"visualizations need the caffe backend; {self.name} runs on {self.backend} ({fix})")
        shown = _shown_layers(self._net)
        if not shown:
            raise NoVisualizations(f"{self.name} has no layer with a 4-D output (N, C, H, W) to show")
        conv = _first_convolution(self._net)
        chosen = layer or (conv if conv in shown else next(iter(shown)))
        if chosen not in shown:
            raise UnknownLayer(f"layer {chosen!r} is not one whose output can be shown; "
                               f"choose one of: {', '.join(shown)}")
        t = self.transform
        single = replace(t, colour=replace(t.colour, oversample=False)) if t.colour else t
        blob = preprocess.prepare(data, single, self.max_pixels, self.max_decoded_bytes).blob
        with self._lock:
            self._forward(blob)
            activations = self._net.blobs[shown[chosen]].data[0].copy()
        if self._filters_png is None and conv is not None:
            self._filters_png = grids.png(grids.tile(grids.filters(self._net.params[conv][0].data)))
        return {"layer": chosen, "layers": list(shown), "filters_png": self._filters_png,
                "activations_png": grids.png(grids.tile(activations)),
                "activations_shape": list(activations.shape),
                "filters_shape": list(self._net.params[conv][0].data.shape) if conv else None}


def _shown_layers(net: Any) -> dict[str, str]:
    """Layer name → top blob, in order, for the layers that make a new 4-D blob. Not listed: in-place
    layers (ReLU), which share their input's blob; Input layers, which hold the image itself; and the
    Split layers Caffe inserts where one blob feeds several layers, whose tops are copies."""
    shown = {}
    for name, kind in zip(net._layer_names, (layer.type for layer in net.layers)):
        tops, bottoms = net.top_names[name], net.bottom_names[name]
        if kind in ("Input", "Split") or not tops or tops[0] in bottoms:
            continue
        if net.blobs[tops[0]].data.ndim == 4:
            shown[name] = tops[0]
    return shown


def _first_convolution(net: Any) -> str | None:
    return next((name for name, layer in zip(net._layer_names, net.layers) if layer.type == "Convolution"), None)


def load(engine: EngineInfo, files: ModelFiles, backend: str = "caffe", validate: bool = True,
         device: PycaffeDevice = CPU) -> Classifier:
    """The model ready to classify, proven first: built in a child, labels matching the outputs;
    pycaffe's on ``device`` (activated in whichever thread answers, since pycaffe's mode is per thread)."""
    started = time.perf_counter()
    row = dispatch.chosen(backend, device)
    if files.run and not Path(files.deploy).is_file() and RunFolder(files.run).train_net.is_file():
        raise RunError(f"{files.run} trained a net that is not a classifier (no SoftmaxWithLoss), so it has "
                       f"no deploy net to serve; train it again with --deploy FILE")
    # a run trained from a user's own solver without --labels has none: its classes go by index
    unnamed = files.run is not None and not Path(files.labels).exists()
    for what, path in (("deploy net", files.deploy), ("weights", files.weights), ("labels", files.labels)):
        if not Path(path).is_file() and not (what == "labels" and unnamed):
            raise (RunError if files.run else ConfigError)(f"{what} {path} not found")
    caffe = import_caffe(engine)
    pb = caffe.proto.caffe_pb2
    deploy = prototxt.read(files.deploy, pb.NetParameter())
    channels, height, width = input_shape(deploy, files.deploy)
    if modelfiles.is_detection(deploy):
        raise NotAClassifier(f"{files.deploy} is a detection model (its output comes from a "
                             f"{modelfiles.DETECTION_OUTPUT} layer): find its boxes with `caffetool demo.detect`, or "
                             "serve it with `caffetool demo.serve`")
    output = modelfiles.output_blob(deploy)
    if validate:  # a corrupt file aborts Caffe: let that happen in a child, not in the server
        check.validate(engine, files.deploy.parent, deploy=[files.deploy.name], weights=str(files.weights.absolute()))
    labels = None if unnamed else labelfile.read(files.labels)
    transform = transform_of(caffe, files, deploy)
    model = served.load(engine, files, row.name, device, [output])

    def forward(blob: np.ndarray) -> np.ndarray:
        return model(blob)[output].reshape(len(blob), -1)

    probs = forward(np.zeros((1, channels, height, width), np.float32))[0]
    if labels is None:
        labels = [str(i) for i in range(probs.size)]
    if probs.size != len(labels):
        raise NetError(f"{files.labels} names {len(labels)} classes, the net outputs {probs.size}")
    name = files.run.name if files.run else files.weights.stem
    return Classifier(name, row.name, transform, labels, files, _forward=forward,
                      _net=model.net if row.activations else None,
                      blobs=(modelfiles.input_blob(deploy), output),
                      load_seconds=round(time.perf_counter() - started, 3))
