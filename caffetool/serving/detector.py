"""A detection model (SSD) loaded once for the demo: deploy net, weights, optional labels, the transform.

A model is a detection model when its deploy net's output comes from a ``DetectionOutput`` layer
(:func:`caffetool.inference.modelfiles.is_detection`): the SSD fork's rows ``[image, label,
confidence, xmin, ymin, xmax, ymax]``, the box's corners normalised to [0, 1] of the image, so they
are scaled by the original image's width and height for pixels whatever the stretch to the net's
input was. A net finds at most ``keep_top_k`` boxes per image, above its own
``confidence_threshold``; the answers here keep those at or above the caller's threshold (the
page asks for every one and filters as its slider moves). An image with nothing found gets, from
the fork's layer, one row of -1 but for its image id, and OpenCV pads its answer with rows of
zeros: neither is a detection, and both are dropped.

Labels are optional: a labels file names label ids by line (line 0 is id 0, usually the
background); without one a label shows as "class N". The model runs on one of
:mod:`caffetool.backends` through :mod:`caffetool.export.served`, as a classifier does: Caffe's
files for pycaffe and OpenCV, a verified export for the others (where the export can write the
SSD layers). Forward passes run one at a time behind a lock.

Limits: box coordinates are reported as the net gives them, unclipped (rows far below the net's
threshold may lie outside the image); no per-class thresholds.
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
from caffetool.errors import ConfigError, RunError
from caffetool.export import served
from caffetool.inference import modelfiles, preprocess
from caffetool.inference.modelfiles import ModelFiles
from caffetool.nets import check, prototxt
from caffetool.runs import labelfile
from caffetool.serving import classifier, grids

COLUMNS = ("image", "label", "confidence", "xmin", "ymin", "xmax", "ymax")  # a DetectionOutput row
DEFAULT_THRESHOLD = 0.5


class NotADetector(ConfigError):
    """A model given where a detection model is needed (its output is not a DetectionOutput layer's)."""


@dataclass
class Detector:
    name: str
    backend: str
    transform: preprocess.Transform
    labels: list[str] | None  # names by label id; None: "class N"
    files: ModelFiles
    max_pixels: int = preprocess.MAX_PIXELS
    max_decoded_bytes: int = preprocess.MAX_DECODED_BYTES
    _forward: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    blobs: tuple[str, str] = ("data", "detection_out")  # the deploy net's input and output blob names
    load_seconds: float | None = None
    kind: ClassVar[str] = "detection"

    def label(self, label_id: int) -> str:
        """The name of ``label_id``: its line of the labels file, else "class N"."""
        if self.labels is not None and 0 <= label_id < len(self.labels):
            return self.labels[label_id]
        return f"class {label_id}"

    def describe(self) -> dict:
        t = self.transform
        return {"name": self.name, "kind": self.kind, "backend": self.backend,
                "input_shape": [1, t.channels, t.height, t.width], "classes": self.labels or [],
                "run": str(self.files.run) if self.files.run else None, "weights": str(self.files.weights),
                "output": self.blobs[1], "columns": list(COLUMNS), "scale": t.scale,
                "mean": None if t.mean is None else [float(v) for v in t.mean] if t.mean.ndim == 1 else "image",
                "channel_swap": list(t.stretch.channel_swap) if t.stretch and t.stretch.channel_swap else None,
                "default_threshold": DEFAULT_THRESHOLD}

    def rows(self, blob: np.ndarray) -> np.ndarray:
        """The detection rows of each image of a (N, C, H, W) blob: an object array of N (k, 7) arrays."""
        with self._lock:
            return self._forward(np.ascontiguousarray(blob, np.float32))

    def prepare(self, data: bytes) -> preprocess.Prepared:
        """An uploaded image as the net's input: the whole image stretched to it."""
        return preprocess.prepare(data, self.transform, self.max_pixels, self.max_decoded_bytes)

    def detect(self, data: bytes, threshold: float = DEFAULT_THRESHOLD, want_input: bool = False) -> dict:
        prepared = self.prepare(data)
        start = time.perf_counter()
        found = self.rows(prepared.blob)[0]
        return self.answer(prepared, found, threshold, want_input, (time.perf_counter() - start) * 1e3)

    def answer(self, prepared: preprocess.Prepared, found: np.ndarray, threshold: float, want_input: bool,
               forward_ms: float) -> dict:
        """The JSON API's answer for an image: its detections at or above ``threshold``, best first,
        boxes in the image's pixels and normalised, and the timings."""
        height, width = prepared.size
        kept = found[found[:, 2] >= threshold]
        kept = kept[np.argsort(-kept[:, 2], kind="stable")]
        result = {
            "detections": [self._detection(row, width, height) for row in kept],
            "image": {"width": width, "height": height},
            "threshold": threshold,
            "timings_ms": {"decode": round(prepared.decode_ms, 3), "preprocess": round(prepared.preprocess_ms, 3),
                           "forward": round(forward_ms, 3)},
            "forward_ms": round(forward_ms, 3),
            "model": self.name,
        }
        if want_input:
            result["input_png"] = grids.png(prepared.seen)
        return result

    def _detection(self, row: np.ndarray, width: int, height: int) -> dict:
        label_id = int(round(float(row[1])))
        xmin, ymin, xmax, ymax = (float(v) for v in row[3:7])
        return {"label": self.label(label_id), "label_id": label_id, "confidence": float(row[2]),
                "box": {"xmin": xmin * width, "ymin": ymin * height, "xmax": xmax * width, "ymax": ymax * height},
                "box_normalized": {"xmin": xmin, "ymin": ymin, "xmax": xmax, "ymax": ymax}}


def per_image(output: np.ndarray, images: int) -> np.ndarray:
    """A DetectionOutput blob (1, 1, K, 7) as an object array of each image's rows, (k, 7) float32,
    without the rows that are no detection: the fork's placeholder (label -1, where nothing was
    found) and OpenCV's padding (rows of zeros up to ``keep_top_k`` per image)."""
    flat = np.asarray(output, np.float32).reshape(-1, len(COLUMNS))
    found = flat[(flat[:, 1] >= 0) & (flat[:, 2] > 0)]
    split = np.empty(images, dtype=object)
    for i in range(images):
        split[i] = np.ascontiguousarray(found[found[:, 0] == i])
    return split


def detects(engine: EngineInfo, deploy: Path) -> bool:
    """Whether the deploy net in ``deploy`` is a detection net (read, not built)."""
    net = prototxt.read(deploy, import_caffe(engine).proto.caffe_pb2.NetParameter())
    return modelfiles.is_detection(net)


def load(engine: EngineInfo, files: ModelFiles, backend: str = "caffe", validate: bool = True,
         device: PycaffeDevice = CPU) -> Detector:
    """The detection model ready, proven first: built in a child, one forward pass on ``backend``."""
    started = time.perf_counter()
    row = dispatch.chosen(backend, device)
    for what, path in (("deploy net", files.deploy), ("weights", files.weights), ("labels", files.labels)):
        if path is not None and not Path(path).is_file():
            raise (RunError if files.run else ConfigError)(f"{what} {path} not found")
    caffe = import_caffe(engine)
    deploy = prototxt.read(files.deploy, caffe.proto.caffe_pb2.NetParameter())
    if not modelfiles.is_detection(deploy):
        raise NotADetector(f"{files.deploy} is not a detection model: its output {modelfiles.output_blob(deploy)!r} "
                           f"comes from a {modelfiles.output_layer_type(deploy)} layer, not "
                           f"{modelfiles.DETECTION_OUTPUT}; classify its images with `caffetool demo.classify`")
    channels, height, width = modelfiles.input_shape(deploy, files.deploy)
    output = modelfiles.output_blob(deploy)
    if validate:  # a corrupt file aborts Caffe: let that happen in a child
        check.validate(engine, files.deploy.parent, deploy=[files.deploy.name], weights=str(files.weights.absolute()))
    labels = labelfile.read(files.labels) if files.labels else None
    transform = modelfiles.transform_of(caffe, files, deploy)
    # the labels name detections' label ids, not the output's values: an export is made without them
    model = served.load(engine, replace(files, labels=None), row.name, device, [output])

    def forward(blob: np.ndarray) -> np.ndarray:
        return per_image(model(blob)[output], len(blob))

    forward(np.zeros((1, channels, height, width), np.float32))
    name = files.run.name if files.run else files.weights.stem
    return Detector(name, row.name, transform, labels, files, _forward=forward,
                    blobs=(modelfiles.input_blob(deploy), output), load_seconds=round(time.perf_counter() - started, 3))


def load_model(engine: EngineInfo, files: ModelFiles, backend: str = "caffe", validate: bool = True,
               device: PycaffeDevice = CPU) -> classifier.Classifier | Detector:
    """The model of ``files`` as what it is: a :class:`Detector` for a detection net, else a classifier."""
    if Path(files.deploy).is_file() and detects(engine, Path(files.deploy)):
        return load(engine, files, backend, validate, device)
    return classifier.load(engine, files, backend, validate=validate, device=device)
