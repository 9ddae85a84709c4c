"""A deploy net and its weights on any backend (:mod:`caffetool.backends`): what ``evaluate``, the demo
and the server load their models through.

A backend that runs Caffe's files is given the deploy net and the weights; one that runs an export
is given the verified export of exactly those files, made now where missing, stale or damaged
(:func:`.reuse.verified_export`: a run's in its export folder, other files' in caffetool's cache).
A PyTorch export's record names its class, its inputs and what its forward returns; a blob asked
for besides those (the scores a Softmax reads) is caught at the attribute of the layer that last
writes it. A ``--gpu N`` the backend cannot honour is refused before any export is made.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from caffetool.backends import dispatch
from caffetool.backends.devices import CPU, PycaffeDevice
from caffetool.backends.loaded import LoadedModel, ModelSource
from caffetool.engine import EngineInfo, import_caffe
from caffetool.inference.modelfiles import ModelFiles
from caffetool.nets import prototxt


def load(engine: EngineInfo, files: ModelFiles, backend: str, device: PycaffeDevice = CPU,
         outputs: Sequence[str] = ()) -> LoadedModel:
    """The model of ``files`` on ``backend`` and ``device``, its passes giving ``outputs`` by Caffe's names."""
    row = dispatch.chosen(backend, device)
    return dispatch.load(row.name, SOURCES[row.reads](engine, files, outputs), device, outputs)


def _caffe_files(engine: EngineInfo, files: ModelFiles, _outputs: Sequence[str]) -> ModelSource:
    return ModelSource(Path(files.deploy), Path(files.weights), engine)


def _onnx_export(engine: EngineInfo, files: ModelFiles, _outputs: Sequence[str]) -> ModelSource:
    from caffetool.export import reuse  # noqa: PLC0415 - onnx only for the backends that run the export

    return ModelSource(reuse.verified_export(engine, files, to="onnx"))


def _pytorch_export(engine: EngineInfo, files: ModelFiles, outputs: Sequence[str]) -> ModelSource:
    from caffetool.export import exporter, reuse  # noqa: PLC0415

    model = reuse.verified_export(engine, files, to="pytorch")
    record = json.loads(exporter.record_of(model).read_text())
    returned = tuple(record["outputs"])
    return ModelSource(model, model.with_name(record["weights_file"]), class_name=record["class"],
                       inputs=tuple(record["inputs"]), outputs=returned,
                       taps=_taps(engine, files, [b for b in outputs if b not in returned]))


def _taps(engine: EngineInfo, files: ModelFiles, blobs: list[str]) -> dict[str, str]:
    """Each of ``blobs`` as "ATTRIBUTE:INDEX": the output of the layer that last writes it."""
    from caffetool.export import torchnet  # noqa: PLC0415 - torch only for this backend

    if not blobs:
        return {}
    deploy = prototxt.read(files.deploy, import_caffe(engine).proto.caffe_pb2.NetParameter())
    writer = {top: (layer.name, i) for layer in deploy.layer for i, top in enumerate(layer.top)}
    return {blob: f"{torchnet.attribute_of(writer[blob][0])}:{writer[blob][1]}" for blob in blobs if blob in writer}


SOURCES: dict[str, Callable[[EngineInfo, ModelFiles, Sequence[str]], ModelSource]] = {
    "caffe": _caffe_files, "onnx": _onnx_export, "pytorch": _pytorch_export}  # by what the backend reads
