"""A trained model loaded once for the demo: deploy net, weights, labels and the transform.

From a run directory everything is known: ``deploy.prototxt``, the newest ``.caffemodel``,
``labels.txt``, and the TEST-phase transform (scale, mean) of ``train_val.prototxt`` or, for a
``--solver`` run, of its first test net. Files can also be given one by one. The model is first
built in a child process (Caffe aborts the process on a corrupt file), so a bad model fails start-up
with a clear message, not the first request.
Two backends: pycaffe (``caffe.Net``, exact) and OpenCV DNN (``cv2.dnn.readNetFromCaffe``); both
run forward passes one at a time behind a lock, since neither net object is thread-safe.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from google.protobuf.message import DecodeError

from caffetool.demo import preprocess
from caffetool.engine import EngineInfo, import_caffe
from caffetool.choices import choose
from caffetool.errors import ConfigError, DataError, NetError, RunError
from caffetool.nets import check, prototxt
from caffetool.train import snapshots

BACKENDS = ("caffe", "opencv")


@dataclass
class ModelFiles:
    deploy: Path
    weights: Path
    labels: Path
    mean: Path | None = None
    scale: float | None = None
    run: Path | None = None
    white_on_black: bool | None = None


def from_run(run_dir: Path) -> ModelFiles:
    weights = snapshots.newest_weights(run_dir)
    if weights is None:
        raise RunError(f"run {run_dir} has no .caffemodel yet; train it first (or give --weights)")
    white = None
    try:
        manifest = json.loads((run_dir / "manifest.json").read_text())
        dataset_manifest = Path(manifest["dataset"]["path"]) / "manifest.json"
        white = json.loads(dataset_manifest.read_text()).get("white_on_black")
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return ModelFiles(run_dir / "deploy.prototxt", weights, run_dir / "labels.txt", run=run_dir,
                      white_on_black=white)


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
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def describe(self) -> dict:
        t = self.transform
        return {"name": self.name, "backend": self.backend, "input_shape": [1, t.channels, t.height, t.width],
                "classes": self.labels, "run": str(self.files.run) if self.files.run else None,
                "weights": str(self.files.weights), "scale": t.scale, "white_on_black": t.white_on_black}

    def probabilities(self, blob: np.ndarray) -> np.ndarray:
        with self._lock:
            return self._forward(blob)

    def classify(self, data: bytes, top: int = 5, want_input: bool = False) -> dict:
        prepared = preprocess.prepare(data, self.transform, self.max_pixels, self.max_decoded_bytes)
        start = time.perf_counter()
        probs = self.probabilities(prepared.blob)
        forward_ms = (time.perf_counter() - start) * 1e3
        k = max(1, min(int(top), len(self.labels)))
        order = np.argsort(-probs)[:k]
        result = {
            "top": [{"label": self.labels[i], "index": int(i), "prob": float(probs[i])} for i in order],
            "timings_ms": {"decode": round(prepared.decode_ms, 3), "preprocess": round(prepared.preprocess_ms, 3),
                           "forward": round(forward_ms, 3)},
            "inverted": prepared.inverted,
            "model": self.name,
        }
        if want_input:
            ok, png = cv2.imencode(".png", prepared.seen)
            result["input_png"] = png.tobytes() if ok else b""
        return result


def load(engine: EngineInfo, files: ModelFiles, backend: str = "caffe", validate: bool = True) -> Classifier:
    """The model ready to classify, proven first: built in a child, labels matching the outputs."""
    backend = choose(backend, BACKENDS, "--backend")
    if files.run and not Path(files.deploy).is_file() and (files.run / "train_net.prototxt").is_file():
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
    channels, height, width = _input_shape(deploy, files.deploy)
    output = deploy.layer[-1].top[0] if deploy.layer else "prob"
    if validate:  # a corrupt file aborts Caffe: let that happen in a child, not in the server
        check.validate(engine, files.deploy.parent, deploy=[files.deploy.name], weights=str(files.weights.absolute()))
    labels = None if unnamed else _read_labels(files.labels)
    transform = _transform(caffe, files, channels, height, width)
    if backend == "caffe":
        net = caffe.Net(str(files.deploy), str(files.weights), caffe.TEST)
        net.blobs["data"].reshape(1, channels, height, width)
        net.reshape()

        def forward(blob: np.ndarray) -> np.ndarray:
            net.blobs["data"].data[...] = blob
            return net.forward()[output][0].reshape(-1).copy()
    else:
        try:
            cvnet = cv2.dnn.readNetFromCaffe(str(files.deploy), str(files.weights))
        except (cv2.error, AttributeError) as e:
            raise NetError(f"OpenCV could not load {files.deploy} with {files.weights}: {e}") from None

        def forward(blob: np.ndarray) -> np.ndarray:
            cvnet.setInput(blob)
            return cvnet.forward(output).reshape(-1).copy()

    probs = forward(np.zeros((1, channels, height, width), np.float32))
    if labels is None:
        labels = [str(i) for i in range(probs.size)]
    if probs.size != len(labels):
        raise NetError(f"{files.labels} names {len(labels)} classes, the net outputs {probs.size}")
    name = files.run.name if files.run else files.weights.stem
    return Classifier(name, backend, transform, labels, files, _forward=forward)


def _read_labels(path: Path) -> list[str]:
    """One class name a line, blank lines skipped."""
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise DataError(f"{path} is not a text file; labels.txt holds one class name a line") from None
    return [line.strip() for line in text.splitlines() if line.strip()]


def _input_shape(net: Any, path: Path) -> tuple[int, int, int]:
    for layer in net.layer:
        if layer.type == "Input" and layer.input_param.shape:
            dims = list(layer.input_param.shape[0].dim)
            if len(dims) == 4:
                return dims[1], dims[2], dims[3]
    if len(net.input_shape) and len(net.input_shape[0].dim) == 4:
        return tuple(net.input_shape[0].dim[1:])
    raise NetError(f"{path} has no 4-D Input layer (N, C, H, W) to take images")


TRAINED_NETS = ("train_val.prototxt", "test_net_0.prototxt", "train_net.prototxt")
"""Where a run's data transform is: the generated net, or a ``--solver`` run's copies of the user's nets."""


def _transform(caffe: Any, files: ModelFiles, channels: int, height: int, width: int) -> preprocess.Transform:
    scale, mean = 1.0, None
    train_val = next((files.run / name for name in TRAINED_NETS if (files.run / name).is_file()), None) \
        if files.run else None
    if train_val:
        net = prototxt.read(train_val, caffe.proto.caffe_pb2.NetParameter())
        data = [layer for layer in net.layer if layer.type == "Data"]
        test = next((layer for layer in data if any(r.phase == caffe.proto.caffe_pb2.TEST for r in layer.include)),
                    data[0] if data else None)
        if test is not None:
            tp = test.transform_param
            scale = tp.scale if tp.HasField("scale") else 1.0
            if tp.mean_value:
                mean = np.array(list(tp.mean_value), np.float32)
            elif tp.mean_file:
                files.mean = files.mean or Path(tp.mean_file)
    if files.scale is not None:
        scale = files.scale
    if files.mean is not None:
        mean = _read_mean(caffe, files.mean, channels, height, width)
    white = files.white_on_black if files.white_on_black is not None else False
    return preprocess.Transform(channels, height, width, float(scale), mean, white)


def _read_mean(caffe: Any, path: Path, channels: int, height: int, width: int) -> np.ndarray:
    """The mean as per-channel values or a (C, H, W) image, from .npy or Caffe's .binaryproto."""
    try:
        if path.suffix == ".npy":
            mean = np.load(path, allow_pickle=False).astype(np.float32)
        else:
            blob = caffe.proto.caffe_pb2.BlobProto()
            blob.ParseFromString(Path(path).read_bytes())
            mean = np.array(blob.data, np.float32).reshape(blob.channels, blob.height, blob.width)
    except (OSError, ValueError, DecodeError) as e:
        raise DataError(f"mean {path} cannot be read as a mean image ({e}); give a .npy or .binaryproto "
                        "(invoke data.mean writes one)") from None
    if mean.ndim == 3 and mean.shape[1:] != (height, width):
        mean = mean.mean(axis=(1, 2))  # a crop-sized net with a full-size mean: per-channel values
    if mean.shape[0] != channels:
        raise DataError(f"mean {path} has {mean.shape[0]} channels, the net takes {channels}")
    return mean
