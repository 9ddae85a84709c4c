"""The Open Inference Protocol (KServe v2) messages: infer requests in, infer responses out.

The protocol (kserve/open-inference-protocol, ``specification/protocol/inference_rest.md``) sends
tensors as JSON (``data``: the values flattened in row-major order) or, with the binary tensor data
extension of NVIDIA Triton, as raw little-endian bytes after the JSON: the request then carries
``Inference-Header-Content-Length`` (the JSON's length) and each binary input says its size in
``parameters.binary_data_size``. ``BYTES`` elements are sent binary as a 4-byte little-endian length
and the bytes; in JSON as strings. The classification extension answers an output asked with
``parameters.classification: k`` as a ``BYTES`` tensor of the top k per item, each
``"value:index:label"``.

Parsing is pure and bounded: a request is refused (:class:`ProtocolError`, answered 400 with the
protocol's ``{"error": ...}``) for a malformed body, an unknown datatype, a negative or huge shape, a
byte count that does not match the shape, or a header length past the body — before any tensor is
allocated from it.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from caffetool.errors import CaffetoolError, ConfigError

HEADER = "inference-header-content-length"
MAX_ELEMENTS = 1 << 28  # a tensor's element count above this is refused before anything is allocated
DATATYPES = {  # the protocol's datatypes and numpy's
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
    "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64, "FP16": np.float16,
    "FP32": np.float32, "FP64": np.float64, "BYTES": np.object_,
}
NAMES = {np.dtype(t): name for name, t in DATATYPES.items() if name != "BYTES"}


class ProtocolError(ConfigError):
    """An infer request the protocol does not allow, or that does not fit the model."""


class NotJson(CaffetoolError):
    """An output JSON cannot carry: NaN and infinity are not JSON numbers (RFC 8259), and a bare
    ``NaN`` token breaks every strict client; binary data carries them."""


@dataclass
class Tensor:
    name: str
    datatype: str
    shape: list[int]
    data: np.ndarray  # of the datatype's numpy type; BYTES: an object array of bytes


@dataclass
class Wanted:
    """An output the client asked for, and how."""

    name: str
    binary: bool = False
    classification: int = 0  # k of the classification extension; 0: the tensor itself


@dataclass
class InferRequest:
    id: str | None
    inputs: list[Tensor]
    outputs: list[Wanted] = field(default_factory=list)
    binary_default: bool = False  # the request's ``parameters.binary_data_output``


def parse(body: bytes, header_length: str | None) -> InferRequest:
    """An infer request from its body and its ``Inference-Header-Content-Length`` (None: all JSON)."""
    json_end = len(body) if header_length is None else _header_length(header_length, len(body))
    try:
        message = json.loads(body[:json_end])
    except (UnicodeDecodeError, ValueError) as e:
        raise ProtocolError(f"the request's JSON cannot be read ({e})") from None
    except RecursionError:  # arrays nested deeper than Python's parser goes
        raise ProtocolError("the request's JSON cannot be read (nested too deep)") from None
    if not isinstance(message, dict) or not isinstance(message.get("inputs"), list) or not message["inputs"]:
        raise ProtocolError("an infer request is a JSON object with a non-empty 'inputs' list")
    binary = memoryview(body)[json_end:]
    offset, inputs = 0, []
    for i, item in enumerate(message["inputs"]):
        tensor, used = _input(item, i, binary[offset:])
        inputs.append(tensor)
        offset += used
    if offset != len(binary):
        raise ProtocolError(f"the body holds {len(binary) - offset} bytes after the inputs' binary data")
    params = _parameters(message, "the request")
    return InferRequest(_id(message.get("id")), inputs, [_wanted(o, i) for i, o in
                                                         enumerate(_list(message.get("outputs"), "'outputs'"))],
                        bool(params.get("binary_data_output", False)))


def response(model: str, version: str, request_id: str | None, outputs: list[tuple[Tensor, bool]]) -> \
        tuple[bytes, int | None]:
    """The infer response's body and, when any output is binary, the JSON's length for
    ``Inference-Header-Content-Length`` (None: an all-JSON body)."""
    described, blobs = [], []
    for tensor, binary in outputs:
        entry: dict[str, Any] = {"name": tensor.name, "datatype": tensor.datatype, "shape": tensor.shape}
        if binary:
            raw = _to_bytes(tensor)
            entry["parameters"] = {"binary_data_size": len(raw)}
            blobs.append(raw)
        else:
            entry["data"] = _to_json(tensor)
        described.append(entry)
    head: dict[str, Any] = {"model_name": model, "model_version": version, "outputs": described}
    if request_id is not None:
        head["id"] = request_id
    text = json.dumps(head, separators=(",", ":"), allow_nan=False).encode()
    return (text + b"".join(blobs), len(text)) if blobs else (text, None)


def classification(scores: np.ndarray, k: int, labels: list[str], name: str) -> Tensor:
    """The classification extension's answer for (batch, classes) scores: the top ``k`` of each item,
    ``"value:index:label"``, highest first (ties to the lower index)."""
    k = max(1, min(k, scores.shape[1]))
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    rows = [[f"{scores[b, c]:.6g}:{c}:{labels[c]}".encode() for c in order[b]] for b in range(len(scores))]
    data = np.empty((len(rows), k), dtype=object)
    data[:] = rows
    return Tensor(name, "BYTES", [len(rows), k], data)


def _header_length(text: str, body: int) -> int:
    try:
        length = int(text)
    except ValueError:
        raise ProtocolError(f"Inference-Header-Content-Length {text!r} is not a number") from None
    if not 0 < length <= body:
        raise ProtocolError(f"Inference-Header-Content-Length {length} is outside the body of {body} bytes")
    return length


def _input(item: Any, i: int, binary: memoryview) -> tuple[Tensor, int]:
    """Input ``i`` and the binary bytes it took."""
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        raise ProtocolError(f"input {i} is not an object with a 'name'")
    name, datatype = item["name"], item.get("datatype")
    if datatype not in DATATYPES:
        raise ProtocolError(f"input '{name}': datatype {datatype!r} is not one of {', '.join(DATATYPES)}")
    shape = _shape(item.get("shape"), name)
    count = math.prod(shape)
    size = _parameters(item, f"input '{name}'").get("binary_data_size")
    if size is not None:
        if not isinstance(size, int) or size < 0 or size > len(binary):
            raise ProtocolError(f"input '{name}': binary_data_size {size!r} is past the body's "
                                f"{len(binary)} binary bytes")
        return Tensor(name, datatype, shape, _from_bytes(bytes(binary[:size]), datatype, shape, count, name)), size
    if "data" not in item:
        raise ProtocolError(f"input '{name}' has neither 'data' nor parameters.binary_data_size")
    return Tensor(name, datatype, shape, _from_json(item["data"], datatype, shape, count, name)), 0


def _shape(shape: Any, name: str) -> list[int]:
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise ProtocolError(f"input '{name}': shape {shape!r} is not a list of whole numbers")
    if any(d < 0 for d in shape):
        raise ProtocolError(f"input '{name}': shape {shape} has a negative dimension")
    if any(d > MAX_ELEMENTS for d in shape) or math.prod(shape) > MAX_ELEMENTS:  # exact: Python's integers
        raise ProtocolError(f"input '{name}': shape {shape} holds more than {MAX_ELEMENTS:,} elements")
    return shape


def _from_bytes(raw: bytes, datatype: str, shape: list[int], count: int, name: str) -> np.ndarray:
    if datatype == "BYTES":
        items, at = [], 0
        while at < len(raw):
            if at + 4 > len(raw):
                raise ProtocolError(f"input '{name}': a BYTES element's length runs past its data")
            (length,) = struct.unpack_from("<I", raw, at)
            if at + 4 + length > len(raw):
                raise ProtocolError(f"input '{name}': a BYTES element of {length} bytes runs past its data")
            items.append(raw[at + 4: at + 4 + length])
            at += 4 + length
        if len(items) != count:
            raise ProtocolError(f"input '{name}': {len(items)} BYTES elements for shape {shape} ({count})")
        data = np.empty(count, dtype=object)
        data[:] = items
        return data.reshape(shape)
    dtype = np.dtype(DATATYPES[datatype]).newbyteorder("<")
    if len(raw) != count * dtype.itemsize:
        raise ProtocolError(f"input '{name}': {len(raw)} bytes of {datatype} for shape {shape}, which takes "
                            f"{count * dtype.itemsize}")
    return np.frombuffer(raw, dtype).astype(dtype.newbyteorder("="), copy=True).reshape(shape)


def _from_json(data: Any, datatype: str, shape: list[int], count: int, name: str) -> np.ndarray:
    flat = np.asarray(data, dtype=object).reshape(-1) if isinstance(data, list) else None
    if flat is None or flat.size != count:
        raise ProtocolError(f"input '{name}': 'data' holds {0 if flat is None else flat.size} values for shape "
                            f"{shape} ({count})")
    if datatype == "BYTES":
        if not all(isinstance(v, str) for v in flat):
            raise ProtocolError(f"input '{name}': BYTES data in JSON are strings")
        out = np.empty(count, dtype=object)
        out[:] = [v.encode() for v in flat]
        return out.reshape(shape)
    try:
        return np.array(flat.tolist(), dtype=DATATYPES[datatype]).reshape(shape)
    except (TypeError, ValueError, OverflowError):
        raise ProtocolError(f"input '{name}': 'data' are not all {datatype} values") from None


def _to_bytes(tensor: Tensor) -> bytes:
    if tensor.datatype == "BYTES":
        return b"".join(struct.pack("<I", len(v)) + v for v in tensor.data.reshape(-1))
    return np.ascontiguousarray(tensor.data, np.dtype(DATATYPES[tensor.datatype]).newbyteorder("<")).tobytes()


def _to_json(tensor: Tensor) -> list:
    if tensor.datatype == "BYTES":
        return [v.decode(errors="replace") for v in tensor.data.reshape(-1)]
    flat = tensor.data.reshape(-1)
    if flat.dtype.kind == "f" and not np.isfinite(flat).all():
        bad = int(flat.size - np.count_nonzero(np.isfinite(flat)))
        raise NotJson(f"output '{tensor.name}' holds {bad:,} values that are not finite (NaN or infinity), which "
                      "JSON cannot carry: ask for it as binary data (\"parameters\": {\"binary_data\": true}) to "
                      "receive them")
    return flat.tolist()


def _wanted(item: Any, i: int) -> Wanted:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        raise ProtocolError(f"output {i} is not an object with a 'name'")
    params = _parameters(item, f"output '{item['name']}'")
    k = params.get("classification", 0)
    if not isinstance(k, int) or isinstance(k, bool) or k < 0:
        raise ProtocolError(f"output '{item['name']}': classification {k!r} is not a count")
    return Wanted(item["name"], bool(params.get("binary_data", False)), k)


def _parameters(item: dict, what: str) -> dict:
    params = item.get("parameters", {})
    if not isinstance(params, dict):
        raise ProtocolError(f"{what}: 'parameters' is not an object")
    return params


def _list(value: Any, what: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ProtocolError(f"{what} is not a list")
    return value


def _id(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ProtocolError("'id' is not a string")
