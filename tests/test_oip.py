"""The Open Inference Protocol's messages, against the real client: bodies made by ``tritonclient``'s
own encoder are parsed, and our responses are read by its own decoder (JSON and binary tensor data,
the classification extension); malformed bodies are refused with the reason."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tritonclient.http as triton

from caffetool.demo import oip


def request_body(x: np.ndarray, binary: bool, outputs: list | None = None, datatype: str = "FP32") -> tuple[bytes, str | None]:
    tensor = triton.InferInput("data", list(x.shape), datatype)
    tensor.set_data_from_numpy(x, binary_data=binary)
    body, json_size = triton.InferenceServerClient.generate_request_body([tensor], outputs=outputs, request_id="r1")
    return body, None if json_size is None else str(json_size)


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_tritonclient_requests_parse_to_the_same_tensor(binary):
    x = np.random.default_rng(0).random((3, 1, 28, 28)).astype(np.float32)
    wanted = [triton.InferRequestedOutput("prob", binary_data=binary, class_count=2)]
    request = oip.parse(*request_body(x, binary, wanted))
    assert request.id == "r1" and request.inputs[0].shape == [3, 1, 28, 28]
    assert request.inputs[0].data.dtype == np.float32 and np.array_equal(request.inputs[0].data, x)
    assert request.outputs == [oip.Wanted("prob", binary, 2)]


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_tritonclient_reads_our_responses(binary):
    probs = np.random.default_rng(1).random((2, 10)).astype(np.float32)
    labels = [f"class {i}" for i in range(10)]
    top = oip.classification(probs, 3, labels, "prob")
    body, header = oip.response("lenet", "1", "r1", [(oip.Tensor("prob", "FP32", [2, 10], probs), binary),
                                                     (oip.Tensor("top", top.datatype, top.shape, top.data), binary)])
    result = triton.InferenceServerClient.parse_response_body(body, header_length=header)
    assert result.get_response()["model_name"] == "lenet" and result.get_response()["id"] == "r1"
    assert np.array_equal(result.as_numpy("prob"), probs)
    first = [v.decode() if isinstance(v, bytes) else v for v in result.as_numpy("top")[0]]
    order = np.argsort(-probs[0])[:3]
    assert first == [f"{probs[0, c]:.6g}:{c}:class {c}" for c in order]


def test_bytes_inputs_in_binary():
    images = np.array([b"\x89PNG first", b"second"], dtype=object)
    tensor = triton.InferInput("image", [2], "BYTES")
    tensor.set_data_from_numpy(images, binary_data=True)
    body, size = triton.InferenceServerClient.generate_request_body([tensor])
    assert list(oip.parse(body, str(size)).inputs[0].data) == [b"\x89PNG first", b"second"]


def json_body(**inputs) -> bytes:
    return json.dumps({"inputs": [{"name": "data", **inputs}]}).encode()


@pytest.mark.parametrize("body, header, message", [
    (b"{not json", None, "the request's JSON cannot be read"),
    (b'{"inputs": []}', None, "non-empty 'inputs' list"),
    (json_body(datatype="FP128", shape=[1], data=[1]), None, "datatype 'FP128' is not one of"),
    (json_body(datatype="FP32", shape=[2, -1], data=[1]), None, "has a negative dimension"),
    (json_body(datatype="FP32", shape=[1 << 20, 1 << 20], data=[1]), None, "more than 268,435,456 elements"),
    (json_body(datatype="FP32", shape=[3], data=[1, 2]), None, "'data' holds 2 values for shape [3] (3)"),
    (json_body(datatype="FP32", shape=[2], data=["a", "b"]), None, "'data' are not all FP32 values"),
    (json_body(datatype="FP32", shape=[2], parameters={"binary_data_size": 8}) + b"\0" * 4, "67",
     "binary_data_size 8 is past the body's 4 binary bytes"),
    (json_body(datatype="FP32", shape=[2], parameters={"binary_data_size": 4}) + b"\0" * 4, "67",
     "4 bytes of FP32 for shape [2], which takes 8"),
    (json_body(datatype="FP32", shape=[1], data=[1]), "9999", "Inference-Header-Content-Length 9999 is outside"),
    (json_body(datatype="FP32", shape=[1], data=[1]), "ten", "is not a number"),
    (json_body(datatype="FP32", shape=[1]), None, "has neither 'data' nor parameters.binary_data_size"),
], ids=["not-json", "no-inputs", "datatype", "negative", "huge", "count", "values", "past-body", "byte-count",
        "header-past-body", "header-text", "no-data"])
def test_malformed_requests_are_refused_with_the_reason(body, header, message):
    if header == "67":
        header = str(body.index(b"}]}") + 3)
    with pytest.raises(oip.ProtocolError) as caught:
        oip.parse(body, header)
    assert message in str(caught.value)
