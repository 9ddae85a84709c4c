"""A run's deploy net, run over batches on one of :mod:`caffetool.backends` (loaded through
:mod:`caffetool.export.served`): pycaffe (Caffe's own code, so figures equal ``caffe test``'s), OpenCV
DNN, onnxruntime or PyTorch on the run's verified export; the float arithmetic of the others
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

from caffetool.backends import dispatch
from caffetool.backends.devices import CPU, PycaffeDevice
from caffetool.engine import EngineInfo, import_caffe
from caffetool.errors import NetError, RunError
from caffetool.export import served
from caffetool.inference.modelfiles import ModelFiles
from caffetool.nets import check, prototxt
from caffetool.runs import labelfile
from caffetool.runs.folder import RunFolder

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
    where the deploy net has it; by default, what the final Softmax reads. ``device``: where the
    backend runs it, refused up front where the backend runs on the CPU only.
    """
    backend = dispatch.chosen(backend, device).name
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
    files = ModelFiles(deploy, weights, RunFolder(deploy.parent).labels, run=deploy.parent)
    model = served.load(engine, files, backend, device, [score, output])

    def run(blob: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        got = model(blob)
        return got[score].reshape(len(blob), -1), got[output].reshape(len(blob), -1)

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


def check_classifier(probs: np.ndarray, classes: int | None, deploy: Path) -> None:
    """Refuse an output that is not one probability per class: non-negative, summing to 1."""
    if classes is not None and probs.shape[1] != classes:
        raise NetError(f"{deploy} outputs {probs.shape[1]} values per image for {classes} classes in {labelfile.FILE}; "
                       "it is no classifier of these labels")
    sums = probs.sum(axis=1)
    if probs.min() < 0 or np.abs(sums - 1).max() > SUM_TOLERANCE:
        raise NetError(f"{deploy}'s output is not a probability per class (values sum to {sums.min():.4g}.."
                       f"{sums.max():.4g}); evaluate takes a classifier ending in Softmax")
