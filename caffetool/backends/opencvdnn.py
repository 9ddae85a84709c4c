"""The ``opencv`` backend: OpenCV's DNN module, on whichever OpenCV is installed.

OpenCV 4 reads Caffe's own files (``cv2.dnn.readNetFromCaffe``). OpenCV 5 removed that importer and
reads ONNX: there it is given the verified ONNX export (which :data:`READS` says the caller must
make). OpenCV 5 returns only a graph's outputs, so blobs asked for besides them (a classifier's
scores, which its Softmax reads) are made outputs of the graph in memory, with the shapes ONNX's
shape inference gives them; the file stays as verified. Either way the net takes the blob pycaffe
takes and gives the blobs named as Caffe names them. It runs on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from caffetool.backends.devices import PycaffeDevice
from caffetool.backends.loaded import LoadedModel, ModelSource
from caffetool.engine import import_caffe
from caffetool.errors import NetError

CAFFE_IMPORTER = hasattr(cv2.dnn, "readNetFromCaffe")  # OpenCV 4.x; 5.x reads ONNX only
READS = "caffe" if CAFFE_IMPORTER else "onnx"


def load(source: ModelSource, _device: PycaffeDevice, outputs: Sequence[str]) -> LoadedModel:
    """The net of ``source`` (Caffe's files, or an ONNX file), giving ``outputs`` by Caffe's names."""
    if Path(source.path).suffix == ".onnx":
        net, inputs, blobs = _from_onnx(Path(source.path), outputs)
        names = list(blobs)
    else:
        net, inputs, blobs, names = _from_caffe(source, outputs)

    def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        for name, x in feeds.items():
            net.setInput(x, name)
        return {blob: np.array(out) for blob, out in zip(blobs, net.forward(names))}

    return LoadedModel("opencv", inputs, blobs, run, net)


def _from_caffe(source: ModelSource, outputs: Sequence[str]) -> tuple[Any, tuple[str, ...], tuple[str, ...], list[str]]:
    """OpenCV 4 on the deploy net and weights; OpenCV names an output by the layer that writes it."""
    from google.protobuf import text_format  # noqa: PLC0415 - only to read the deploy net's layer names

    deploy = import_caffe(source.engine).proto.caffe_pb2.NetParameter()
    text_format.Merge(Path(source.path).read_text(), deploy)
    net = _read(cv2.dnn.readNetFromCaffe, str(source.path), str(source.weights), what=source.path)
    producer = {top: layer.name for layer in deploy.layer for top in layer.top}
    read = {bottom for layer in deploy.layer for bottom in layer.bottom}
    inputs = tuple(deploy.input) + tuple(layer.top[0] for layer in deploy.layer if layer.type == "Input")
    blobs = tuple(outputs) or tuple(top for top in producer if top not in read)
    return net, inputs, blobs, [producer[b] for b in blobs]


def _from_onnx(path: Path, outputs: Sequence[str]) -> tuple[Any, tuple[str, ...], tuple[str, ...]]:
    import onnx  # noqa: PLC0415 - only where OpenCV reads an export

    model = onnx.load(str(path))
    present = [o.name for o in model.graph.output]
    wanted = [name for name in outputs if name not in present]
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info} if wanted else {}
    for name in wanted:
        if name not in inferred:
            raise NetError(f"{path} has no tensor {name!r} with a known shape for OpenCV to return")
        model.graph.output.append(inferred[name])
    initialized = {i.name for i in model.graph.initializer}
    inputs = tuple(i.name for i in model.graph.input if i.name not in initialized)
    net = _read(cv2.dnn.readNetFromONNX, np.frombuffer(model.SerializeToString(), np.uint8), what=path)
    return net, inputs, tuple(outputs) or tuple(present)


def _read(reader: Callable[..., Any], *args: Any, what: Any) -> Any:
    try:
        return reader(*args)
    except cv2.error as e:
        raise NetError(f"OpenCV {cv2.__version__} could not load {what}: {str(e).strip().splitlines()[-1]}") from None
