"""What every backend gives and takes: the files it reads (:class:`ModelSource`) and a model with one
forward call (:class:`LoadedModel`).

A forward pass takes feeds by input name, each an (n, ...) array (a single blob stands for the first
input), and gives the outputs asked for when the model was loaded, by name, each an (n, ...) float
array of its own (a copy where the framework would write over it on the next pass). Blobs keep their
Caffe names through every backend: an export names its tensors after Caffe's blobs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from caffetool.engine import EngineInfo

Feeds = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class ModelSource:
    """The files one backend reads: Caffe's deploy net and weights (read through ``engine``'s pycaffe
    and protobuf), an ONNX export, or a PyTorch export's ``model.py``, whose module names neither its
    inputs nor its results, so they are given here (as its record lists them)."""

    path: Path  # deploy.prototxt, model.onnx or model.py
    weights: Path | None = None  # the .caffemodel, or a PyTorch export's .pt
    engine: EngineInfo | None = None  # for Caffe's files
    class_name: str = ""  # a PyTorch export's nn.Module
    inputs: tuple[str, ...] = ()  # a PyTorch export's forward arguments, as Caffe's blobs
    outputs: tuple[str, ...] = ()  # what its forward returns, as Caffe's blobs
    taps: Mapping[str, str] = field(default_factory=dict)  # other blobs: Caffe blob -> "ATTRIBUTE:INDEX"


@dataclass
class LoadedModel:
    backend: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]  # what each pass returns
    run: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
    net: Any = None  # the framework's own object: a caffe.Net, an InferenceSession, a cv2.dnn.Net, an nn.Module

    def __call__(self, feeds: Feeds | np.ndarray) -> dict[str, np.ndarray]:
        if not isinstance(feeds, Mapping):
            feeds = {self.inputs[0]: feeds}
        return self.run({name: np.ascontiguousarray(x, np.float32) for name, x in feeds.items()})
