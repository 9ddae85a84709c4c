"""The Open Inference Protocol server (``demo.serve``, dynamic batching on) under abuse, over real HTTP:

- malformed infer bodies (one table) are each answered 400 with a JSON error naming the problem, and
  a good request afterwards, on the same connection and from ``tritonclient.http``, is answered as before;
- clients that vanish mid-batch (socket closed or reset after the request, or halfway through the
  body; a client that gives up waiting) do not change the answers of the requests batched with them,
  those that leave while queued are dropped before their pass (``caffetool_requests_dropped_total``);
  the metrics stay consistent and the server's log holds no traceback;
- the accuracy of the run's first test records sent through ``/v2`` infer equals the real ``caffe
  test``'s, batch for batch;
- a 60 s soak of 16 concurrent clients: no error, every answer right, the server's memory flat.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass

import httpx
import numpy as np
import psutil
import pytest
import tritonclient.http as triton

from caffetool import glog
from caffetool.inference import modelfiles, records
from caffetool.train import caffe_commands

from .conftest import same_answers
from .processes import stop
from .test_demo import free_port, start_server

pytestmark = pytest.mark.engine

SHAPE = (1, 28, 28)
EVAL_IMAGES = 500  # test records checked against caffe test
SOAK_SECONDS = 60
SOAK_CLIENTS = 16
RSS_GROWTH = 50 << 20


@dataclass
class Server:
    address: str
    model: str
    pid: int
    log: list[str]  # its stdout and stderr lines so far

    @property
    def infer_url(self) -> str:
        return f"http://{self.address}/v2/models/{self.model}/infer"


@pytest.fixture(scope="module")
def server(trained_run):
    port = free_port()
    child = start_server(["--run", str(trained_run), "--max-batch", "16", "--max-queue-delay-us", "2000"], port)
    try:
        assert child.poll() is None, child.stderr.read()
        log: list[str] = []
        drains = [threading.Thread(target=log.extend, args=(pipe,), daemon=True)  # the pipes never fill
                  for pipe in (child.stdout, child.stderr)]
        for drain in drains:
            drain.start()
        yield Server(f"127.0.0.1:{port}", trained_run.name, child.pid, log)
    finally:
        stop(child)


@pytest.fixture(scope="module")
def test_set(caffe, trained_run):
    """The first test records (a whole number of caffe test's batches, EVAL_IMAGES or more), as the net's
    inputs, with their labels and the batch size."""
    src = records.source(trained_run, "test", caffe.proto.caffe_pb2)
    iterations = -(-EVAL_IMAGES // src.batch_size)
    found = records.batches(src, caffe.proto.caffe_pb2, src.batch_size,
                            SHAPE)
    taken = [next(found) for _ in range(iterations)]
    return np.concatenate([b.blob for b in taken]), np.concatenate([b.labels for b in taken]), src.batch_size


@pytest.fixture(scope="module")
def alone(server, test_set):
    """The server's answers for the first 16 test images, each asked alone (before any abuse)."""
    blob = test_set[0][:16]
    client = triton.InferenceServerClient(server.address)
    answers = np.stack([client.infer(server.model, [tensor(row[None])]).as_numpy("prob")[0] for row in blob])
    client.close()
    return blob, answers


def tensor(x: np.ndarray) -> triton.InferInput:
    t = triton.InferInput("data", list(x.shape), "FP32")
    t.set_data_from_numpy(x, binary_data=True)
    return t


def binary_request(x: np.ndarray) -> tuple[bytes, dict[str, str]]:
    """A binary infer request for rows ``x``, as tritonclient writes it: body and headers."""
    wanted = [triton.InferRequestedOutput("prob", binary_data=True)]
    body, json_size = triton.InferenceServerClient.generate_request_body([tensor(x)], outputs=wanted)
    return body, {"Inference-Header-Content-Length": str(json_size), "Content-Type": "application/octet-stream"}


def probabilities(response: httpx.Response) -> np.ndarray:
    assert response.status_code == 200, response.text
    header = response.headers.get("inference-header-content-length")
    result = triton.InferenceServerClient.parse_response_body(response.content,
                                                              header_length=int(header) if header else None)
    return result.as_numpy("prob")


def metrics(server: Server) -> dict[str, float]:
    """The scrape's samples, by name with labels as written."""
    text = httpx.get(f"http://{server.address}/metrics").text
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def sample(scraped: dict[str, float], name: str) -> float:
    return next((v for k, v in scraped.items() if k == name or k.startswith(name + "{")), 0.0)


# 1. Malformed bodies -------------------------------------------------------------------------------

IMAGE = [0.0] * 784
BINARY = {"binary_data_size": 3136}  # one image's FP32 bytes


def data(shape: list[int], datatype: str = "FP32", name: str = "data", **fields) -> dict:
    return {"name": name, "datatype": datatype, "shape": shape, **fields}


def message(*inputs: dict, **extra) -> bytes:
    return json.dumps({"inputs": list(inputs), **extra}).encode()


def nested(depth: int) -> bytes:
    return b'{"inputs": [{"name": "data", "datatype": "FP32", "shape": [1], "data": ' + b"[" * depth + \
        b"]" * depth + b"}]}"


def case(name: str, head: bytes, tail: bytes, header: str | None, named: str):
    """One malformed request: its JSON part, binary tail, Inference-Header-Content-Length (None: none;
    "json": the JSON's length), and what the error names."""
    return pytest.param(head, tail, header, named, id=name)


MALFORMED = [
    case("not-json", b"{not json", b"", None, "the request's JSON cannot be read"),
    case("not-object", b"[1, 2]", b"", None, "a JSON object with a non-empty 'inputs' list"),
    case("empty-inputs", message(), b"", None, "a JSON object with a non-empty 'inputs' list"),
    case("unknown-datatype", message(data([1, 1, 28, 28], "FP128", data=IMAGE)), b"", None,
         "datatype 'FP128' is not one of"),
    case("wrong-datatype", message(data([1, 1, 28, 28], "FP64", data=IMAGE)), b"", None,
         "input 'data' is FP32 of shape [n, 1, 28, 28], n 1 or more; got FP64 [1, 1, 28, 28]"),
    case("wrong-shape", message(data([1, 1, 28, 27], data=IMAGE[:756])), b"", None,
         "input 'data' is FP32 of shape [n, 1, 28, 28], n 1 or more; got FP32 [1, 1, 28, 27]"),
    case("flat-shape", message(data([784], data=IMAGE)), b"", None, "got FP32 [784]"),
    case("no-images", message(data([0, 1, 28, 28], data=[])), b"", None, "n 1 or more; got FP32 [0, 1, 28, 28]"),
    case("negative-dim", message(data([-1, 1, 28, 28], data=IMAGE)), b"", None,
         "shape [-1, 1, 28, 28] has a negative dimension"),
    case("huge-shape", message(data([1 << 20, 1 << 20], data=[0.0])), b"", None, "more than 268,435,456 elements"),
    case("count", message(data([1, 1, 28, 28], data=IMAGE[:783])), b"", None,
         "'data' holds 783 values for shape [1, 1, 28, 28] (784)"),
    case("values", message(data([1, 1, 28, 28], data=["x"] * 784)), b"", None, "'data' are not all FP32 values"),
    case("binary-short", message(data([1, 1, 28, 28], parameters={"binary_data_size": 3132})), b"\0" * 3132, "json",
         "3132 bytes of FP32 for shape [1, 1, 28, 28], which takes 3136"),
    case("binary-past-body", message(data([1, 1, 28, 28], parameters=BINARY)), b"\0" * 100, "json",
         "binary_data_size 3136 is past the body's 100 binary bytes"),
    case("binary-extra", message(data([1, 1, 28, 28], parameters=BINARY)), b"\0" * 3140, "json",
         "the body holds 4 bytes after the inputs' binary data"),
    case("header-past-body", message(data([1, 1, 28, 28], parameters=BINARY)), b"\0" * 3136, "99999",
         "Inference-Header-Content-Length 99999 is outside the body"),
    case("header-zero", message(data([1, 1, 28, 28], data=IMAGE)), b"", "0",
         "Inference-Header-Content-Length 0 is outside the body"),
    case("header-text", message(data([1, 1, 28, 28], data=IMAGE)), b"", "ten", "'ten' is not a number"),
    case("two-inputs", message(data([1, 1, 28, 28], data=IMAGE), data([1, 1, 28, 28], data=IMAGE)), b"", None,
         "give one input"),
    case("other-input", message(data([1, 1, 28, 28], name="pixels", data=IMAGE)), b"", None, "got 'pixels'"),
    case("other-output", message(data([1, 1, 28, 28], data=IMAGE), outputs=[{"name": "ip2"}]), b"", None,
         "output 'ip2' is not one of the model's (prob)"),
    case("huge-dim-times-zero", message(data([1 << 64, 0], data=[])), b"", None,
         "holds more than 268,435,456 elements"),
    case("deep-json", nested(100_000), b"", None, "the request's JSON cannot be read (nested too deep)"),
    case("more-rows-than-the-queue", message(data([257, 1, 28, 28], parameters={"binary_data_size": 257 * 3136})),
         b"\0" * (257 * 3136), "json", "257 images in one request, more than the queue holds (256, --max-queue)"),
]


@pytest.mark.parametrize("head, tail, header, named", MALFORMED)
def test_malformed_bodies_are_400_naming_the_problem(server, alone, head, tail, header, named):
    headers = {} if header is None else {"Inference-Header-Content-Length": str(len(head)) if header == "json"
                                         else header}
    good, good_headers = binary_request(alone[0][:1])
    with httpx.Client(timeout=30) as client:
        refused = client.post(server.infer_url, content=head + tail, headers=headers)
        assert refused.status_code == 400 and refused.headers["content-type"] == "application/json", refused.text
        assert named in refused.json()["error"]
        # the same kept-alive connection then serves a good request, unchanged
        again = client.post(server.infer_url, content=good, headers=good_headers)
    assert np.array_equal(probabilities(again), alone[1][:1])


def test_after_the_barrage_answers_are_unchanged_and_the_server_ready(server, alone, rows_independent_of_batch):
    blob, expected = alone
    client = triton.InferenceServerClient(server.address)
    got = client.infer(server.model, [tensor(blob[:5])]).as_numpy("prob")
    client.close()
    assert same_answers(got, expected[:5], rows_independent_of_batch)
    assert httpx.get(f"http://{server.address}/v2/health/ready").status_code == 200


# 2. Clients that vanish mid-batch ------------------------------------------------------------------

def vanish(server: Server, body: bytes, headers: dict[str, str], how: str) -> None:
    """Send an infer request and leave without reading the answer: closing (FIN) or resetting (RST) the
    socket after the whole request, closing it halfway through the body, or giving up after 1 ms."""
    if how == "give-up":
        try:
            httpx.post(server.infer_url, content=body, headers=headers, timeout=httpx.Timeout(5, read=0.001))
        except httpx.ReadTimeout:
            pass
        return
    host, port = server.address.split(":")
    head = "".join(f"{k}: {v}\r\n" for k, v in {**headers, "Content-Length": len(body)}.items())
    request = f"POST /v2/models/{server.model}/infer HTTP/1.1\r\nHost: {server.address}\r\n{head}\r\n".encode() + body
    with socket.create_connection((host, int(port))) as s:
        if how == "reset":
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.sendall(request[: len(request) - len(body) // 2] if how == "half-body" else request)


def settled(server: Server) -> dict[str, float]:
    """The metrics once no forward pass is left to finish (two scrapes alike, within 10 s)."""
    before, deadline = metrics(server), time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(0.3)
        now = metrics(server)
        if sample(now, "nv_inference_count_total") == sample(before, "nv_inference_count_total"):
            return now
        before = now
    raise AssertionError("the server kept inferring for 10 s after its clients had gone")


def test_clients_vanishing_mid_batch_change_no_answer_and_are_dropped_if_queued(server, alone,
                                                                               rows_independent_of_batch):
    blob, expected = alone
    ways = ["close", "reset", "half-body", "give-up"] * 2
    rogue_body, rogue_headers = binary_request(blob[:4])
    # a client that stays for its 200 images keeps the model busy while the others queue, so they are
    # batched and the vanishing ones leave while queued
    blocker_body, blocker_headers = binary_request(np.resize(blob, (200, *SHAPE)))
    before, logged = settled(server), len(server.log)
    rounds, good = 5, 15
    goods = [binary_request(blob[i: i + 1]) for i in range(good)]

    async def answered_together() -> np.ndarray:
        async with httpx.AsyncClient(timeout=60) as client:
            responses = await asyncio.gather(*(client.post(server.infer_url, content=body, headers=headers)
                                               for body, headers in goods))
        return np.concatenate([probabilities(r) for r in responses])

    for _ in range(rounds):
        blocker = threading.Thread(target=httpx.post, args=(server.infer_url,),
                                   kwargs={"content": blocker_body, "headers": blocker_headers, "timeout": 60})
        blocker.start()
        time.sleep(0.005)  # its body in first

        def leave() -> None:
            for how in ways:
                vanish(server, rogue_body, rogue_headers, how)
        rogues = threading.Thread(target=leave)
        rogues.start()
        got = asyncio.run(answered_together())
        rogues.join()
        blocker.join()
        assert same_answers(got, expected[:good], rows_independent_of_batch)  # as each was answered alone
    after = settled(server)
    assert httpx.get(f"http://{server.address}/v2/health/ready").status_code == 200

    def delta(name: str) -> float:
        return sample(after, name) - sample(before, name)
    answered, rogue_rows = rounds * (good + 200), rounds * len(ways) * 4  # a vanished client's may be inferred
    assert answered <= delta("nv_inference_count_total") <= answered + rogue_rows
    assert delta("caffetool_requests_dropped_total") >= 1  # some left while queued: dropped before their pass
    assert delta("caffetool_batch_size_sum") == delta("nv_inference_count_total")
    assert delta("caffetool_batch_size_count") == delta("nv_inference_exec_count_total")
    assert delta("nv_inference_exec_count_total") < delta("nv_inference_request_success_total")  # batched
    assert not [line for line in server.log[logged:] if "Traceback" in line], "".join(server.log[logged:])


# 3. The same accuracy as caffe test ----------------------------------------------------------------

BATCH_LINE = re.compile(r"^Batch (\d+), accuracy = ([-+.\deE]+)$")


def test_accuracy_through_v2_equals_caffe_test(engine, server, trained_run, test_set):
    blob, labels, batch_size = test_set
    weights = modelfiles.from_run(trained_run).weights
    theirs = caffe_commands.caffe_test(engine, trained_run, weights, len(blob) // batch_size, [])
    per_batch = [float(m.group(2)) for line in glog.lines(theirs.log) if (m := BATCH_LINE.match(line.message))]
    assert len(per_batch) == len(blob) // batch_size
    client = triton.InferenceServerClient(server.address, concurrency=16)
    per_request = 5  # several images a request, several requests a forward pass
    handles = [client.async_infer(server.model, [tensor(blob[i: i + per_request])])
               for i in range(0, len(blob), per_request)]
    predicted = np.concatenate([h.get_result().as_numpy("prob") for h in handles]).argmax(axis=1)
    client.close()
    hits = (predicted == labels).reshape(-1, batch_size).sum(axis=1)
    assert [float(f"{h / batch_size:g}") for h in hits] == per_batch  # Caffe prints %g's 6 digits
    assert float(f"{hits.sum() / len(blob):g}") == theirs.outputs["accuracy"]


# 4. Soak -----------------------------------------------------------------------------------------

async def soak(server: Server, requests: list[tuple[bytes, dict[str, str]]], expected: np.ndarray,
               seconds: float, bitwise: bool) -> tuple[int, list[str]]:
    """SOAK_CLIENTS clients, each sending one-image requests in turn for ``seconds``: requests answered
    right, and what went wrong."""
    done, errors = [0], []
    deadline = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=SOAK_CLIENTS, max_keepalive_connections=SOAK_CLIENTS)
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        async def one(k: int) -> None:
            i = k
            while time.monotonic() < deadline:
                body, headers = requests[i % len(requests)]
                try:
                    got = probabilities(await client.post(server.infer_url, content=body, headers=headers))
                    if same_answers(got[0], expected[i % len(requests)], bitwise):
                        done[0] += 1
                    else:
                        errors.append(f"request {i}: wrong answer")
                except (httpx.HTTPError, AssertionError) as e:
                    errors.append(f"request {i}: {type(e).__name__} {e}"[:300])
                i += SOAK_CLIENTS
        await asyncio.gather(*(one(k) for k in range(SOAK_CLIENTS)))
    return done[0], errors


def rss(pid: int) -> int:
    process = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [process, *process.children(recursive=True)])


@pytest.mark.slow
def test_soak_16_clients_for_a_minute(server, alone, record_property, rows_independent_of_batch):
    blob, expected = alone
    requests = [binary_request(row[None]) for row in blob]
    warm, errors = asyncio.run(soak(server, requests, expected, 5, rows_independent_of_batch))
    assert warm > 0 and not errors, errors[:5]
    warmed = rss(server.pid)
    done, errors = asyncio.run(soak(server, requests, expected, SOAK_SECONDS, rows_independent_of_batch))
    grown = rss(server.pid) - warmed
    record_property("soak_requests", done)
    record_property("rss_growth_bytes", grown)
    print(f"soak: {done} requests in {SOAK_SECONDS} s ({done / SOAK_SECONDS:.0f}/s), RSS {warmed / 2**20:.1f} MiB "
          f"after warm-up, {grown / 2**20:+.1f} MiB after the soak")
    assert not errors, f"{len(errors)} errors of {done + len(errors)}: {errors[:5]}"
    assert grown < RSS_GROWTH
    assert httpx.get(f"http://{server.address}/v2/health/ready").status_code == 200
