"""The demo's HTTP server: a page, a JSON API and a health check (Starlette, served by uvicorn).

Routes: ``GET /`` (upload or draw, see the top-5 as bars, the input as the net sees it, timings),
``POST /api/classify`` (multipart file or raw image bytes; ``?top=k``; ``?input=1`` adds the
preprocessed input as a base64 PNG), ``GET /api/model``, ``GET /healthz``. Uploads stay in memory:
bodies are read with a size cap (413 past it), multipart is parsed from memory (:mod:`.multipart`),
nothing is written to disk. Classification runs in a worker thread (the event loop stays free for
other requests), one forward pass at a time behind the classifier's lock.

The library raises caffetool errors that say what is wrong with an upload; which HTTP status
answers each is decided here, in :data:`STATUS`, and every error is a JSON ``{"error": ...}``.
"""

from __future__ import annotations

import base64
from importlib import resources

import anyio
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from caffetool.demo import multipart
from caffetool.demo.classifier import Classifier
from caffetool.demo.preprocess import BadImage, NotAnImage
from caffetool.errors import CaffetoolError, ImageError

DEFAULT_MAX_BODY = 10 * 1024 * 1024


class BodyTooLarge(ImageError):
    """A request body over ``--max-body``."""


# The status each upload error is answered with; the first class that matches wins.
STATUS: tuple[tuple[type[CaffetoolError], int], ...] = (
    (BodyTooLarge, 413),
    (NotAnImage, 415),
    (BadImage, 422),
    (multipart.BadMultipart, 422),
)
UPLOAD_ERRORS = tuple(kind for kind, _ in STATUS)


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
            data = multipart.image_bytes(request.headers.get("content-type", ""), body)
            result = await anyio.to_thread.run_sync(classifier.classify, data, top, want_input)
        except UPLOAD_ERRORS as e:
            return _error(status_of(e), str(e))
        except ClientDisconnect:  # gone, or cut off by the protocol's deadline: nobody to answer
            return Response(status_code=400)
        if want_input:
            result["input_png"] = base64.b64encode(result["input_png"]).decode()
        return JSONResponse(result)

    return Starlette(routes=[
        Route("/", index),
        Route("/healthz", healthz),
        Route("/api/model", model_info),
        Route("/api/classify", classify, methods=["POST"]),
    ])


def status_of(error: CaffetoolError) -> int:
    return next(status for kind, status in STATUS if isinstance(error, kind))


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


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
    return b"".join(chunks)
