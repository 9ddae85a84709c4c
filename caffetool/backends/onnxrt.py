"""The ``onnxruntime`` backend: an ONNX export (a file, or a model in memory) as a session, for the
export's verification, the served exports and the ``onnxruntime`` backend; the one place that runs a
session.

Sessions run on the CPU provider with onnxruntime's full graph optimisations (what a user of the
model gets). A blob the exported model does not output (the scores a Softmax reads, which
``evaluate`` judges correctness on) is added as an output of the session's copy of the model: every
Caffe blob keeps its name in the export.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx

from caffetool.backends.devices import PycaffeDevice
from caffetool.backends.loaded import LoadedModel, ModelSource
from caffetool.errors import ExportError

READS = "onnx"
PROVIDERS = ["CPUExecutionProvider"]


def load(source: ModelSource, _device: PycaffeDevice, outputs: Sequence[str]) -> LoadedModel:
    return model_of(source.path, outputs)


def model_of(model: onnx.ModelProto | Path, outputs: Sequence[str] = ()) -> LoadedModel:
    """``model`` on onnxruntime, giving ``outputs`` (by default, the graph's own)."""
    session = session_of(model, list(outputs))
    wanted = tuple(outputs) or tuple(o.name for o in session.get_outputs())

    def forward(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(wanted, run(session, list(wanted), feeds)))

    return LoadedModel("onnxruntime", tuple(i.name for i in session.get_inputs()), wanted, forward, session)


def read_model(path: Path) -> onnx.ModelProto:
    """The ONNX model in ``path``, or an error that names the file."""
    try:
        return onnx.load(str(path))
    except Exception as e:
        raise ExportError(f"{path} cannot be read as an ONNX model ({str(e).strip().splitlines()[0]})") from None


def session_of(model: onnx.ModelProto | Path, outputs: list[str] = ()):
    """An ``InferenceSession`` of ``model`` (in memory or a file) that also outputs ``outputs``."""
    import onnxruntime as ort

    if isinstance(model, Path):
        model = read_model(model)
    present = {o.name for o in model.graph.output}
    wanted = [name for name in outputs if name not in present]
    if wanted:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        copy.graph.output.extend(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
                                  for name in wanted)
        model = copy
    options = ort.SessionOptions()
    options.log_severity_level = 3  # warnings about unused initializers are not the user's business
    try:
        return ort.InferenceSession(model.SerializeToString(), options, providers=PROVIDERS)
    except Exception as e:
        raise ExportError(f"onnxruntime cannot run the model: {str(e).strip().splitlines()[0]}") from None


def run(session, outputs: list[str], feeds: dict) -> list:
    """``session.run``, its failure (an input of the wrong shape, an output the graph lacks) an error
    that says so rather than onnxruntime's own."""
    try:
        return session.run(outputs, feeds)
    except Exception as e:
        raise ExportError(f"onnxruntime cannot run the model on the inputs: {str(e).strip().splitlines()[0]}") from None
