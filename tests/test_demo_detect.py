"""Detection models in the demo, on OpenCV's published res10 SSD face detector and scikit-image's photos:
``demo.detect`` against OpenCV 4's own reading of the model (installed here, run in a child), its
files and its refusals; ``demo.serve`` on the model through real HTTP (the JSON API, the Open
Inference Protocol as tritonclient encodes it) and in a real browser (Debian's Chromium)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import cv2
import httpx
import numpy as np
import pytest
import tritonclient.http as triton

from benchmarks import facedetector
from caffetool.errors import ConfigError
from caffetool.inference import modelfiles, preprocess
from caffetool.nets import prototxt

from . import chromium
from .conftest import PROJECT
from .processes import stop
from .test_demo import free_port, start_server

CAFFETOOL = str(PROJECT / ".venv/bin/caffetool")
MEAN = "104,177,123"
OPENCV_4 = """
import json, sys, cv2
deploy, weights, *photos = sys.argv[1:]
net = cv2.dnn.readNetFromCaffe(deploy, weights)
found = {}
for path in photos:
    image = cv2.imread(path)
    h, w = image.shape[:2]
    # OpenCV's face detection sample: resize to 300x300, mean (104, 177, 123) subtracted, BGR
    net.setInput(cv2.dnn.blobFromImage(cv2.resize(image, (300, 300)), 1.0, (300, 300), (104.0, 177.0, 123.0)))
    rows = net.forward()[0, 0]
    found[path] = [[float(r[2]), *(float(v) for v in r[3:7] * [w, h, w, h])] for r in rows if r[2] >= 0.5]
print(json.dumps({"version": cv2.__version__, "found": found}))
"""


@pytest.fixture(scope="module")
def res10():
    return facedetector.files()


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    folder = tmp_path_factory.mktemp("photos")
    (folder / "labels.txt").write_text("background\nface\n")
    return {name: facedetector.photo(name, folder) for name in facedetector.PHOTOS}


def model_flags(res10, photos) -> list[str]:
    deploy, weights = res10
    return ["--deploy", str(deploy), "--weights", str(weights), "--labels", str(photos["astronaut"].parent /
                                                                                "labels.txt"), "--mean-values", MEAN]


@pytest.fixture(scope="module")
def opencv4_path(tmp_path_factory):
    """A folder holding OpenCV 4's wheel from PyPI, for a child's PYTHONPATH (the venv's OpenCV 5 has no
    Caffe importer)."""
    target = tmp_path_factory.mktemp("opencv4")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                           "opencv-python-headless>=4.8,<5"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return target


@pytest.fixture(scope="module")
def opencv4(res10, photos, opencv4_path):
    """OpenCV 4's boxes at or above 0.5 for each photo, [confidence, xmin, ymin, xmax, ymax] in pixels,
    as OpenCV's face detection sample finds them."""
    done = subprocess.run([sys.executable, "-c", OPENCV_4, *map(str, res10), *(str(p) for p in photos.values())],
                          env={**os.environ, "PYTHONPATH": str(opencv4_path)}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout)
    assert answer["version"].startswith("4.")
    return {name: answer["found"][str(path)] for name, path in photos.items()}


@pytest.fixture(scope="module")
def detected(res10, photos, tmp_path_factory):
    """``caffetool demo.detect astronaut.png coffee.png`` (the images as words) into a new folder."""
    out = tmp_path_factory.mktemp("detect") / "out"
    done = subprocess.run([CAFFETOOL, "demo.detect", str(photos["astronaut"]), str(photos["coffee"]),
                           *model_flags(res10, photos), "--out", str(out)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return done, out


# --- the preprocessing record, without a server

def test_a_detection_net_is_fed_the_whole_image_stretched_as_opencvs_sample_feeds_it(engine, caffe, res10, photos):
    deploy, weights = res10
    net = prototxt.read(deploy, caffe.proto.caffe_pb2.NetParameter())
    assert modelfiles.is_detection(net) and modelfiles.output_blob(net) == "detection_out"
    files = modelfiles.ModelFiles(deploy, weights, None, mean_values=(104.0, 177.0, 123.0))
    t = modelfiles.transform_of(caffe, files, net)
    assert t.colour is None and t.stretch == preprocess.Stretch((2, 1, 0)) and (t.height, t.width) == (300, 300)
    for path in photos.values():
        prepared = preprocess.prepare(path.read_bytes(), t)
        image = cv2.imread(str(path))
        assert prepared.size == image.shape[:2]
        assert np.array_equal(prepared.blob, facedetector.blob(image))  # bit for bit
    rgb = preprocess.prepare(photos["astronaut"].read_bytes(), modelfiles.transform_of(
        caffe, modelfiles.ModelFiles(deploy, weights, None, channel_swap=(0, 1, 2)), net)).blob
    assert np.array_equal(rgb[0], cv2.resize(cv2.imread(str(photos["astronaut"])), (300, 300))[:, :, ::-1]
                          .transpose(2, 0, 1).astype(np.float32))
    with pytest.raises(ConfigError, match=r"^a detection net \(its output comes from a DetectionOutput layer\) takes "
                                          r"the whole image stretched to its input, in 0-255 pixel values: "
                                          r"--raw-scale, --image-dims do not apply; give --mean-values, --scale and "
                                          r"--channel-swap$"):
        modelfiles.transform_of(caffe, modelfiles.ModelFiles(deploy, weights, None, raw_scale=255.0,
                                                             image_dims=(320, 320)), net)


# --- demo.detect

def test_detect_finds_the_face_opencv_4_finds_and_nothing_in_the_coffee(detected, opencv4, photos):
    done, out = detected
    (face,) = opencv4["astronaut"]
    assert opencv4["coffee"] == []
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"{photos['astronaut']}: 1 box; best face 0.9999") or \
        lines[0].startswith(f"{photos['astronaut']}: 1 box; best face 1.0000")
    assert lines[1] == f"{photos['coffee']}: no box at or above 0.5"
    assert lines[2].startswith("1 box(es) in 2 image(s) at or above 0.5: ") and len(lines) == 3

    rows = list(csv.DictReader((out / "detections.csv").open()))
    assert len(rows) == 1 and list(rows[0]) == ["image", "label", "label_id", "confidence", "xmin", "ymin", "xmax",
                                                "ymax"]
    row = rows[0]
    assert (row["image"], row["label"], row["label_id"]) == (str(photos["astronaut"]), "face", "1")
    assert float(row["confidence"]) > 0.99 and abs(float(row["confidence"]) - face[0]) < 1e-5
    box = [float(row[k]) for k in ("xmin", "ymin", "xmax", "ymax")]
    assert np.abs(np.array(box) - face[1:]).max() <= 1.0, (box, face)

    report = json.loads((out / "detections.json").read_text())
    assert report["threshold"] == 0.5 and report["backend"] == "caffe"
    astronaut, coffee = report["images"]
    assert (astronaut["image"], astronaut["width"], astronaut["height"]) == (str(photos["astronaut"]), 512, 512)
    assert (coffee["width"], coffee["height"], coffee["detections"]) == (600, 400, [])
    (d,) = astronaut["detections"]
    assert (d["label"], d["label_id"]) == ("face", 1) and abs(d["confidence"] - face[0]) < 1e-5
    assert np.abs(np.array([d["box"][k] for k in ("xmin", "ymin", "xmax", "ymax")]) - face[1:]).max() <= 1.0
    assert all(abs(d["box_normalized"][k] * 512 - d["box"][k]) < 1e-6 for k in d["box"])
    assert sorted(p.name for p in out.iterdir()) == ["astronaut-detected.png", "coffee-detected.png",
                                                      "detections.csv", "detections.json"]
    assert [p.name for p in out.parent.iterdir()] == ["out"]  # no staging folder left beside it


def test_the_annotated_copy_differs_from_the_photo_only_at_the_box(detected, opencv4, photos):
    _, out = detected
    original = cv2.imread(str(photos["astronaut"]))
    annotated = cv2.imread(str(out / "astronaut-detected.png"))
    assert annotated.shape == original.shape
    changed = np.argwhere((annotated != original).any(axis=2))
    assert len(changed) > 300  # the outline and the label strip
    xmin, ymin, xmax, ymax = opencv4["astronaut"][0][1:]
    margin = 6  # the outline's thickness, rounding
    ys, xs = changed[:, 0], changed[:, 1]
    assert xs.min() >= xmin - margin and xs.max() <= max(xmax + margin, xmin + 160)  # the label may run past
    assert ys.min() >= ymin - 40 and ys.max() <= ymax + margin  # the label strip sits just above the box
    inside = (xs > xmin + margin) & (xs < xmax - margin) & (ys > ymin + margin) & (ys < ymax - margin)
    assert not inside.any()  # the face itself is untouched
    coffee = cv2.imread(str(out / "coffee-detected.png"))
    assert np.array_equal(coffee, cv2.imread(str(photos["coffee"])))


def every_box(res10, photos, out, backend: str, env: dict) -> tuple[subprocess.CompletedProcess, list[list[dict]]]:
    """``demo.detect`` of both photos on ``backend`` at threshold 0: every row the net keeps, per photo."""
    done = subprocess.run([CAFFETOOL, "demo.detect", f"{photos['astronaut']},{photos['coffee']}",
                           *model_flags(res10, photos), "--backend", backend, "--threshold", "0", "--out", str(out)],
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "detections.json").read_text())
    assert report["backend"] == backend and report["threshold"] == 0
    return done, [image["detections"] for image in report["images"]]


@pytest.fixture(scope="module")
def opencv_boxes(res10, photos, opencv4_path, tmp_path_factory):
    """Every box of ``--backend opencv`` where OpenCV 4 is installed: its own SSD layers run Caffe's
    files, behind the same preprocessing and the same reading of the rows."""
    return every_box(res10, photos, tmp_path_factory.mktemp("opencv") / "out", "opencv",
                     {"PYTHONPATH": str(opencv4_path)})[1]


def test_the_opencv_backend_finds_the_same_box_through_the_same_door(opencv_boxes, opencv4):
    astronaut, coffee = opencv_boxes
    assert len(astronaut) == 126 and len(coffee) == 98  # every row the net keeps, none of OpenCV's padding
    assert all(d["confidence"] > 0 and d["label"] == "face" for d in astronaut + coffee)
    face = opencv4["astronaut"][0]
    assert abs(astronaut[0]["confidence"] - face[0]) < 1e-6
    assert np.abs(np.array([astronaut[0]["box"][k] for k in ("xmin", "ymin", "xmax", "ymax")]) - face[1:]).max() < 1e-3


def row(d: dict) -> np.ndarray:
    """A detection as numbers: label id, confidence, the normalised box."""
    box = d["box_normalized"]
    return np.array([d["label_id"], d["confidence"], box["xmin"], box["ymin"], box["xmax"], box["ymax"]])


def test_the_onnxruntime_backend_on_the_verified_export_finds_the_same_boxes(res10, photos, opencv_boxes, tmp_path):
    """``--backend onnxruntime``: the deploy net and weights exported to ONNX (into this test's own
    cache), verified against Caffe, then run by onnxruntime: every box OpenCV 4 keeps, and no other."""
    done, found = every_box(res10, photos, tmp_path / "out", "onnxruntime", {"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert "to ONNX" in done.stdout + done.stderr and "verified against Caffe first" in done.stdout + done.stderr
    assert list((tmp_path / "cache").rglob("model.onnx"))
    for mine, theirs in zip(found, opencv_boxes):
        assert len(mine) == len(theirs)
        ours, reference = np.array([row(d) for d in mine]), np.array([row(d) for d in theirs])
        nearest = np.abs(ours[:, None, :] - reference[None, :, :]).max(axis=2).min(axis=1)  # ties may swap order
        assert nearest.max() < 1e-4, nearest.max()
    assert row(found[0][0])[1] > 0.99


def classifier_files(caffe, folder):
    """A small classifier's deploy net and weights (made by pycaffe): what demo.detect refuses."""
    deploy = folder / "classifier.prototxt"
    deploy.write_text('layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 dim: 8 '
                      'dim: 8 } } }\nlayer { name: "fc" type: "InnerProduct" bottom: "data" top: "fc" '
                      'inner_product_param { num_output: 2 weight_filler { type: "xavier" } } }\n'
                      'layer { name: "prob" type: "Softmax" bottom: "fc" top: "prob" }\n')
    weights = folder / "classifier.caffemodel"
    caffe.Net(str(deploy), caffe.TEST).save(str(weights))
    return deploy, weights


def test_bad_input_is_one_error_and_nothing_is_written(caffe, res10, photos, tmp_path):
    out = tmp_path / "out"
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not a picture")
    deploy, weights = classifier_files(caffe, tmp_path)
    cases = [
        ([str(tmp_path / "missing.png"), *model_flags(res10, photos)],
         f"Error: IMAGES {tmp_path / 'missing.png'} does not exist\n"),
        ([str(photos["astronaut"]), str(broken), *model_flags(res10, photos)],
         f"Error: {broken}: the body is not an image the demo reads (PNG, JPEG, GIF, BMP or WebP); nothing was "
         "written\n"),
        ([str(photos["astronaut"]), "--deploy", str(deploy), "--weights", str(weights)],
         f"Error: {deploy} is not a detection model: its output 'prob' comes from a Softmax layer, not "
         "DetectionOutput; classify its images with `caffetool demo.classify`\n"),
    ]
    for argv, error in cases:
        done = subprocess.run([CAFFETOOL, "demo.detect", *argv, "--out", str(out)], capture_output=True, text=True,
                              timeout=300)
        assert (done.returncode, done.stderr) == (1, error)
        assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


# --- demo.serve: JSON API, /v2, the page

def infer(base: str, model: str, tensor: triton.InferInput, **options) -> triton.InferResult:
    """An infer request as tritonclient encodes it, sent with httpx, read with tritonclient's decoder."""
    body, json_size = triton.InferenceServerClient.generate_request_body([tensor], **options)
    headers = {} if json_size is None else {"Inference-Header-Content-Length": str(json_size)}
    r = httpx.post(f"{base}/v2/models/{model}/infer", content=body, headers=headers, timeout=60)
    assert r.status_code == 200, r.text
    length = r.headers.get("inference-header-content-length")
    return triton.InferenceServerClient.parse_response_body(r.content, header_length=int(length) if length else None)


def test_serve_answers_boxes_on_the_api_v2_and_the_page(res10, photos, opencv4, tmp_path):
    port = free_port()
    child = start_server(model_flags(res10, photos), port)
    assert child.poll() is None, child.stderr.read()
    base = f"http://127.0.0.1:{port}"
    model = res10[1].stem
    try:
        info = httpx.get(f"{base}/api/model").json()
        assert (info["kind"], info["classes"], info["output"], info["visualize"]) == \
            ("detection", ["background", "face"], "detection_out", False)
        assert (info["mean"], info["channel_swap"], info["scale"]) == ([104.0, 177.0, 123.0], [2, 1, 0], 1.0)

        astronaut, coffee = photos["astronaut"].read_bytes(), photos["coffee"].read_bytes()
        answer = httpx.post(f"{base}/api/classify", content=astronaut, timeout=60).json()
        assert answer["image"] == {"width": 512, "height": 512} and answer["threshold"] == 0.5
        (d,) = answer["detections"]
        face = opencv4["astronaut"][0]
        assert (d["label"], d["label_id"]) == ("face", 1) and abs(d["confidence"] - face[0]) < 1e-5
        assert np.abs(np.array([d["box"][k] for k in ("xmin", "ymin", "xmax", "ymax")]) - face[1:]).max() <= 1.0
        assert httpx.post(f"{base}/api/classify?threshold=1", content=astronaut, timeout=60).json()["detections"] == []
        everything = httpx.post(f"{base}/api/classify?threshold=0", content=astronaut, timeout=60).json()["detections"]
        assert len(everything) > 1 and everything[0] == d
        r = httpx.post(f"{base}/api/classify?threshold=2", content=astronaut)
        assert (r.status_code, r.json()) == (400, {"error": "threshold must be from 0 to 1, got 2"})
        form = [("file", ("astronaut.png", astronaut, "image/png")), ("threshold", (None, b"0.9")),
                ("file", ("coffee.png", coffee, "image/png"))]
        both = httpx.post(f"{base}/api/classify", files=form, timeout=60).json()
        assert [(a["file"], a["threshold"], len(a["detections"])) for a in both] == \
            [("astronaut.png", 0.9, 1), ("coffee.png", 0.9, 0)]
        assert both[0]["detections"][0]["box"] == d["box"]

        meta = httpx.get(f"{base}/v2/models/{model}").json()
        assert meta["outputs"] == [{"name": "detection_out", "datatype": "FP32", "shape": [-1, 7], "parameters": {
            "content": "detections", "columns": ["image", "label", "confidence", "xmin", "ymin", "xmax", "ymax"],
            "labels": ["background", "face"]}}]
        images = triton.InferInput("image", [2], "BYTES")
        images.set_data_from_numpy(np.array([astronaut, coffee], dtype=object), binary_data=True)
        rows = infer(base, model, images).as_numpy("detection_out")
        assert rows.dtype == np.float32 and rows.ndim == 2 and rows.shape[1] == 7
        assert set(rows[:, 0]) <= {0.0, 1.0} and (rows[:, 1] >= 0).all()
        (best,) = rows[rows[:, 2] >= 0.5]
        assert best[0] == 0 and best[1] == 1 and abs(best[2] - face[0]) < 1e-5
        assert np.abs(best[3:] * 512 - face[1:]).max() <= 1.0
        blob = np.concatenate([facedetector.blob(cv2.imread(str(photos[n]))) for n in ("astronaut", "coffee")])
        data = triton.InferInput("data", list(blob.shape), "FP32")
        data.set_data_from_numpy(blob, binary_data=True)
        raw = infer(base, model, data, outputs=[triton.InferRequestedOutput("detection_out", binary_data=False)])
        assert np.allclose(raw.as_numpy("detection_out"), rows, atol=1e-6)  # OpenCV's blob: the same rows
        bad = httpx.post(f"{base}/v2/models/{model}/infer", json={
            "inputs": [{"name": "image", "datatype": "BYTES", "shape": [1], "data": ["x"]}],
            "outputs": [{"name": "detection_out", "parameters": {"classification": 1}}]})
        assert bad.status_code == 400 and "classification extension does not apply" in bad.json()["error"]

        browse(base, photos["astronaut"])
    finally:
        stop(child)


def browse(base: str, photo) -> None:
    """The page in Chromium: the photo uploaded, one box drawn and labelled, the slider to 1.0 hides it."""
    with chromium.launched() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(base)
        page.wait_for_selector("#model:has-text('detection, 2 labels')")
        assert page.is_hidden("#draw-panel") and page.is_visible("#threshold")
        assert page.input_value("#threshold") == "0.5"
        page.set_input_files("#file", str(photo))
        page.wait_for_selector("#boxes .box")
        assert page.locator("#boxes .box").count() == 1
        assert page.text_content("#boxes .box text").startswith("face 1.000")
        assert page.inner_text("#predicted") == "— 1 × face"
        drawn, shown = page.locator("#boxes .box rect").first.bounding_box(), page.locator("#photo").bounding_box()
        assert 0.1 < drawn["width"] / shown["width"] < 0.25  # the face's box, scaled with the photo
        page.focus("#threshold")
        page.keyboard.press("End")  # the slider to 1.0, by keyboard
        assert page.input_value("#threshold") == "1"
        page.wait_for_function("document.querySelectorAll('#boxes .box').length === 0")
        assert page.inner_text("#threshold-value") == "1.00" and page.inner_text("#predicted") == "— no box"
        assert page.inner_text("#results tbody td:nth-child(3)") == "no box"
        assert errors == []
