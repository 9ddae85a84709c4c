"""OpenCV's DNN module on a Caffe model, whichever OpenCV is installed.

OpenCV 4 reads Caffe's own files (``cv2.dnn.readNetFromCaffe``). OpenCV 5 removed that importer and
reads ONNX; there the model is the ONNX export, verified against Caffe layer by layer before it was
written (:func:`caffetool.export.exporter.verified_export` makes it on first use, once: a run's in
its export folder, other files' in caffetool's cache). OpenCV 5 returns only a graph's outputs, so blobs asked for besides them (a
classifier's scores, which its Softmax reads) are made outputs of the graph in memory, with the
shapes ONNX's shape inference gives them; the file stays as verified. Either way the net takes the
blob pycaffe takes, preprocessed by the same code, and gives the blobs named as Caffe names them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cv2
import numpy as np

from caffetool.engine import EngineInfo
from caffetool.errors import NetError
from caffetool.inference.modelfiles import ModelFiles

CAFFE_IMPORTER = hasattr(cv2.dnn, "readNetFromCaffe")  # OpenCV 4.x; 5.x reads ONNX only


def forward_of(engine: EngineInfo, files: ModelFiles, deploy: Any,
               blobs: list[str]) -> Callable[[np.ndarray], list[np.ndarray]]:
    """A function from an (n, C, H, W) batch to the named ``blobs`` of the net in ``files`` (whose
    parsed deploy net is ``deploy``), each flattened to (n, -1), computed by OpenCV."""
    if CAFFE_IMPORTER:
        net = _read(cv2.dnn.readNetFromCaffe, str(files.deploy), str(files.weights), what=files.deploy)
        producer = {top: layer.name for layer in deploy.layer for top in layer.top}  # outputs are named by layer
        names = [producer[b] for b in blobs]
    else:
        net, names = _from_export(engine, files, blobs), list(blobs)

    def forward(blob: np.ndarray) -> list[np.ndarray]:
        net.setInput(np.ascontiguousarray(blob, np.float32))
        return [out.reshape(len(blob), -1).copy() for out in net.forward(names)]

    return forward


def _from_export(engine: EngineInfo, files: ModelFiles, blobs: list[str]) -> Any:
    import onnx  # noqa: PLC0415 - only where OpenCV reads the export

    from caffetool.export import exporter  # noqa: PLC0415

    path = exporter.verified_export(engine, files)
    model = onnx.load(str(path))
    wanted = [name for name in blobs if name not in {o.name for o in model.graph.output}]
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info} if wanted else {}
    for name in wanted:
        if name not in inferred:
            raise NetError(f"{path} has no tensor {name!r} with a known shape for OpenCV to return")
        model.graph.output.append(inferred[name])
    return _read(cv2.dnn.readNetFromONNX, np.frombuffer(model.SerializeToString(), np.uint8), what=path)


def _read(reader: Callable[..., Any], *args: Any, what: Any) -> Any:
    try:
        return reader(*args)
    except cv2.error as e:
        raise NetError(f"OpenCV {cv2.__version__} could not load {what}: {str(e).strip().splitlines()[-1]}") from None
