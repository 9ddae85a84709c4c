"""``demo.serve --model-repository DIR``: several models and versions in Triton's layout, a run folder
(linked or copied) or an ONNX export each, driven by Triton's own client; every version answers with
its own weights, the page lists and switches them, and bad repositories are refused by name."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import httpx
import numpy as np
import onnx
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from caffetool.export import exporter
from caffetool.inference import modelfiles, records

from .processes import stop
from .test_demo import free_port, start_server
from .test_demo_page import browser  # noqa: F401 - the browser fixture

pytestmark = pytest.mark.engine
PROJECT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def repository(engine, caffe, trained_run, tmp_path_factory):
    """lenet/1: a link to the trained run; lenet/2: a copy with its last layer's weights halved (other
    answers); exported/1: the run's ONNX export alone, beside Triton's config.pbtxt (left alone)."""
    root = tmp_path_factory.mktemp("repository")
    (root / "lenet").mkdir()
    (root / "lenet" / "1").symlink_to(trained_run)
    second = root / "lenet" / "2"
    shutil.copytree(trained_run, second, symlinks=True)
    weights = {"1": modelfiles.from_run(trained_run).weights, "2": modelfiles.from_run(second).weights}
    net = caffe.Net(str(second / "deploy.prototxt"), str(weights["2"]), caffe.TEST)
    net.params[list(net.params)[-1]][0].data[...] *= 0.5
    net.save(str(weights["2"]))
    run = tmp_path_factory.mktemp("export-run") / trained_run.name
    shutil.copytree(trained_run, run, symlinks=True)
    made = exporter.export(engine, exporter.run_request(run), say=lambda _: None)
    (root / "exported" / "1").mkdir(parents=True)
    shutil.copy(made.model, root / "exported" / "1" / "model.onnx")
    (root / "exported" / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\n')
    return root, weights


@pytest.fixture(scope="module")
def server(repository):
    port = free_port()
    child = start_server(["--model-repository", str(repository[0]), "--max-batch", "8",
                          "--max-queue-delay-us", "1000"], port)
    assert child.poll() is None, child.stderr.read()
    yield f"127.0.0.1:{port}"
    stop(child)


@pytest.fixture(scope="module")
def rows(caffe, trained_run):
    """16 test records as the net takes them."""
    src = records.source(trained_run, "test", caffe.proto.caffe_pb2)
    return next(records.batches(src, caffe.proto.caffe_pb2, 16,
                                (1, 28, 28))).blob


def pycaffe(caffe, run: Path, weights: Path, blob: np.ndarray) -> np.ndarray:
    net = caffe.Net(str(run / "deploy.prototxt"), str(weights), caffe.TEST)
    net.blobs["data"].reshape(*blob.shape)
    net.blobs["data"].data[...] = blob
    return net.forward()["prob"].copy()


def png(grey: np.ndarray) -> bytes:
    """A PNG of a (H, W) image in [0, 1]."""
    return cv2.imencode(".png", np.round(grey * 255).astype(np.uint8))[1].tobytes()


def infer(client: triton.InferenceServerClient, model: str, blob: np.ndarray, version: str = "") -> np.ndarray:
    tensor = triton.InferInput("data", list(blob.shape), "FP32")
    tensor.set_data_from_numpy(blob, binary_data=True)
    return client.infer(model, [tensor], model_version=version).as_numpy("prob")


def test_the_index_and_metadata_list_every_model_and_version(server):
    client = triton.InferenceServerClient(server)
    index = client.get_model_repository_index()
    assert [(m["name"], m["version"], m["state"]) for m in index] == [
        ("exported", "1", "READY"), ("lenet", "1", "READY"), ("lenet", "2", "READY")]
    lenet = client.get_model_metadata("lenet")
    assert lenet["versions"] == ["1", "2"] and lenet["platform"] == "caffe_caffemodel"
    exported = client.get_model_metadata("exported", "1")
    assert exported["platform"] == "onnxruntime_onnx"
    assert exported["inputs"][0] == {"name": "data", "datatype": "FP32", "shape": [-1, 1, 28, 28]}
    assert client.is_model_ready("lenet", "2") and client.is_model_ready("exported")
    with pytest.raises(InferenceServerException, match="model 'lenet' has no version '3'; its versions: 1, 2"):
        client.get_model_metadata("lenet", "3")
    with pytest.raises(InferenceServerException, match="this server serves 'exported', 'lenet'"):
        client.get_model_metadata("config.pbtxt")
    listed = httpx.get(f"http://{server}/api/models").json()["models"]
    assert listed == [{"name": "exported", "versions": ["1"], "backend": "onnxruntime"},
                      {"name": "lenet", "versions": ["1", "2"], "backend": "caffe"}]


def test_each_version_answers_with_its_own_weights(server, repository, caffe, trained_run, rows):
    root, weights = repository
    client = triton.InferenceServerClient(server)
    first, second = (pycaffe(caffe, trained_run, weights[v], rows) for v in ("1", "2"))
    assert not np.array_equal(first, second)
    assert np.array_equal(infer(client, "lenet", rows, "1"), first)  # bitwise: pycaffe behind both
    assert np.array_equal(infer(client, "lenet", rows, "2"), second)
    assert np.array_equal(infer(client, "lenet", rows), second)  # no version: the highest
    onnx = infer(client, "exported", rows)
    np.testing.assert_allclose(onnx, first, atol=1e-5)
    assert (onnx.argmax(1) == first.argmax(1)).all()

    image = png(rows[0][0] / float(rows[0][0].max() or 1))
    answers = {(m, v): httpx.post(f"http://{server}/api/classify?model={m}&version={v}", content=image).json()
               for m, v in (("lenet", "1"), ("lenet", "2"), ("exported", "1"))}
    assert {(a["model"], a["version"]) for a in answers.values()} == set(answers)
    assert answers[("exported", "1")]["top"][0]["label"] == answers[("lenet", "1")]["top"][0]["label"]
    assert httpx.post(f"http://{server}/api/classify?model=nothing", content=image).status_code == 404

    scraped = httpx.get(f"http://{server}/metrics").text
    for model, version in (("lenet", "1"), ("lenet", "2"), ("exported", "1")):
        assert f'nv_inference_count_total{{model="{model}",version="{version}"}}' in scraped
        assert f'caffetool_model_load_seconds{{model="{model}",version="{version}"}}' in scraped


def test_the_page_lists_the_models_and_switches_between_them(browser, server):  # noqa: F811
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(f"http://{server}/?model=lenet&version=1")
        page.wait_for_selector("#model:has-text('lenet (version 1)')")
        page.wait_for_selector("#models-row:not([hidden])")
        options = page.locator("#models option").all_inner_texts()
        assert options == ["exported, version 1 (onnxruntime)", "lenet, version 1 (caffe)", "lenet, version 2 (caffe)"]
        assert page.locator("#examples-panel").is_visible()  # a run: its test set
        assert page.get_attribute("#run-link", "href") == "/run?model=lenet&version=1"
        page.select_option("#models", label="exported, version 1 (onnxruntime)")
        page.wait_for_selector("#model:has-text('exported (version 1)')")
        assert "backend onnxruntime" in page.inner_text("#model")
        assert not page.locator("#examples-panel").is_visible()  # an export has no test set
        page.set_input_files("#file", files=[{"name": "shirt.png", "mimeType": "image/png",
                                              "buffer": png(np.full((28, 28), 0.8))}])
        page.wait_for_selector("#results tbody tr")
        assert errors == []
    finally:
        context.close()


def serve_refused(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "invoke", "demo.serve", "--port", str(free_port()), *args],
                          cwd=PROJECT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    return done.stderr.strip()


def test_bad_repositories_are_refused_by_name_before_serving(tmp_path, trained_run):
    assert serve_refused("--model-repository", str(tmp_path)) == (
        f"Error: --model-repository {tmp_path} holds no model: make {tmp_path}/NAME/1/ a run folder (or a link "
        "to one), or put an export's model.onnx there")
    (tmp_path / "lenet" / "latest").mkdir(parents=True)
    (tmp_path / "lenet" / "\u00b2").mkdir()  # a digit to str.isdigit, not to int: no version either
    assert serve_refused("--model-repository", str(tmp_path)) == (
        f"Error: {tmp_path / 'lenet'} holds no version folder (1/, 2/, ...); put the run or the export in "
        f"{tmp_path / 'lenet' / '1'}")
    (tmp_path / "lenet" / "1").mkdir()
    assert serve_refused("--model-repository", str(tmp_path)).startswith(
        f"Error: {tmp_path / 'lenet' / '1'} holds neither a caffetool run (manifest.json) nor an ONNX export")
    (tmp_path / "lenet" / "1" / "model.onnx").write_bytes(b"not a model")
    assert serve_refused("--model-repository", str(tmp_path)).startswith(
        f"Error: model lenet version 1: {tmp_path / 'lenet' / '1' / 'model.onnx'} cannot be read as an ONNX model")
    assert serve_refused("--model-repository", str(tmp_path), "--run", str(trained_run)) == (
        "Error: give --model-repository DIR or one model (--run, --deploy, --weights), not both")


def test_an_export_of_a_fixed_batch_is_served_a_full_batch_a_pass(engine, caffe, trained_run, rows, tmp_path):
    """An export made with the documented ``--batch 4`` in a repository: any number of images answers,
    each pass filled up to 4 as the export's verification fills it, with pycaffe's answers."""
    run = tmp_path / trained_run.name
    shutil.copytree(trained_run, run, symlinks=True)
    made = exporter.export(engine, exporter.ExportRequest(modelfiles.from_run(run), tmp_path / "out" / "m.onnx",
                                                          batch=4, images=8), say=lambda _: None)
    (tmp_path / "repo" / "fixed" / "1").mkdir(parents=True)
    shutil.copy(made.model, tmp_path / "repo" / "fixed" / "1" / "model.onnx")
    port = free_port()
    child = start_server(["--model-repository", str(tmp_path / "repo")], port)
    try:
        assert child.poll() is None, child.stderr.read()
        client = triton.InferenceServerClient(f"127.0.0.1:{port}")
        expected = pycaffe(caffe, trained_run, modelfiles.from_run(trained_run).weights, rows)
        for n in (1, 3, 4, 9):
            got = infer(client, "fixed", rows[:n])
            np.testing.assert_allclose(got, expected[:n], atol=1e-5)
        image = png(rows[0][0] / float(rows[0][0].max() or 1))
        assert httpx.post(f"http://127.0.0.1:{port}/api/classify", content=image).status_code == 200
    finally:
        stop(child)


BAD_METADATA = {  # version: (what an edit of the export's preprocessing metadata says, the refusal)
    "1": ({"image_dims": [60000, 60000]}, "image_dims (60000, 60000)"),
    "2": ({"channel_swap": [0, 5, 9]}, "channel_swap (0, 5, 9)"),
    "3": ({"mean": [1, 2, 3, 4, 5]}, "a mean of shape (5,)"),
}


def test_a_model_whose_metadata_no_export_writes_is_left_out_and_the_others_served(engine, trained_run, tmp_path):
    """Metadata is a file anyone can edit: a model that would fail every request is refused at load by
    name, and the repository's other models are served."""
    run = tmp_path / trained_run.name
    shutil.copytree(trained_run, run, symlinks=True)
    made = exporter.export(engine, exporter.ExportRequest(modelfiles.from_run(run), tmp_path / "out" / "m.onnx",
                                                          images=8), say=lambda _: None)
    (tmp_path / "repo" / "good").mkdir(parents=True)
    (tmp_path / "repo" / "good" / "1").symlink_to(trained_run)
    for version, (change, _) in BAD_METADATA.items():
        model = onnx.load(str(made.model))
        prop = next(p for p in model.metadata_props if p.key == "caffetool.preprocessing")
        prop.value = json.dumps({**json.loads(prop.value), **change})
        (tmp_path / "repo" / "bad" / version).mkdir(parents=True)
        onnx.save(model, str(tmp_path / "repo" / "bad" / version / "model.onnx"))
    port = free_port()
    child = start_server(["--model-repository", str(tmp_path / "repo")], port)
    try:
        assert child.poll() is None, child.stderr.read()
        index = triton.InferenceServerClient(f"127.0.0.1:{port}").get_model_repository_index()
        assert [(m["name"], m["version"]) for m in index] == [("good", "1")]
    finally:
        stop(child)
    said = child.stderr.read()
    for version, (_, words) in BAD_METADATA.items():
        assert f"Warning: model bad version {version}: " in said and words in said, said
    assert "Traceback" not in said
