"""The Open Inference Protocol's HTTP routes (``/v2/...``) on the demo server, for the models it serves.

Health (``/v2/health/live``, ``/v2/health/ready``), server and model metadata (``GET /v2``,
``/v2/models/{name}[/versions/{v}]``), model readiness (``.../ready``), ``POST .../infer``, and
Triton's repository index (``POST /v2/repository/index``: every model version, all ready). Models
are the :class:`.catalog.Catalog`'s: a request without a version gets the model's highest. Each takes
one of two inputs: its input blob (``FP32``, the net's C x H x W, several images along the first dimension,
already preprocessed) or ``image`` (``BYTES``, one encoded image per element, preprocessed as the
page's uploads are); it answers its output blob (``FP32``, probabilities per image), or with the
classification extension the top k as ``"value:index:label"``. A detection model answers its output
blob as the rows of its ``DetectionOutput`` layer, ``FP32`` of shape [N, 7] (``[image, label,
confidence, xmin, ymin, xmax, ymax]``, the box normalised to the image, ``image`` the index of the
image in the request), every row the net keeps; its metadata names the columns. Errors are the protocol's
``{"error": ...}`` (400 for a request it refuses, 404 for a model or version not served).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from caffetool import __version__
from caffetool.demo import oip
from caffetool.demo.routetable import Endpoint, Handler
from caffetool.inference import preprocess
from caffetool.serving.batcher import Batcher, off_loop, unless_left
from caffetool.serving.catalog import Catalog, Served
from caffetool.serving.classifier import Classifier
from caffetool.serving.detector import COLUMNS, Detector

IMAGE = "image"
EXTENSIONS = ["classification", "binary_tensor_data"]
MAX_IMAGES = 64  # encoded images one request may carry
MODEL = "/v2/models/{model}"
VERSION = "/v2/models/{model}/versions/{version}"

ROUTES = (
    Endpoint("/v2", "server", "server metadata: name, version and the extensions served"),
    Endpoint("/v2/health/live", "healthy", "200 while the server runs"),
    Endpoint("/v2/health/ready", "healthy", "200 once every model is loaded (they load before the server listens)"),
    Endpoint("/v2/repository/index", "index", "Triton's repository index: every model version, all READY",
             ("POST",)),
    Endpoint(MODEL, "model", "model metadata: versions, inputs (the FP32 input blob, or `image` as BYTES) and output"),
    Endpoint(f"{MODEL}/ready", "ready", "200 for a served model, 404 otherwise"),
    Endpoint(f"{MODEL}/infer", "infer", "inference on the model's highest version: probabilities, or the top k "
             "with the classification extension; JSON or binary tensors", ("POST",)),
    Endpoint(VERSION, "model", "the same, for one version"),
    Endpoint(f"{VERSION}/ready", "ready", "the same, for one version"),
    Endpoint(f"{VERSION}/infer", "infer", "the same, for one version", ("POST",)),
)


def handlers(catalog: Catalog, max_body: int, read_body: Callable[[Request, int], Awaitable[bytes]]
             ) -> dict[str, Handler]:
    """The handlers of :data:`ROUTES` for the models of ``catalog``, each one's forward passes through
    its batcher; ``read_body`` reads a request's body within ``max_body``."""
    async def server(request: Request) -> Response:
        return JSONResponse({"name": "caffetool", "version": __version__, "extensions": EXTENSIONS})

    async def healthy(request: Request) -> Response:
        return Response(status_code=200)

    async def model(request: Request) -> Response:
        served = _served(request, catalog)
        return JSONResponse(metadata(served.model, served.name, catalog.versions(served.name)))

    async def ready(request: Request) -> Response:
        _served(request, catalog)
        return Response(status_code=200)

    async def index(request: Request) -> Response:
        return JSONResponse([{"name": name, "version": version, "state": "READY"}
                             for name in catalog.names for version in catalog.versions(name)])

    async def infer(request: Request) -> Response:
        served = _served(request, catalog)
        parsed = oip.parse(await read_body(request, max_body), request.headers.get(oip.HEADER))
        outputs(served.model, parsed)  # a request for what the model cannot answer is refused before it runs
        probs = await unless_left(request.receive, _probabilities(served.model, served.batcher, parsed.inputs))
        body, header = oip.response(served.name, served.version, parsed.id, answer(served.model, parsed, probs))
        if header is None:
            return Response(body, media_type="application/json")
        return Response(body, media_type="application/octet-stream", headers={oip.HEADER: str(header)})

    return {"server": server, "healthy": healthy, "model": model, "ready": ready, "index": index, "infer": infer}


def metadata(classifier: Classifier | Detector, name: str, versions: list[str]) -> dict[str, Any]:
    t = classifier.transform
    data, output = classifier.blobs
    if classifier.kind == "detection":
        answers = {"name": output, "datatype": "FP32", "shape": [-1, len(COLUMNS)],
                   "parameters": {"content": "detections", "columns": list(COLUMNS),
                                  "labels": classifier.labels or []}}
    else:
        answers = {"name": output, "datatype": "FP32", "shape": [-1, len(classifier.labels)]}
    return {"name": name, "versions": versions,
            "platform": {"caffe": "caffe_caffemodel", "onnxruntime": "onnxruntime_onnx"}.get(classifier.backend,
                                                                                          "opencv_caffemodel"),
            "inputs": [{"name": data, "datatype": "FP32", "shape": [-1, t.channels, t.height, t.width]},
                       {"name": IMAGE, "datatype": "BYTES", "shape": [-1]}],
            "outputs": [answers]}


def answer(classifier: Classifier | Detector, request: oip.InferRequest,
           probs: np.ndarray) -> list[tuple[oip.Tensor, bool]]:
    """The outputs of one infer request from its probabilities per image (a detector's: its rows per
    image), as asked (tensor or top k, binary or JSON)."""
    output = classifier.blobs[1]
    answered = []
    for w in outputs(classifier, request):
        if classifier.kind == "detection":
            rows = detection_rows(probs)
            tensor = oip.Tensor(output, "FP32", list(rows.shape), rows)
        else:
            tensor = (oip.classification(probs, w.classification, classifier.labels, output) if w.classification
                      else oip.Tensor(output, "FP32", list(probs.shape), probs))
        answered.append((tensor, w.binary))
    return answered


def outputs(classifier: Classifier | Detector, request: oip.InferRequest) -> list[oip.Wanted]:
    """The outputs the request asks for (by default the model's one), each one the model answers."""
    output = classifier.blobs[1]
    wanted = request.outputs or [oip.Wanted(output, request.binary_default)]
    for w in wanted:
        if w.name != output:
            raise oip.ProtocolError(f"output '{w.name}' is not one of the model's ({output})")
        if classifier.kind == "detection" and w.classification:
            raise oip.ProtocolError(f"output '{output}' holds detections, not class scores: the classification "
                                    "extension does not apply to it")
    return wanted


def detection_rows(per_image: np.ndarray) -> np.ndarray:
    """Each image's detection rows (an object array, as a detector's pass gives them) as one (N, 7)
    FP32 array, the first column the image's index in the request."""
    rows = [np.asarray(found, np.float32).reshape(-1, len(COLUMNS)).copy() for found in per_image]
    for i, found in enumerate(rows):
        found[:, 0] = i
    return np.concatenate(rows) if rows else np.zeros((0, len(COLUMNS)), np.float32)


async def _probabilities(classifier: Classifier | Detector, batcher: Batcher, inputs: list[oip.Tensor]) -> np.ndarray:
    """(n, classes): the rows of the FP32 input, or each encoded image prepared as the page prepares it
    (a detector's: n arrays of detection rows)."""
    data = classifier.blobs[0]
    if len(inputs) != 1 or inputs[0].name not in (data, IMAGE):
        raise oip.ProtocolError(f"give one input: '{data}' (FP32, preprocessed) or '{IMAGE}' (BYTES, encoded "
                                f"images); got {', '.join(repr(i.name) for i in inputs)}")
    given = inputs[0]
    t = classifier.transform
    if given.name == IMAGE:
        if given.datatype != "BYTES" or given.data.ndim != 1 or not 1 <= given.data.size <= MAX_IMAGES:
            raise oip.ProtocolError(f"input '{IMAGE}' is BYTES of shape [n], n from 1 to {MAX_IMAGES}: one "
                                    "encoded image each")
        preprocess.check_request([bytes(item) for item in given.data], classifier.max_pixels)

        async def one(item: bytes) -> np.ndarray:
            prepared = await off_loop(classifier.prepare, bytes(item))
            out = await batcher.submit(prepared.blob)
            return out[0] if classifier.kind == "detection" else out.mean(0)  # oversampled crops are averaged
        answers = await asyncio.gather(*(one(item) for item in given.data))
        if classifier.kind == "detection":
            per_image = np.empty(len(answers), dtype=object)
            for i, found in enumerate(answers):
                per_image[i] = found
            return per_image
        return np.stack(answers)
    shape = [t.channels, t.height, t.width]
    if given.datatype != "FP32" or given.data.ndim != 4 or list(given.data.shape[1:]) != shape \
            or given.data.shape[0] < 1:
        raise oip.ProtocolError(f"input '{data}' is FP32 of shape [n, {', '.join(map(str, shape))}], n 1 or more; "
                                f"got {given.datatype} {given.shape}")
    return await batcher.submit(np.ascontiguousarray(given.data, np.float32))


def _served(request: Request, catalog: Catalog) -> Served:
    return catalog.get(request.path_params["model"], request.path_params.get("version"))
