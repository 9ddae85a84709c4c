"""Prometheus metrics of the demo server, scraped at ``GET /metrics`` (``prometheus-client``).

What operators of NVIDIA Triton watch, under Triton's names where Triton has one: requests by route
and status (``caffetool_http_requests_total``), request latency by route, time in the batcher's queue,
the batch size of each forward pass, and — labelled ``model`` and ``version`` as Triton's are —
``nv_inference_request_success`` (requests answered), ``nv_inference_count`` (images inferred) against
``nv_inference_exec_count`` (forward passes: their ratio is the mean batch size), the requests
dropped because their client left before their pass, and the model's load time. Each app has its own
registry, so several apps in one process do not share counts. Routes are labelled by their template
(``/v2/models/{model}/infer``), an unknown path as ``other``, so a client cannot grow the label set.

With ``--workers N`` each worker process counts what it served, and a scrape is answered by whichever
worker takes the connection: alone, its counts would go back and forth between scrapes. There the
server runs prometheus-client's multiprocess mode (:func:`shared_folder`, set before the workers
start): every worker writes its series to files in one folder, and each scrape adds up all of them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.requests import Request
from starlette.responses import Response

FOLDER_PREFIX = "caffetool-metrics-"
SHARED = "PROMETHEUS_MULTIPROC_DIR"  # prometheus-client's multiprocess mode: read when it is imported
LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True)
class ModelObserver:
    """One model version's series, as its batcher reports them."""

    batch: Any
    queue: Any
    executions: Any
    inferences: Any
    success: Any
    dropped_requests: Any

    def passed(self, images: int, waits: list[float]) -> None:
        """One forward pass of ``images`` for requests that waited ``waits`` seconds."""
        self.batch.observe(images)
        self.executions.inc()
        self.inferences.inc(images)
        self.success.inc(len(waits))
        for wait in waits:
            self.queue.observe(wait)

    def dropped(self, requests: int) -> None:
        self.dropped_requests.inc(requests)


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        names = ["model", "version"]
        self.requests = Counter("caffetool_http_requests", "HTTP requests by route and status",
                                ["route", "status"], registry=r)
        self.latency = Histogram("caffetool_http_request_duration_seconds", "time to answer, by route", ["route"],
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.queue = Histogram("caffetool_queue_duration_seconds", "time a request waited for its forward pass",
                               names, buckets=LATENCY_BUCKETS, registry=r)
        self.batch = Histogram("caffetool_batch_size", "images in each forward pass", names, buckets=BATCH_BUCKETS,
                               registry=r)
        self.success = Counter("nv_inference_request_success", "inference requests answered", names, registry=r)
        self.inferences = Counter("nv_inference_count", "images inferred", names, registry=r)
        self.executions = Counter("nv_inference_exec_count", "forward passes", names, registry=r)
        self.load = Gauge("caffetool_model_load_seconds", "time to load and check the model", names, registry=r,
                          multiprocess_mode="max")  # each worker loads the model: the slowest load
        self.dropped = Counter("caffetool_requests_dropped", "requests whose client left before their forward pass",
                               names, registry=r)

    def observer(self, model: str, version: str, load_seconds: float | None = None) -> ModelObserver:
        """What a model version's batcher reports to; its load time is recorded now."""
        labels = {"model": model, "version": version}
        if load_seconds is not None:
            self.load.labels(**labels).set(load_seconds)
        return ModelObserver(self.batch.labels(**labels), self.queue.labels(**labels),
                             self.executions.labels(**labels), self.inferences.labels(**labels),
                             self.success.labels(**labels), self.dropped.labels(**labels))

    async def endpoint(self, request: Request) -> Response:
        return Response(generate_latest(_scraped(self.registry)), media_type=CONTENT_TYPE_LATEST)


def _scraped(registry: CollectorRegistry) -> CollectorRegistry:
    """``registry``, or with several workers (:data:`SHARED` set) every worker's series added up."""
    folder = os.environ.get(SHARED)
    if not folder:
        return registry
    from prometheus_client import multiprocess  # noqa: PLC0415

    every = CollectorRegistry()
    multiprocess.MultiProcessCollector(every, path=folder)
    return every


@contextlib.contextmanager
def shared_folder() -> Iterator[str]:
    """A new folder where the workers about to start write their series (:data:`SHARED` set to it in
    this process's environment, which they inherit); removed, and the variable unset, afterwards. A
    server killed outright cannot remove its own: the next one removes those of servers gone."""
    _remove_orphans()
    folder = tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-")
    os.environ[SHARED] = folder
    try:
        yield folder
    finally:
        os.environ.pop(SHARED, None)
        shutil.rmtree(folder, ignore_errors=True)


class Counting:
    """ASGI middleware counting every HTTP request by its route's template and its status."""

    def __init__(self, app: Any, metrics: ServerMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), [500]

        async def sending(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)
        try:
            await self.app(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", "other")  # the router fills in the matched route
            self.metrics.requests.labels(route, str(status[0])).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - start)


def _remove_orphans() -> None:
    """Remove the metrics folders of servers no longer running (their pid is in the name)."""
    for folder in Path(tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*-*"):
        pid = folder.name[len(FOLDER_PREFIX):].split("-", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            continue  # another user's, alive
