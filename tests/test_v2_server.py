"""``demo.serve`` as an Open Inference Protocol server, driven by NVIDIA Triton's own client
(``tritonclient.http``) unchanged: health, metadata, infer with JSON and binary tensors and encoded
images, the classification extension, concurrent requests batched, ``/metrics`` scraped; the
answers equal pycaffe's on the run's test records."""

from __future__ import annotations

import zlib

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from caffetool.demo.webapp import DEFAULT_MAX_BODY
from caffetool.inference import modelfiles, records

from .conftest import same_answers
from .processes import stop
from .test_demo import free_port, start_server

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def v2_server(trained_run):
    port = free_port()
    child = start_server(["--run", str(trained_run), "--max-batch", "16", "--max-queue-delay-us", "2000"], port)
    assert child.poll() is None, child.stderr.read()
    yield f"127.0.0.1:{port}"
    stop(child)


@pytest.fixture(scope="module")
def test_records(caffe, trained_run):
    src = records.source(trained_run, "test", caffe.proto.caffe_pb2)
    batch = next(records.batches(src, caffe.proto.caffe_pb2, 64,
                                 (1, 28, 28)))
    net = caffe.Net(str(trained_run / "deploy.prototxt"), str(modelfiles.from_run(trained_run).weights),
                    caffe.TEST)
    probs = []
    for row in batch.blob:  # each image alone, as pycaffe answers a single request
        net.blobs["data"].reshape(1, 1, 28, 28)
        net.blobs["data"].data[...] = row
        probs.append(net.forward()["prob"][0].copy())
    return batch.blob, np.stack(probs)


def test_health_and_metadata(v2_server, trained_run):
    client = triton.InferenceServerClient(v2_server)
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready(trained_run.name)
    assert set(client.get_server_metadata()["extensions"]) >= {"classification", "binary_tensor_data"}
    meta = client.get_model_metadata(trained_run.name)
    assert meta["inputs"][0] == {"name": "data", "datatype": "FP32", "shape": [-1, 1, 28, 28]}
    assert meta["outputs"] == [{"name": "prob", "datatype": "FP32", "shape": [-1, 10]}]
    with pytest.raises(InferenceServerException, match="no model named 'other'"):
        client.get_model_metadata("other")


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_infer_equals_pycaffe_alone_even_when_batched(v2_server, trained_run, test_records, binary,
                                                     rows_independent_of_batch):
    blob, expected = test_records
    client = triton.InferenceServerClient(v2_server, concurrency=16)
    handles = []
    for row in blob:
        tensor = triton.InferInput("data", [1, 1, 28, 28], "FP32")
        tensor.set_data_from_numpy(row[None], binary_data=binary)
        handles.append(client.async_infer(trained_run.name, [tensor],
                                          outputs=[triton.InferRequestedOutput("prob", binary_data=binary)]))
    got = np.stack([h.get_result().as_numpy("prob")[0] for h in handles])
    assert same_answers(got, expected, rows_independent_of_batch)  # the caffe backend, batched or not
    top = client.infer(trained_run.name, [_tensor(blob[:3], binary)],
                       outputs=[triton.InferRequestedOutput("prob", binary_data=binary, class_count=2)])
    first = [v.decode() if isinstance(v, bytes) else v for v in top.as_numpy("prob")[0]]
    labels = (trained_run / "labels.txt").read_text().split("\n")
    order = np.argsort(-expected[0])[:2]
    assert first == [f"{expected[0, c]:.6g}:{c}:{labels[c]}" for c in order]


def _tensor(x: np.ndarray, binary: bool) -> triton.InferInput:
    tensor = triton.InferInput("data", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=binary)
    return tensor


def test_refusals_are_the_protocols_errors_and_metrics_scrape(v2_server, trained_run):
    base = f"http://{v2_server}/v2/models/{trained_run.name}/infer"
    blank = httpx.post(base, json={"inputs": [{"name": "data", "datatype": "FP32", "shape": [64, 1, 28, 28],
                                               "data": [0.0] * 64 * 784}]})
    assert blank.status_code == 200  # 64 images inferred here, whichever tests ran before
    bad = httpx.post(base, json={"inputs": [{"name": "data", "datatype": "FP32", "shape": [1, 1, 28, 27],
                                             "data": [0.0] * 756}]})
    assert bad.status_code == 400 and "input 'data' is FP32 of shape [n, 1, 28, 28]" in bad.json()["error"]
    past = httpx.post(base, content=b'{"inputs": []}', headers={"Inference-Header-Content-Length": "999"})
    assert past.status_code == 400 and "outside the body" in past.json()["error"]
    scraped = httpx.get(f"http://{v2_server}/metrics").text
    count = next(float(line.split()[-1]) for line in scraped.splitlines()
                 if line.startswith("nv_inference_count_total{"))
    passes = next(float(line.split()[-1]) for line in scraped.splitlines()
                  if line.startswith("nv_inference_exec_count_total{"))
    assert count >= 64 and passes <= count
    assert 'caffetool_http_requests_total{route="/v2/models/{model}/infer",status="400"} 2.0' in scraped


def test_a_request_over_the_pixel_budget_is_refused_before_any_decoding(v2_server, trained_run):
    """64 all-black 6000x6000 PNGs (44 KB each, every one under the per-image limit) in one request:
    413 from the headers alone, and the server answers the next request as usual."""
    import cv2

    black = cv2.imencode(".png", np.zeros((6000, 6000), np.uint8))[1].tobytes()
    images = triton.InferInput("image", [64], "BYTES")
    images.set_data_from_numpy(np.array([black] * 64, dtype=object), binary_data=True)
    body, size = triton.InferenceServerClient.generate_request_body([images])
    answer = httpx.post(f"http://{v2_server}/v2/models/{trained_run.name}/infer", content=body,
                        headers={"Inference-Header-Content-Length": str(size)}, timeout=60)
    assert answer.status_code == 413, answer.text
    assert "64 images hold 2,304,000,000 pixels in all, over the limit of" in answer.json()["error"]
    small = cv2.imencode(".png", np.zeros((28, 28), np.uint8))[1].tobytes()
    page = httpx.post(f"http://{v2_server}/api/classify", files=[("image", ("a.png", small, "image/png"))] * 2)
    assert page.status_code == 200 and len(page.json()) == 2
    many = httpx.post(f"http://{v2_server}/api/classify", files=[("image", ("big.png", black, "image/png"))] * 2)
    assert many.status_code == 413 and "2 images hold 72,000,000 pixels" in many.json()["error"]


def test_outputs_that_are_not_finite_are_refused_in_json_and_sent_in_binary(v2_server, trained_run):
    """Inputs of 1e38 overflow LeNet to NaN: a JSON answer would need bare NaN tokens (not JSON), so it
    is an error that says how to get them; the binary answer carries them."""
    x = np.full((1, 1, 28, 28), 1e38, np.float32)
    client = triton.InferenceServerClient(v2_server)
    with pytest.raises(InferenceServerException, match=r"holds 10 values that are not finite .*binary_data"):
        client.infer(trained_run.name, [_tensor(x, False)], outputs=[triton.InferRequestedOutput("prob", binary_data=False)])
    got = client.infer(trained_run.name, [_tensor(x, True)], outputs=[triton.InferRequestedOutput("prob", binary_data=True)])
    assert not np.isfinite(got.as_numpy("prob")).all()
    client.close()


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_requests_as_tritonclient_sends_them(v2_server, trained_run, test_records, algorithm,
                                                        rows_independent_of_batch):
    """tritonclient's ``request_compression_algorithm``: the body decompressed (within --max-body once
    decompressed) answers as the plain request; an encoding the server does not decode is refused."""
    blob, expected = test_records
    client = triton.InferenceServerClient(v2_server)
    got = client.infer(trained_run.name, [_tensor(blob[:4], True)], request_compression_algorithm=algorithm,
                       outputs=[triton.InferRequestedOutput("prob", binary_data=True)])
    assert same_answers(got.as_numpy("prob"), expected[:4], rows_independent_of_batch)
    client.close()
    base = f"http://{v2_server}/v2/models/{trained_run.name}/infer"
    odd = httpx.post(base, content=b"xx", headers={"Content-Encoding": "br"})
    assert odd.status_code == 415 and "Content-Encoding 'br' is not supported" in odd.json()["error"]
    broken = httpx.post(base, content=b"not gzip", headers={"Content-Encoding": "gzip"})
    assert broken.status_code == 400 and "not valid gzip data" in broken.json()["error"]
    bomb = zlib.compress(b"\0" * (DEFAULT_MAX_BODY + 1))  # well under the limit as sent
    assert len(bomb) < DEFAULT_MAX_BODY // 100
    expanded = httpx.post(base, content=bomb, headers={"Content-Encoding": "deflate"})
    assert expanded.status_code == 413 and "once decompressed" in expanded.json()["error"]
