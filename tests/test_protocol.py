"""Slow clients against the demo's HTTP protocol: a real uvicorn server in a thread, short deadlines.

The app is the demo's own (``create_app``) around a stand-in classifier: what is tested here is
how connections are held and dropped, not the model.
"""

from __future__ import annotations

import json
import logging
import select
import socket
import threading
import time
from types import SimpleNamespace

import httpx
import numpy as np
import pytest
import uvicorn

from caffetool.demo.protocol import DeadlineProtocol
from caffetool.demo.webapp import create_app
from caffetool.inference import preprocess
from caffetool.serving.catalog import ServedModel


class QuickDeadline(DeadlineProtocol):
    request_timeout = 1.0


def stand_in_classifier() -> SimpleNamespace:
    """What the server needs of a classifier, without a net: the connection handling is under test."""
    return SimpleNamespace(name="stand-in", kind="classification", describe=lambda: {"name": "stand-in"},
                           backend="none", blobs=("data", "prob"), labels=["one"], files=None, load_seconds=None,
                           max_pixels=preprocess.MAX_PIXELS,
                           prepare=lambda data: SimpleNamespace(blob=np.zeros((1, 1)), size=len(data)),
                           rows=lambda blob: np.ones((len(blob), 1), np.float32),
                           answer=lambda prepared, probs, top, want_input, ms: {"top": [], "bytes": prepared.size})


@pytest.fixture
def address(caplog):
    caplog.set_level(logging.INFO)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(create_app([ServedModel("stand-in", "1", stand_in_classifier())]), host="127.0.0.1", port=port, http=QuickDeadline,
                            timeout_keep_alive=1, log_config=None, lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    yield "127.0.0.1", port
    server.should_exit = True
    thread.join(10)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, errors[0].getMessage()


def trickle(address, head: bytes, every: float = 0.3, limit: float = 10.0) -> tuple[bytes, float]:
    """Send ``head``, then one byte every ``every`` seconds until the server closes the connection.

    Returns what the server sent and the seconds it took to close.
    """
    received = b""
    with socket.create_connection(address) as s:
        s.sendall(head)
        start = time.monotonic()
        while time.monotonic() - start < limit:
            readable, _, _ = select.select([s], [], [], every)
            if not readable:
                s.sendall(b"x")
                continue
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                return received, time.monotonic() - start
            received += chunk
    raise AssertionError(f"the server kept a trickling connection open for {limit} s")


def json_answer(raw: bytes) -> tuple[int, dict]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_a_connection_that_never_sends_is_closed_after_the_keep_alive_time(address):
    with socket.create_connection(address) as idle:
        start = time.monotonic()
        readable, _, _ = select.select([idle], [], [], 10)
        assert readable and idle.recv(1) == b""
    assert 0.8 < time.monotonic() - start < 5


def test_headers_sent_a_byte_at_a_time_are_cut_off_with_408(address):
    received, seconds = trickle(address, b"GET /healthz HTTP/1.1\r\nHost: demo\r\nX-Slow: ")
    assert 0.8 < seconds < 5
    assert json_answer(received) == (408, {"error": "request not received within 1 s"})


def test_a_body_sent_a_byte_at_a_time_is_cut_off_with_408(address):
    head = (b"POST /api/classify HTTP/1.1\r\nHost: demo\r\nContent-Type: image/png\r\n"
            b"Content-Length: 1000\r\n\r\n")
    received, seconds = trickle(address, head)
    assert 0.8 < seconds < 5
    assert json_answer(received) == (408, {"error": "request not received within 1 s"})


def test_prompt_requests_on_a_kept_alive_connection_are_answered(address):
    host, port = address
    with httpx.Client(base_url=f"http://{host}:{port}") as client:
        for _ in range(3):
            r = client.post("/api/classify", content=b"\0" * 2_000_000)
            assert r.status_code == 200 and r.json()["bytes"] == 2_000_000
            time.sleep(0.6)  # under the keep-alive time; together over the request deadline
        assert client.get("/healthz").json() == {"status": "ok", "model": "stand-in"}
