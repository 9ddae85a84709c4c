"""A run's deploy net, run over batches: pycaffe (Caffe's own code, so figures equal ``caffe test``'s),
OpenCV DNN (its Caffe importer on OpenCV 4, the run's verified ONNX export on OpenCV 5:
:mod:`caffetool.export.opencv`) or onnxruntime on that export; the float arithmetic of the last two
differs, so their figures may too.

Each batch gives two arrays: the scores the ``Softmax`` reads (what a train/test net's ``Accuracy``
layer compares, so correctness is judged as Caffe judges it) and the probabilities it outputs. A net
whose output is not a probability per class (no deploy net, an autoencoder, a regression) is refused:
evaluation is for classifiers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from caffetool.choices import choose
from caffetool.engine import EngineInfo, import_caffe
from caffetool.errors import ConfigError, NetError, RunError
from caffetool.nets import check, prototxt
from caffetool.runs import labelfile
from caffetool.runs.folder import RunFolder
from caffetool.train.devices import CPU, PycaffeDevice

BACKENDS = ("caffe", "opencv", "onnxruntime")
SUM_TOLERANCE = 1e-3


@dataclass
class DeployNet:
    input: str
    shape: tuple[int, int, int]  # (C, H, W) of one record
    output: str  # the probabilities
    score: str  # what the Softmax reads (the output itself when the net ends otherwise)
    backend: str
    _run: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]

    def __call__(self, blob: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(scores, probabilities), each (n, classes), for a (n, C, H, W) batch."""
        return self._run(blob)


def load(engine: EngineInfo, deploy: Path, weights: Path, backend: str = "caffe",
         score: str | None = None, device: PycaffeDevice = CPU) -> DeployNet:
    """The deploy net with ``weights``, built in a child first (Caffe aborts on a corrupt file).

    ``score`` names the blob to judge correctness on (the one the trained net's Accuracy layer reads)
    where the deploy net has it; by default, what the final Softmax reads. ``device``: where pycaffe
    runs it (OpenCV's backend runs on the CPU).
    """
    backend = choose(backend, BACKENDS, "--backend")
    if device.gpu is not None and backend != "caffe":
        raise ConfigError(f"--gpu {device.gpu} runs pycaffe's backend; the {backend} backend runs on the CPU "
                          "(use --gpu cpu)")
    if not deploy.is_file():
        raise RunError(f"{deploy.parent} has no {deploy.name}: its net is no classifier caffetool can evaluate "
                       "(a --solver run gets one when its train net ends in SoftmaxWithLoss, or give --deploy FILE)")
    caffe = import_caffe(engine)
    net = prototxt.read(deploy, caffe.proto.caffe_pb2.NetParameter())
    name, shape = input_of(net, deploy)
    if not net.layer:
        raise NetError(f"{deploy} has no layers")
    last = net.layer[-1]
    output = last.top[0]
    tops = {top for layer in net.layer for top in layer.top}
    if score not in tops:
        score = last.bottom[0] if last.type == "Softmax" and last.bottom else output
    check.validate(engine, deploy.parent, deploy=[deploy.name], weights=str(weights.absolute()))
    run = (_pycaffe(caffe, deploy, weights, name, shape, score, output, device) if backend == "caffe"
           else _onnxruntime(engine, deploy, weights, score, output) if backend == "onnxruntime"
           else _opencv(engine, net, deploy, weights, score, output))
    return DeployNet(name, shape, output, score, backend, run)


def input_of(net: Any, path: Path) -> tuple[str, tuple[int, int, int]]:
    """The name and (C, H, W) of the net's 4-D input (an ``Input`` layer, or the old ``input`` fields)."""
    for layer in net.layer:
        if layer.type == "Input" and layer.input_param.shape and len(layer.input_param.shape[0].dim) == 4:
            return layer.top[0], tuple(layer.input_param.shape[0].dim[1:])
    if net.input and net.input_shape and len(net.input_shape[0].dim) == 4:
        return net.input[0], tuple(net.input_shape[0].dim[1:])
    if net.input and len(net.input_dim) == 4:
        return net.input[0], tuple(net.input_dim[1:])
    raise NetError(f"{path} has no 4-D input (N, C, H, W) to take images")


def _pycaffe(caffe: Any, deploy: Path, weights: Path, name: str, shape: tuple[int, int, int], score: str,
             output: str, device: PycaffeDevice) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    device.activate(caffe)
    net = caffe.Net(str(deploy), str(weights), caffe.TEST)

    def run(blob: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        device.activate(caffe)
        n = len(blob)
        if net.blobs[name].data.shape[0] != n:
            net.blobs[name].reshape(n, *shape)
            net.reshape()
        net.blobs[name].data[...] = blob
        net.forward()
        return net.blobs[score].data.reshape(n, -1).copy(), net.blobs[output].data.reshape(n, -1).copy()

    return run


def _opencv(engine: EngineInfo, net: Any, deploy: Path, weights: Path, score: str,
            output: str) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    from caffetool.export import opencv  # noqa: PLC0415 - onnx only for this backend
    from caffetool.inference.modelfiles import ModelFiles  # noqa: PLC0415

    files = ModelFiles(deploy, weights, RunFolder(deploy.parent).labels, run=deploy.parent)
    forward = opencv.forward_of(engine, files, net, [score, output])
    return lambda blob: tuple(forward(blob))  # (scores, probabilities), as the other backends give them


def _onnxruntime(engine: EngineInfo, deploy: Path, weights: Path, score: str,
                 output: str) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """The run's export (made and verified now if missing or stale), its blobs named as Caffe's."""
    from caffetool.export import exporter, runtime  # noqa: PLC0415 - onnx only for this backend
    from caffetool.inference.modelfiles import ModelFiles  # noqa: PLC0415

    files = ModelFiles(deploy, weights, RunFolder(deploy.parent).labels, run=deploy.parent)
    session = runtime.session_of(exporter.verified_export(engine, files), outputs=[score, output])
    name = session.get_inputs()[0].name

    def run(blob: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = len(blob)
        scores, probs = session.run([score, output], {name: np.ascontiguousarray(blob, np.float32)})
        return scores.reshape(n, -1).copy(), probs.reshape(n, -1).copy()

    return run


def check_classifier(probs: np.ndarray, classes: int | None, deploy: Path) -> None:
    """Refuse an output that is not one probability per class: non-negative, summing to 1."""
    if classes is not None and probs.shape[1] != classes:
        raise NetError(f"{deploy} outputs {probs.shape[1]} values per image for {classes} classes in {labelfile.FILE}; "
                       "it is no classifier of these labels")
    sums = probs.sum(axis=1)
    if probs.min() < 0 or np.abs(sums - 1).max() > SUM_TOLERANCE:
        raise NetError(f"{deploy}'s output is not a probability per class (values sum to {sums.min():.4g}.."
                       f"{sums.max():.4g}); evaluate takes a classifier ending in Softmax")
