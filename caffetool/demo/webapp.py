"""The demo's HTTP server: a page, a JSON API, the run's page and a health check (Starlette on uvicorn).

It serves classifiers and detection models alike: ``/api/classify`` answers a classifier's top
classes, a detection model's boxes (at or above a ``threshold`` given in the query or the form).

Routes: :data:`ROUTES`, the page's and the API's, then the Open Inference Protocol's (:data:`.v2.ROUTES`)
and ``/metrics``.

Uploads stay in memory: bodies are read with a size cap (413 past it), multipart is parsed from
memory (:mod:`.multipart`), nothing is written to disk. Classification runs in a worker thread (the
event loop stays free for other requests), one forward pass at a time behind the classifier's lock.

The library raises caffetool errors that say what is wrong; which HTTP status answers each is
decided here, in :data:`STATUS`, and every error, unknown routes included, is a JSON ``{"error": ...}``.
"""

from __future__ import annotations

import asyncio
import base64
import re
import time
import zlib
from collections.abc import Awaitable, Callable
from html import escape
from importlib import resources
from types import ModuleType
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from caffetool.demo import multipart, v2
from caffetool.demo.routetable import Endpoint, routed
from caffetool.errors import CaffetoolError, ConfigError, DataError, ImageError, NetError, RunError
from caffetool.inference.preprocess import BadImage, NotAnImage, TooManyPixels, check_request
from caffetool.runpage import examples, runpage
from caffetool.runpage.runview import EVALUATIONS, PLOTS, DamagedRun, NoRun, NoSuchImage, RunView
from caffetool.serving.batcher import Batching, ClientLeft, QueueFull, off_loop, unless_left
from caffetool.serving.catalog import DEFAULT_VERSION, Catalog, NoSuchModel, Served, ServedModel
from caffetool.serving.classifier import Classifier, NoVisualizations
from caffetool.serving.detector import DEFAULT_THRESHOLD, Detector
from caffetool.serving.telemetry import Counting, ServerMetrics

DEFAULT_MAX_BODY = 10 * 1024 * 1024
MAX_FILES = 32  # images one classify request may carry
DEFAULT_EXAMPLES = 12
EXAMPLE_NAME = re.compile(r"^(\d{1,12})\.png$")
LAYER_NAME = re.compile(r"^[\w./:+-]{1,200}$")  # Caffe layer names as prototxts write them


PAGE = (
    Endpoint("/", "index", "the page: upload one or many images, draw, or click an example; top-5, timings, "
             "visualizations on request"),
    Endpoint("/healthz", "healthz", "`status: ok` and the default model's name, while the server runs"),
    Endpoint("/api/model", "model_info", "the model: name, version, input shape, classes, backend, run, number of "
             "examples, whether visualizations are offered"),
    Endpoint("/api/models", "model_list", "every model and version served"),
    Endpoint("/api/classify", "classify", "raw image bytes or a multipart form of up to 32 files: the top k "
             "(`?top=k`) or, for a detection model, the boxes at or above `?threshold=` (or a form field; default "
             "0.5) in pixels and normalised, with the image's size; timings, the preprocessed input on `?input=1`; "
             "one result or error per file", ("POST",)),
    Endpoint("/api/visualize", "visualize", "an image: the first convolution's filters and a layer's activations "
             "(`?layer=NAME`) as base64 PNGs (caffe backend)", ("POST",)),
    Endpoint("/api/examples", "example_list", "records of the run's test set (`?count=N&offset=K`): index, label, "
             "class, URL"),
    Endpoint("/api/examples/{name}", "example_image", "record i of the test set as a PNG (`/api/examples/7.png`)"),
    Endpoint("/api/run", "run_json", "the run as JSON: curves' last rows, final figures, newest evaluation"),
    Endpoint("/run", "run_html", "the run's page: figures, training curves, newest evaluation"),
    Endpoint(f"/run/{PLOTS}/{{name}}", "plot_image", f"a PNG of the run's `{PLOTS}/`"),
    Endpoint(f"/run/{EVALUATIONS}/{{name}}", "evaluation_image", f"a PNG of the newest evaluation in `{EVALUATIONS}/`"),
)
METRICS = (Endpoint("/metrics", "metrics", "Prometheus series: requests and latency by route, queue "
                                           "wait, batch sizes, inferences, load time (every worker's with "
                                           "`--workers N`)"),)
ROUTES = (*PAGE, *v2.ROUTES, *METRICS)  # in the order they are matched


class BodyTooLarge(ImageError):
    """A request body over ``--max-body`` (as sent, or decompressed)."""


class UnsupportedEncoding(ConfigError):
    """A request body in a Content-Encoding the server does not decode."""


class BadEncoding(ConfigError):
    """A request body that is not what its Content-Encoding says."""


class BadParameter(ConfigError):
    """A query parameter that is missing, malformed or out of its range."""


# The status each error is answered with; the first class that matches wins.
STATUS: tuple[tuple[type[CaffetoolError], int], ...] = (
    (BodyTooLarge, 413),
    (TooManyPixels, 413),
    (UnsupportedEncoding, 415),
    (BadEncoding, 400),
    (QueueFull, 503),
    (ClientLeft, 499),  # nginx's "client closed request": what the metrics count, nobody reads it
    (multipart.TooManyFiles, 413),
    (NotAnImage, 415),
    (BadImage, 422),
    (multipart.BadMultipart, 422),
    (BadParameter, 400),
    (NoSuchModel, 404),
    (examples.NoSuchExample, 404),
    (examples.NoExamples, 404),
    (NoRun, 404),
    (NoSuchImage, 404),
    (DamagedRun, 503),
    (NoVisualizations, 501),
    (ConfigError, 400),  # what the classifier refuses in a request, as an unknown layer
    (NetError, 400),
    (DataError, 500),  # a damaged database or file of the run
    (RunError, 500),
    (CaffetoolError, 500),
)
SERVER_FOLDERS = re.compile(r"(?<![\w.~])/(?:[^\s/'\"]+/)+")  # the folders of an absolute path, kept out of 5xx
UPLOAD_ERRORS = (BodyTooLarge, multipart.TooManyFiles, NotAnImage, BadImage, multipart.BadMultipart)


def create_app(models: Classifier | Detector | list[ServedModel], max_body: int = DEFAULT_MAX_BODY,
               caffe_pb2: ModuleType | None = None, batching: Batching = Batching()) -> Starlette:
    """The app serving ``models`` (one model: version 1 of its name); a run's test set is offered
    as examples when ``caffe_pb2`` is given. Each model's forward passes, the page's and the
    protocol's, go through its one :class:`.batcher.Batcher`."""
    metrics = ServerMetrics()
    if not isinstance(models, list):
        models = [ServedModel(models.name, DEFAULT_VERSION, models)]
    catalog = Catalog(models, batching, metrics, caffe_pb2)
    page = resources.files("caffetool.demo").joinpath("page.html").read_text()

    def chosen(request: Request) -> Served:
        """The model a page or API request names (``?model=NAME&version=N``), else the default."""
        return catalog.get(request.query_params.get("model") or None, request.query_params.get("version") or None)

    async def index(request: Request) -> Response:
        return HTMLResponse(page)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": catalog.names[0]})

    async def model_info(request: Request) -> Response:
        served = chosen(request)
        return JSONResponse({**served.model.describe(), "name": served.name, "version": served.version,
                             "examples": served.test_set.total if served.test_set else 0,
                             # pycaffe exposes every blob; OpenCV DNN's visualizations are refused
                             "visualize": served.model.kind == "classification" and served.model.backend == "caffe"})

    async def model_list(request: Request) -> Response:
        return JSONResponse({"models": catalog.listing()})

    async def classified(served: Served, data: bytes, top: int, want_input: bool) -> dict[str, Any]:
        classifier = served.model
        prepared = await off_loop(classifier.prepare, data)
        start = time.perf_counter()
        rows = await served.batcher.submit(prepared.blob)
        probs = rows[0] if len(rows) == 1 else rows.mean(0)  # oversampled crops are averaged
        answer = classifier.answer(prepared, probs, top, want_input, (time.perf_counter() - start) * 1e3)
        return {**answer, "model": served.name, "version": served.version}

    async def detected(served: Served, data: bytes, threshold: float, want_input: bool) -> dict[str, Any]:
        model = served.model
        prepared = await off_loop(model.prepare, data)
        start = time.perf_counter()
        found = (await served.batcher.submit(prepared.blob))[0]
        answer = model.answer(prepared, found, threshold, want_input, (time.perf_counter() - start) * 1e3)
        return {**answer, "model": served.name, "version": served.version}

    async def classify(request: Request) -> Response:
        served = chosen(request)
        top = _int(request, "top", 5, 1, 1_000_000)
        want_input = _flag(request, "input")
        body = await _read_body(request, max_body)
        files = multipart.uploads(request.headers.get("content-type", ""), body, MAX_FILES)
        if served.model.kind == "detection":
            form, files = multipart.settings(files, ("threshold",))
            threshold = _threshold(request.query_params.get("threshold", form.get("threshold")))
            if not files:
                raise multipart.BadMultipart("the multipart body holds no file")

            def answered(data: bytes) -> Awaitable[dict[str, Any]]:
                return detected(served, data, threshold, want_input)
        else:
            def answered(data: bytes) -> Awaitable[dict[str, Any]]:
                return classified(served, data, top, want_input)
        check_request([upload.data for upload in files], served.model.max_pixels)
        if len(files) == 1:
            return JSONResponse(_encoded(await unless_left(request.receive, answered(files[0].data))))

        async def each(upload: multipart.Upload) -> dict[str, Any]:
            try:
                return {"file": upload.name, **_encoded(await answered(upload.data))}
            except UPLOAD_ERRORS as e:
                return {"file": upload.name, "error": str(e), "status": status_of(e)}

        return JSONResponse(list(await unless_left(request.receive,
                                                   asyncio.gather(*(each(upload) for upload in files)))))

    async def visualize(request: Request) -> Response:
        layer = request.query_params.get("layer") or None
        if layer is not None and not LAYER_NAME.match(layer):
            raise BadParameter("layer must be a layer name of the net (letters, digits and ._/:+-, up to 200)")
        served = chosen(request)
        if served.model.kind != "classification":
            raise NoVisualizations(f"visualizations are shown for classifiers; {served.name} is a detection model")
        body = await _read_body(request, max_body)
        data = multipart.image_bytes(request.headers.get("content-type", ""), body)
        shown = await anyio.to_thread.run_sync(served.model.visualize, data, layer)
        return JSONResponse({**shown, **{key: _base64(shown.get(key)) for key in ("filters_png", "activations_png")}})

    async def example_list(request: Request) -> Response:
        served = chosen(request)
        found = _test_set(served)
        count = _int(request, "count", DEFAULT_EXAMPLES, 1, examples.MAX_COUNT)
        offset = _int(request, "offset", 0, 0, found.total - 1)
        listed = await anyio.to_thread.run_sync(found.listing, offset, count)
        return JSONResponse({"total": found.total, "offset": offset, "examples": [
            {"index": index, "label": label, "class": _class_name(served.model, label),
             "url": f"/api/examples/{index}.png{served.query}"} for index, label in listed]})

    async def example_image(request: Request) -> Response:
        found = _test_set(chosen(request))
        name = request.path_params["name"]
        matched = EXAMPLE_NAME.match(name)
        if not matched:
            raise examples.NoSuchExample(f"no example {name[:100]!r}: examples are named by number, as 0.png")
        png = await anyio.to_thread.run_sync(found.png, int(matched.group(1)))
        return Response(png, media_type="image/png")

    async def run_json(request: Request) -> Response:
        return JSONResponse(await anyio.to_thread.run_sync(_run(chosen(request)).summary))

    async def run_html(request: Request) -> Response:
        served = chosen(request)
        try:
            summary = await anyio.to_thread.run_sync(_run(served).summary)
        except NoRun as e:
            return HTMLResponse(f'<!doctype html><html lang="en"><title>No run</title><p>{escape(str(e))}</p>'
                                '<p><a href="/">Classify images</a></p></html>', 404)
        return HTMLResponse(runpage.render(summary, served.query))

    def run_image(kind: str) -> Callable[[Request], Awaitable[Response]]:
        async def image(request: Request) -> Response:
            path = _run(chosen(request)).image(kind, request.path_params["name"])
            return Response(await anyio.to_thread.run_sync(path.read_bytes), media_type="image/png",
                            headers={"cache-control": "no-cache"})
        return image

    routes = [
        *routed(PAGE, {"index": index, "healthz": healthz, "model_info": model_info, "model_list": model_list,
                       "classify": classify, "visualize": visualize, "example_list": example_list,
                       "example_image": example_image, "run_json": run_json, "run_html": run_html,
                       "plot_image": run_image(PLOTS), "evaluation_image": run_image(EVALUATIONS)}),
        *routed(v2.ROUTES, v2.handlers(catalog, max_body, _read_body)),
        *routed(METRICS, {"metrics": metrics.endpoint}),
    ]
    return Starlette(routes=routes, middleware=[Middleware(Counting, metrics=metrics)], exception_handlers={
        HTTPException: _http_error, CaffetoolError: _caffetool_error, ClientDisconnect: _gone,
        Exception: _internal_error})


def status_of(error: CaffetoolError) -> int:
    return next(status for kind, status in STATUS if isinstance(error, kind))


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def _caffetool_error(request: Request, error: Exception) -> Response:
    """The error's message as JSON; a fault on the server's side is said without its folders."""
    assert isinstance(error, CaffetoolError)
    status = status_of(error)
    return _error(status, str(error) if status < 500 else SERVER_FOLDERS.sub("", str(error)))


async def _internal_error(request: Request, error: Exception) -> Response:
    """A fault of the server itself: logged by uvicorn, answered as JSON like every error."""
    return _error(500, f"internal error ({type(error).__name__}); the server's log has the details")


async def _http_error(request: Request, error: Exception) -> Response:
    """Starlette's own refusals (an unknown route, a wrong method) as JSON too."""
    assert isinstance(error, HTTPException)
    return JSONResponse({"error": error.detail}, status_code=error.status_code, headers=error.headers)


async def _gone(request: Request, error: Exception) -> Response:
    """A client gone, or cut off by the protocol's deadline: nobody to answer."""
    return Response(status_code=400)


def _test_set(served: Served) -> examples.ExampleSet:
    if served.test_set is None:
        raise examples.NoExamples(served.no_examples)
    return served.test_set


def _run(served: Served) -> RunView:
    if served.run is None:
        raise NoRun(f"{served.no_run}: no run to show")
    return served.run


def _class_name(classifier: Classifier, label: int) -> str:
    return classifier.labels[label] if 0 <= label < len(classifier.labels) else str(label)


def _encoded(result: dict[str, Any]) -> dict[str, Any]:
    if "input_png" in result:
        result = {**result, "input_png": _base64(result["input_png"])}
    return result


def _base64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _int(request: Request, name: str, default: int, low: int, high: int) -> int:
    """Query parameter ``name`` as an integer from ``low`` to ``high``, ``default`` when absent."""
    text = request.query_params.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadParameter(f"{name} must be an integer") from None
    if not low <= value <= high:
        raise BadParameter(f"{name} must be from {low} to {high}, got {value}")
    return value


def _threshold(text: str | None) -> float:
    """A detection model's ``threshold`` (query or form), a number from 0 to 1; 0.5 when absent."""
    if text is None or text == "":
        return DEFAULT_THRESHOLD
    try:
        value = float(text)
    except ValueError:
        raise BadParameter(f"threshold must be a number from 0 to 1, got {text[:40]!r}") from None
    if not 0 <= value <= 1:
        raise BadParameter(f"threshold must be from 0 to 1, got {value:g}")
    return value


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name) in ("1", "true", "yes")


async def _read_body(request: Request, limit: int) -> bytes:
    over = f"body over the {limit:,}-byte limit"
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(over)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(over)
        chunks.append(chunk)
    return _decoded(b"".join(chunks), request.headers.get("content-encoding", ""), limit)


# Content-Encoding of a request body (tritonclient's request_compression_algorithm): zlib's wbits
DECODINGS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS, "identity": None}


def _decoded(body: bytes, encoding: str, limit: int) -> bytes:
    """``body`` as sent before its Content-Encoding, within ``limit`` bytes once decompressed too (a
    small compressed body can expand a thousandfold)."""
    name = encoding.strip().lower()
    if not name:
        return body
    if name not in DECODINGS:
        raise UnsupportedEncoding(f"Content-Encoding {encoding!r} is not supported; send the body as it is, "
                                  "or compressed with gzip or deflate")
    if DECODINGS[name] is None:
        return body
    inflater = zlib.decompressobj(DECODINGS[name])
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as e:
        raise BadEncoding(f"the body is not valid {name} data ({e})") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise BodyTooLarge(f"body over the {limit:,}-byte limit once decompressed")
    if not inflater.eof:
        raise BadEncoding(f"the body is not valid {name} data (it ends early)")
    return out
