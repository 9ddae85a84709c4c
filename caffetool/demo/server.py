"""The demo's HTTP server: a page, a JSON API and a health check (Starlette, served by uvicorn).

Routes: ``GET /`` (upload or draw, see the top-5 as bars, the input as the net sees it, timings),
``POST /api/classify`` (multipart file or raw image bytes; ``?top=k``; ``?input=1`` adds the
preprocessed input as a base64 PNG), ``GET /api/model``, ``GET /healthz``. Uploads stay in memory:
bodies are read with a size cap (413 past it), multipart is parsed from memory, nothing is written
to disk. Classification runs in a worker thread (the event loop stays free for other requests),
one forward pass at a time behind the classifier's lock.
"""

from __future__ import annotations

import base64
from importlib import resources

import anyio
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from caffetool.demo.model import Classifier
from caffetool.demo.preprocess import BadImage

DEFAULT_MAX_BODY = 10 * 1024 * 1024


class TooLarge(Exception):
    pass


def create_app(classifier: Classifier, max_body: int = DEFAULT_MAX_BODY) -> Starlette:
    page = resources.files("caffetool.demo").joinpath("page.html").read_text()

    async def index(request: Request) -> Response:
        return HTMLResponse(page)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": classifier.name})

    async def model_info(request: Request) -> Response:
        return JSONResponse(classifier.describe())

    async def classify(request: Request) -> Response:
        try:
            top = int(request.query_params.get("top", 5))
        except ValueError:
            return _error(400, "top must be an integer")
        want_input = request.query_params.get("input") in ("1", "true", "yes")
        try:
            body = await _read_body(request, max_body)
            data = _image_bytes(request.headers.get("content-type", ""), body)
            result = await anyio.to_thread.run_sync(classifier.classify, data, top, want_input)
        except TooLarge:
            return _error(413, f"body over the {max_body:,}-byte limit")
        except BadImage as e:
            return _error(e.status, str(e))
        if want_input:
            result["input_png"] = base64.b64encode(result["input_png"]).decode()
        return JSONResponse(result)

    return Starlette(routes=[
        Route("/", index),
        Route("/healthz", healthz),
        Route("/api/model", model_info),
        Route("/api/classify", classify, methods=["POST"]),
    ])


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise TooLarge
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _image_bytes(content_type: str, body: bytes) -> bytes:
    """The image in a body: the first file of a multipart form, or the body itself."""
    kind, options = parse_options_header(content_type)
    if kind != b"multipart/form-data":
        return body
    boundary = options.get(b"boundary")
    if not boundary:
        raise BadImage("multipart body without a boundary", 422)
    parts: list[bytearray] = []
    current: dict = {}

    def on_part_begin() -> None:
        current["data"] = bytearray()

    def on_part_data(data: bytes, start: int, end: int) -> None:
        current["data"] += data[start:end]

    def on_part_end() -> None:
        parts.append(current.pop("data"))

    parser = MultipartParser(boundary, {"on_part_begin": on_part_begin, "on_part_data": on_part_data,
                                        "on_part_end": on_part_end})
    parser.write(body)
    parser.finalize()
    files = [bytes(p) for p in parts if p]
    if not files:
        raise BadImage("the multipart body holds no file", 422)
    return files[0]
