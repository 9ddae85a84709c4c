"""The ONNX export format: an ``onnx.ModelProto`` made from the converted net (:mod:`.onnxnet`), its
metadata (preprocessing, labels) and, when asked, the preprocessing as the graph's first nodes,
checked by ``onnx.checker`` with its shape inference before the verification runs it on
onnxruntime. ``export.check`` reads a model back and converts the net again at the model's opset
and batch, refusing one whose inputs, outputs or tensors are not the deploy net's.

Its row in :data:`.formats.FORMATS` names these functions; :mod:`.exporter` calls them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx

from caffetool import __version__
from caffetool.backends import onnxrt
from caffetool.errors import ConfigError, ExportError
from caffetool.export import onnxnet, preprocessing, verify

if TYPE_CHECKING:
    from caffetool.export.request import ExportRequest


def ready(request: ExportRequest) -> None:
    """Refuse an opset the converter or the onnx package here cannot write."""
    newest = onnx.defs.onnx_opset_version()
    if not onnxnet.MIN_OPSET <= request.opset <= newest:
        raise ConfigError(f"--opset {request.opset} is outside {onnxnet.MIN_OPSET}..{newest} (the onnx package here "
                          f"knows opsets up to {newest}; the export needs {onnxnet.MIN_OPSET} or later)")


def convert(net_param: Any, net: Any, request: ExportRequest, name: str) -> onnxnet.Converted:
    return onnxnet.convert(net_param, net, request.opset, request.batch, name)


def finish(converted: onnxnet.Converted, p: preprocessing.Preprocessing | None, labels: list[str] | None,
           request: ExportRequest) -> onnx.ModelProto:
    """The model as written: metadata, the preprocessing in the graph when asked, checked by onnx."""
    model = converted.model
    if request.with_preprocessing:
        model = preprocessing.prepend(model, next(iter(converted.inputs)), p,
                                      request.batch if request.batch is not None else onnxnet.DYNAMIC_BATCH)
    props = {**(p.metadata() if p else {}),
             preprocessing.IN_GRAPH: str(request.with_preprocessing).lower()}
    if labels is not None:
        props[preprocessing.LABELS] = json.dumps(labels)
    onnx.helper.set_model_props(model, props)
    model.producer_version = __version__
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        raise ExportError(f"onnx's checker refused the converted model: {str(e).strip().splitlines()[0]}") from None
    return model


def contents(model: onnx.ModelProto, out: Path) -> dict[Path, bytes]:
    return {out: model.SerializeToString()}


def runner(model: onnx.ModelProto, converted: onnxnet.Converted, _filename: str) -> verify.Run:
    return verify.onnx_runner(model, converted)


def record(model: onnx.ModelProto, _converted: onnxnet.Converted, _labels: list[str] | None,
           request: ExportRequest) -> dict:
    """The ONNX export's keys of its record (its labels are in the model's metadata)."""
    return {"opset": request.opset, "ir_version": model.ir_version,
            "batch": request.batch if request.batch is not None else "dynamic",
            "inputs": {i.name: _dims(i) for i in model.graph.input},
            "outputs": {o.name: _dims(o) for o in model.graph.output},
            "preprocessing_in_graph": request.with_preprocessing}


def _dims(value: onnx.ValueInfoProto) -> list[int | str] | None:
    t = value.type.tensor_type
    return [d.dim_param or d.dim_value for d in t.shape.dim] if t.HasField("shape") else None


def read(path: Path) -> onnx.ModelProto:
    return onnxrt.read_model(path)


def reconvert(model: onnx.ModelProto, path: Path, net_param: Any, net: Any,
              name: str) -> tuple[onnxnet.Converted, dict[str, Any]]:
    """The net converted at ``model``'s opset and batch, once ``model`` is found to be its export (its
    tensors carry Caffe's blob names, as caffetool's exports do); with the options it was made with."""
    opset = _opset(model, path)
    first = model.graph.input[0].type.tensor_type.shape.dim[0] if model.graph.input else None
    batch = first.dim_value if first is not None and first.dim_value else None
    converted = onnxnet.convert(net_param, net, opset, batch, name)
    _check_interface(model, path, converted)
    missing = [blob for c in converted.compared for _, blob in c.outputs
               if blob not in {t for node in model.graph.node for t in node.output}]
    if missing:
        raise ExportError(f"{path} has no tensor {missing[0]!r} for the deploy net's blob of that name: it "
                          "is not an export of this net (or was made by another tool)")
    with_preprocessing = any(i.name == preprocessing.IMAGE_INPUT for i in model.graph.input)
    return converted, {"opset": opset, "batch": batch, "with_preprocessing": with_preprocessing}


def _opset(model: onnx.ModelProto, path: Path) -> int:
    """The ONNX operator set ``model`` declares; a model that declares none is damaged."""
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if not versions:
        raise ExportError(f"{path} declares no ONNX operator set (its opset_import is empty): it is damaged or "
                          "not an export; export the model again")
    return versions[0]


def _check_interface(model: onnx.ModelProto, path: Path, converted: onnxnet.Converted) -> None:
    """The model's inputs and outputs are the deploy net's: each input by name with the net's shape
    (batch aside), each output of the net present."""
    given = {i.name: i for i in model.graph.input}
    for name, shape in converted.inputs.items():
        if name not in given and preprocessing.IMAGE_INPUT not in given:
            raise ExportError(f"{path} has no input {name!r}, which the deploy net takes: it is not an export of "
                              "this net")
        if name in given:
            dims = [d.dim_value or d.dim_param for d in given[name].type.tensor_type.shape.dim][1:]
            if [d for d in dims if isinstance(d, int)] and dims != list(shape):
                raise ExportError(f"{path}: its input {name!r} takes {'x'.join(map(str, dims))} per item, the deploy "
                                  f"net {'x'.join(map(str, shape))}: it is not an export of this net")
    outputs = {o.name for o in model.graph.output}
    missing = [name for name in converted.outputs if name not in outputs]
    if missing:
        raise ExportError(f"{path} has no graph output {missing[0]!r}, which the deploy net gives: it is damaged "
                          "or not an export of this net; export the model again")
