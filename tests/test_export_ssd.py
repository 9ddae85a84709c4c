"""The SSD fork's layers exported: OpenCV's res10 face detector as published, to ONNX and to PyTorch
through ``caffetool export``, and a small SSD net of the test's own that exercises the layers'
other settings, each verified by the export against the engine and checked here again.

The detections of the written models — onnxruntime and OpenCV 5 on the ONNX file, the PyTorch export's
``model.py`` — are compared with pycaffe's and with OpenCV 4's own Caffe importer (its wheel installed
into ``tmp_path``, run in a child process) on scikit-image's astronaut (one face) and coffee (none):
every row of ``detection_out`` (confidence threshold 0.01, ``keep_top_k`` 200), in order, and the
faces above 0.5. Tolerance: :data:`ROWS_ATOL` on confidences and boxes (boxes in units of the image).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import cv2
import httpx
import numpy as np
import onnx
import pytest
import torch

from benchmarks import facedetector
from caffetool.backends import onnxrt
from caffetool.errors import ExportError
from caffetool.export import exporter
from caffetool.inference.modelfiles import ModelFiles
from caffetool.serving import detector

from .processes import stop
from .test_demo import free_port, start_server
from .test_export_layers import dims, inputs, layer
from .test_export_pytorch import imported
from .test_project_cli import caffetool, succeeded

pytestmark = pytest.mark.engine
ROWS_ATOL = 1e-5  # confidences and box corners of a written model against Caffe's rows
TIE = 1e-6  # confidences closer than this may be in either order
FACE = 0.5  # the confidence above which OpenCV's sample draws a face
CLI_IMAGES = "4"  # drawn images the CLI exports verify on here (its default is 16)

OPENCV4_SCRIPT = textwrap.dedent("""
    import sys
    import cv2
    import numpy as np
    assert cv2.__version__.startswith("4."), cv2.__version__
    net = cv2.dnn.readNetFromCaffe(sys.argv[1], sys.argv[2])
    for path in sys.argv[3:]:
        net.setInput(np.load(path))
        np.save(path.replace(".npy", ".cv4.npy"), net.forward())
""")


# --- res10 as published ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def res10(tmp_path_factory) -> tuple[Path, Path]:
    return facedetector.files(tmp_path_factory.mktemp("res10-files"))


@pytest.fixture(scope="module")
def exported(res10, tmp_path_factory) -> Path:
    """res10 exported by the command, to ONNX and to PyTorch, in one folder."""
    folder = tmp_path_factory.mktemp("res10-exports")
    deploy, weights = res10
    for out, to in (("res10.onnx", "onnx"), ("res10.py", "pytorch")):
        succeeded(caffetool("export", "--deploy", str(deploy), "--weights", str(weights), "--out", out, "--to", to,
                            "--images", CLI_IMAGES, cwd=folder, timeout=600))
    return folder


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> dict[str, np.ndarray]:
    """The net's input for each photo, as OpenCV's sample makes it."""
    folder = tmp_path_factory.mktemp("photos")
    return {name: facedetector.blob(cv2.imread(str(facedetector.photo(name, folder))))
            for name in facedetector.PHOTOS}


def caffe_rows(caffe: Any, deploy: Path, weights: Path, blob: np.ndarray) -> np.ndarray:
    net = caffe.Net(str(deploy), str(weights), caffe.TEST)
    net.blobs["data"].reshape(*blob.shape)
    net.blobs["data"].data[...] = blob
    return net.forward()["detection_out"].copy()


def same_rows(got: np.ndarray, want: np.ndarray, who: str) -> None:
    """Every row, in order: image and label exactly, confidence and box within :data:`ROWS_ATOL` (of the
    largest number among them where that is above 1: the boxes of the test's own net run far out).
    Rows whose confidences in Caffe tie within :data:`TIE` may come in either order (Caffe orders
    them by prior; a model's rounding may swap them)."""
    got, want = got.reshape(-1, 7), want.reshape(-1, 7)
    assert len(got) == len(want), f"{who}: {len(got)} rows, Caffe {len(want)}"
    np.testing.assert_array_equal(got[:, :2], want[:, :2], err_msg=who)
    got = got.copy()
    starts = [0] + [k for k in range(1, len(want)) if not np.array_equal(want[k, :2], want[k - 1, :2])
                    or want[k - 1, 2] - want[k, 2] > TIE] + [len(want)]
    for begin, end in zip(starts, starts[1:]):
        if end - begin > 1:  # a tie: Caffe's rows in the order of their boxes, and the model's
            got[begin:end] = got[begin:end][np.lexsort(got[begin:end, 3:].T[::-1])]
            got[begin:end] = got[begin:end][np.argsort(np.lexsort(want[begin:end, 3:].T[::-1]))]
    scale = max(1.0, float(np.abs(want[:, 2:]).max(initial=0.0)))
    np.testing.assert_allclose(got[:, 2:], want[:, 2:], rtol=0, atol=ROWS_ATOL * scale, err_msg=who)


def test_res10_exports_to_onnx_and_pytorch_verified_on_detections(exported):
    """Both records: verified, every detection compared row by row, the priors exact."""
    for record in ("res10.export.json", "res10.pytorch.export.json"):
        verification = json.loads((exported / record).read_text())["verification"]
        assert verification["passed"] and verification["source"] == f"{CLI_IMAGES} drawn images (seed 0)"
        # keep_top_k 200 of each image: every row a detection, none of Caffe's rows of -1
        assert verification["detections"] == 200 * int(CLI_IMAGES), record
        layers = {f["type"]: f for f in verification["layers"]}
        assert layers["DetectionOutput"]["max_rel_error"] <= 1e-5, record
        assert all(f["max_abs_error"] == 0 for f in verification["layers"] if f["type"] == "PriorBox")
        assert {"Normalize", "Permute", "PriorBox"} <= set(layers)


def test_res10_detections_on_photos_equal_opencv_4s_and_caffes(caffe, res10, exported, photos, tmp_path):
    """onnxruntime, OpenCV 5 and PyTorch on the exports, OpenCV 4 and pycaffe on Caffe's files: the same
    rows. One face on the astronaut at 0.99999, none above 0.5 on the coffee."""
    deploy, weights = res10
    opencv4 = tmp_path / "opencv4"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(opencv4),
                           "opencv-python-headless>=4.8,<5"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    for name, blob in photos.items():
        np.save(tmp_path / f"{name}.npy", blob)
    env = {**os.environ, "PYTHONPATH": str(opencv4)}
    done = subprocess.run([sys.executable, "-c", OPENCV4_SCRIPT, str(deploy), str(weights),
                           *(str(tmp_path / f"{name}.npy") for name in photos)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]

    onnx_path = exported / "res10.onnx"
    session = onnxrt.model_of(onnx_path)
    opencv5 = cv2.dnn.readNetFromONNX(str(onnx_path))
    model = imported(exported / "res10.py").load()
    faces = {}
    for name, blob in photos.items():
        want = caffe_rows(caffe, deploy, weights, blob)
        opencv5.setInput(blob)
        with torch.inference_mode():
            answers = {"OpenCV 4": np.load(tmp_path / f"{name}.cv4.npy"),
                       "onnxruntime": session({"data": blob})["detection_out"],
                       "OpenCV 5": opencv5.forward(),
                       "PyTorch": model(torch.from_numpy(blob)).numpy()}
        assert len(want.reshape(-1, 7)) > 50, name  # low-confidence rows too, above 0.01
        padded = answers["OpenCV 4"].reshape(-1, 7)  # OpenCV 4 gives keep_top_k rows, the unused ones 0
        assert not padded[len(want.reshape(-1, 7)):].any(), name
        answers["OpenCV 4"] = padded[:len(want.reshape(-1, 7))]
        for who, got in answers.items():
            same_rows(got, want, f"{name}, {who}")
        rows = want.reshape(-1, 7)
        faces[name] = rows[rows[:, 2] > FACE]
    assert len(faces["astronaut"]) == 1 and len(faces["coffee"]) == 0
    assert faces["astronaut"][0, 1] == 1 and faces["astronaut"][0, 2] == pytest.approx(0.999987, abs=1e-5)


# --- res10's export, with its preprocessing and labels, served from a model repository -------------

MEAN = "104,177,123"  # OpenCV's sample's mean, B, G, R


def test_the_labels_of_a_detection_net_are_checked_against_its_num_classes(res10, tmp_path):
    """The labels of a detection net name its label ids, one line each, as many as DetectionOutput's
    num_classes (2: background and face): three lines are refused by name with nothing written."""
    deploy, weights = res10
    labels = tmp_path / "labels.txt"
    labels.write_text("background\nface\nhat\n")
    done = caffetool("export", "--deploy", str(deploy), "--weights", str(weights), "--labels", str(labels),
                     "--mean-values", MEAN, "--out", "res10.onnx", "--images", "1", cwd=tmp_path, timeout=600)
    assert (done.returncode, done.stderr) == (1, (
        f"Error: {labels} names 3 labels, but the detection net's DetectionOutput layer 'detection_out' has "
        "num_classes 2: a detection net's labels file names each label id on its own line, the background "
        "(label 0) included; give the labels of this net (nothing was written)\n"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["labels.txt"]


@pytest.fixture(scope="module")
def repository(res10, tmp_path_factory) -> Path:
    """res10 exported with OpenCV's mean and its two labels, its model.onnx alone in a model repository."""
    folder = tmp_path_factory.mktemp("res10-served")
    deploy, weights = res10
    (folder / "labels.txt").write_text("background\nface\n")
    succeeded(caffetool("export", "--deploy", str(deploy), "--weights", str(weights), "--labels",
                        str(folder / "labels.txt"), "--mean-values", MEAN, "--out", "res10.onnx", "--images",
                        CLI_IMAGES, cwd=folder, timeout=600))
    version = folder / "repository" / "faces" / "1"
    version.mkdir(parents=True)
    (version / "model.onnx").write_bytes((folder / "res10.onnx").read_bytes())
    return folder


def test_a_detection_exports_metadata_says_how_the_demo_feeds_it(repository):
    """The steps of the demo's stretch, in the record and the model's metadata alike: the whole image
    resized to 300x300, its 0-255 pixels in BGR, minus the mean, unscaled; the labels beside them."""
    steps = {"input": "the image as decoded, of any size: its 8-bit pixel values 0-255, RGB, or one grey channel",
             "resize": "stretch", "size": [300, 300],
             "interpolation": "bilinear: OpenCV's cv2.resize (INTER_LINEAR) of the 8-bit pixels, the whole image, "
                              "neither cropped nor kept to its aspect ratio",
             "layout": "NCHW", "white_on_black": False, "image_dims": None, "crop": None, "channel_swap": [2, 1, 0],
             "channel_order": "BGR", "raw_scale": 1.0, "mean": [104.0, 177.0, 123.0], "input_scale": 1.0}
    assert json.loads((repository / "res10.export.json").read_text())["preprocessing"] == steps
    props = {p.key: p.value for p in onnx.load(str(repository / "res10.onnx")).metadata_props}
    assert json.loads(props["caffetool.preprocessing"]) == steps
    assert json.loads(props["caffetool.labels"]) == ["background", "face"]


def test_the_served_export_finds_the_box_caffe_finds(engine, res10, repository, tmp_path):
    """``demo.serve --model-repository`` with the export's model.onnx: a detector on onnxruntime, fed as
    the caffe backend feeds the deploy net, so its face is Caffe's within 1e-3 pixels."""
    deploy, weights = res10
    caffe_backend = detector.load(engine, ModelFiles(deploy, weights, None, mean_values=(104.0, 177.0, 123.0)))
    astronaut, coffee = (facedetector.photo(name, tmp_path).read_bytes() for name in ("astronaut", "coffee"))
    (want,) = caffe_backend.detect(astronaut)["detections"]
    port = free_port()
    child = start_server(["--model-repository", str(repository / "repository")], port)
    try:
        assert child.poll() is None, child.stderr.read()
        base = f"http://127.0.0.1:{port}"
        info = httpx.get(f"{base}/api/model").json()
        assert (info["kind"], info["backend"], info["classes"], info["output"]) == \
            ("detection", "onnxruntime", ["background", "face"], "detection_out")
        assert (info["mean"], info["channel_swap"], info["scale"]) == ([104.0, 177.0, 123.0], [2, 1, 0], 1.0)
        answer = httpx.post(f"{base}/api/classify", content=astronaut, timeout=60).json()
        (got,) = answer["detections"]
        assert (got["label"], got["label_id"]) == ("face", 1) and abs(got["confidence"] - want["confidence"]) < 1e-5
        gap = max(abs(got["box"][k] - want["box"][k]) for k in ("xmin", "ymin", "xmax", "ymax"))
        assert gap < 1e-3, (got["box"], want["box"])
        assert httpx.post(f"{base}/api/classify", content=coffee, timeout=60).json()["detections"] == []
    finally:
        stop(child)


# --- an SSD net of the test's own -----------------------------------------------------------------

CLASSES = 3
# two feature maps (12x12 after Normalize, 6x6 after pooling); per cell 6 priors on the first (two
# sizes, ratios 2 and 3 flipped, clipped, four variances) and 4 on the second (two min_sizes, one of
# them fractional, ratio 2 unflipped, its own step, offset and image size)
PRIORS = {"norm_a": ("min_size: 3 max_size: 6 aspect_ratio: 2 aspect_ratio: 3 flip: true clip: true "
                     "variance: 0.1 variance: 0.1 variance: 0.2 variance: 0.2", 6),
          "pool": ("min_size: 5.5 min_size: 8 aspect_ratio: 2 aspect_ratio: 2.0000005 flip: false step: 2.5 "
                   "offset: 0.3 img_size: 14 variance: 0.1", 4)}


def heads(bottom: str, per_cell: int) -> str:
    """Location (one box per class) and confidence predictions of one feature map, permuted to
    (N, H, W, C) and flattened, and its priors."""
    conv = "kernel_size: 3 pad: 1 num_output: {}"
    return (layer("Convolution", f"{bottom}_loc", bottom, convolution=conv.format(per_cell * CLASSES * 4))
            + layer("Permute", f"{bottom}_loc_perm", f"{bottom}_loc", permute="order: 0 order: 2 order: 3 order: 1")
            + layer("Flatten", f"{bottom}_loc_flat", f"{bottom}_loc_perm", flatten="axis: 1")
            + layer("Convolution", f"{bottom}_conf", bottom, convolution=conv.format(per_cell * CLASSES))
            + layer("Permute", f"{bottom}_conf_perm", f"{bottom}_conf", permute="order: 0 order: 2 order: 3 order: 1")
            + layer("Flatten", f"{bottom}_conf_flat", f"{bottom}_conf_perm", flatten="axis: 1")
            + layer("PriorBox", f"{bottom}_priors", f"{bottom} data", prior_box=PRIORS[bottom][0]))


SSD_NET = (
    inputs(data=(1, 3, 12, 12))
    + layer("Convolution", "conv", convolution="num_output: 8 kernel_size: 3 pad: 1")
    + layer("Normalize", "norm_a", "conv", norm="across_spatial: false channel_shared: false")
    + layer("Normalize", "norm_b", "conv", norm="across_spatial: true channel_shared: true")
    + layer("Normalize", "norm_c", "conv", norm="across_spatial: true channel_shared: false eps: 0.001")
    + layer("Normalize", "norm_d", "conv", norm="across_spatial: false channel_shared: true")
    + layer("Permute", "partial", "conv", permute="order: 0 order: 3")
    + layer("PriorBox", "rect", "conv data", prior_box="min_size: 4 aspect_ratio: 0.5 img_h: 12 img_w: 16 "
                                                         "step_h: 1 step_w: 1.5")
    + layer("Pooling", "pool", "conv", pooling="pool: MAX kernel_size: 2 stride: 2")
    + heads("norm_a", PRIORS["norm_a"][1]) + heads("pool", PRIORS["pool"][1])
    + layer("Concat", "loc", "norm_a_loc_flat pool_loc_flat", concat="axis: 1")
    + layer("Concat", "conf", "norm_a_conf_flat pool_conf_flat", concat="axis: 1")
    + layer("Reshape", "conf_classes", "conf", reshape=f"shape {{ {dims((0, -1, CLASSES))} }}")
    + layer("Softmax", "conf_softmax", "conf_classes", softmax="axis: 2")
    + layer("Flatten", "conf_flat", "conf_softmax", flatten="axis: 1")
    + layer("Concat", "priors", "norm_a_priors pool_priors", concat="axis: 2")
    # each class its own boxes, corners moved in units of the prior's size; a background class
    + layer("DetectionOutput", "detect_a", "loc conf_flat priors", detection_output=(
        f"num_classes: {CLASSES} share_location: false background_label_id: 0 code_type: CORNER_SIZE "
        "nms_param { nms_threshold: 0.3 top_k: 60 } keep_top_k: 25 confidence_threshold: 0.3"))
    # corners moved as they are, no background, no threshold and no limits: every class's boxes
    + layer("DetectionOutput", "detect_b", "loc conf_flat priors", detection_output=(
        f"num_classes: {CLASSES} share_location: false background_label_id: -1 code_type: CORNER "
        "variance_encoded_in_target: true nms_param { nms_threshold: 0.5 }"))
)


def ssd_files(caffe: Any, folder: Path, text: str = SSD_NET) -> ModelFiles:
    """The net in ``folder`` with seeded weights small enough that its confidences stay apart (no two
    priors of one class saturate to the same value, where the order Caffe keeps is a tie's)."""
    deploy, weights = folder / "deploy.prototxt", folder / "weights.caffemodel"
    deploy.write_text(f'name: "ssd"\n{text}')
    net = caffe.Net(str(deploy), caffe.TEST)
    rng = np.random.default_rng(0)
    for name, blobs in net.params.items():
        for blob in blobs:
            blob.data[...] = rng.uniform(1, 3, blob.data.shape) if name.startswith("norm") else \
                rng.standard_normal(blob.data.shape) * 0.3
    net.save(str(weights))
    return ModelFiles(deploy, weights, labels=None, mean_values=(127.5,) * 3, scale=1 / 64)


def own_rows(caffe: Any, files: ModelFiles, batch: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The test's own inputs at ``batch`` and pycaffe's rows of each DetectionOutput on them."""
    net = caffe.Net(str(files.deploy), str(files.weights), caffe.TEST)
    x = np.random.default_rng(1).standard_normal((batch, 3, 12, 12)).astype(np.float32) * 2
    net.blobs["data"].reshape(*x.shape)
    net.blobs["data"].data[...] = x
    net.forward()
    return {"data": x}, {blob: net.blobs[blob].data.copy() for blob in ("detect_a", "detect_b")}


@pytest.mark.parametrize("to,batch", [("onnx", None), ("onnx", 2), ("pytorch", None)])
def test_an_ssd_net_of_other_settings_exports_layer_by_layer(engine, caffe, tmp_path, to, batch):
    """Every layer within 1e-5 of Caffe in the export's own verification (a fixed batch of 2 pads the
    last of 3 images), then the written model on inputs of the test's own beside pycaffe's rows."""
    files = ssd_files(caffe, tmp_path)
    out = tmp_path / ("ssd.py" if to == "pytorch" else "ssd.onnx")
    result = exporter.export(engine, exporter.ExportRequest(files, out, batch=batch, images=3, to=to),
                             say=lambda _: None)
    verification = result.verification
    assert verification.passed and verification.detections > 50
    assert all(f.rel <= 1e-5 for f in verification.layers), [(f.layer, f.rel) for f in verification.layers]
    assert {f.type for f in verification.layers} >= {"Normalize", "Permute", "PriorBox", "DetectionOutput"}
    feeds, want = own_rows(caffe, files, batch or 3)
    if to == "pytorch":
        with torch.inference_mode():
            got = imported(out).load()(torch.from_numpy(feeds["data"]))
        returned = caffe.Net(str(files.deploy), caffe.TEST).outputs  # forward returns the net's outputs
        answers = {"PyTorch": {blob: g.numpy() for blob, g in zip(returned, got)}}
    else:
        opencv5 = cv2.dnn.readNetFromONNX(str(out))
        opencv5.setInput(feeds["data"])
        answers = {"onnxruntime": onnxrt.model_of(out)(feeds),
                   "OpenCV 5": dict(zip(opencv5.getUnconnectedOutLayersNames(),
                                        opencv5.forward(opencv5.getUnconnectedOutLayersNames())))}
    for who, got in answers.items():
        for blob in ("detect_a", "detect_b"):
            assert len(want[blob].reshape(-1, 7)) > 10, blob
            same_rows(got[blob], want[blob], f"{who}, {blob}")


def test_priors_and_rows_of_a_batch_without_detections(engine, caffe, tmp_path):
    """No confidence above the threshold in any image: Caffe's one row [image, -1, ...] per image, which
    the ONNX export writes as well."""
    files = ssd_files(caffe, tmp_path, SSD_NET.replace("confidence_threshold: 0.3", "confidence_threshold: 1"))
    out = tmp_path / "ssd.onnx"
    exporter.export(engine, exporter.ExportRequest(files, out, images=2), say=lambda _: None)
    feeds, want = own_rows(caffe, files, 3)
    np.testing.assert_array_equal(want["detect_a"].reshape(-1, 7), [[k, *[-1] * 6] for k in range(3)])
    same_rows(onnxrt.model_of(out)(feeds)["detect_a"], want["detect_a"], "onnxruntime")


def test_adaptive_suppression_is_refused_by_the_onnx_export_and_kept_by_pytorchs(engine, caffe, tmp_path):
    """``eta`` below 1 lowers the threshold after each kept box: ONNX's NonMaxSuppression cannot, the
    PyTorch export's own suppression does, verified."""
    files = ssd_files(caffe, tmp_path, SSD_NET.replace("nms_threshold: 0.5", "nms_threshold: 0.9 eta: 0.8"))
    with pytest.raises(ExportError, match=r"layer 'detect_b' \(DetectionOutput\) cannot be exported: "
                                          r"nms_param.eta is 0.8: adaptive suppression .*\(--to pytorch\) covers it"):
        exporter.export(engine, exporter.ExportRequest(files, tmp_path / "ssd.onnx", images=2), say=lambda _: None)
    assert not (tmp_path / "ssd.onnx").exists()
    result = exporter.export(engine, exporter.ExportRequest(files, tmp_path / "ssd.py", images=2, to="pytorch"),
                             say=lambda _: None)
    assert result.verification.passed and result.verification.detections > 50
