"""The demo page's routes: classify many, the test set's examples, the run's page, visualizations;
their refusals; and the page in a real browser (Debian's Chromium), by mouse and by keyboard, where
the documentation's pictures of the demo and run pages are taken (:mod:`tests.screenshots`)."""

from __future__ import annotations

import base64
import csv
import json
import os
import shutil
import socket
import subprocess
import sys

import cv2
import httpx
import numpy as np
import pytest

from caffetool.data import datum, db
from caffetool.demo import multipart, webapp
from caffetool.demo.routetable import Endpoint, RouteTableError, routed
from caffetool.runpage import examples, runview

from . import chromium, screenshots
from .conftest import PROJECT
from .test_demo import free_port, start_server, stop

MAX_BODY = 10 * 1024 * 1024


@pytest.fixture(scope="module")
def run_copy(trained_run, tmp_path_factory):
    """The trained run copied (the session's run stays untouched), evaluations added by :func:`server`."""
    run = tmp_path_factory.mktemp("page-run") / trained_run.name
    shutil.copytree(trained_run, run, ignore=shutil.ignore_patterns("tensorboard"))
    return run


@pytest.fixture(scope="module")
def caffe_pb2(caffe):
    return caffe.proto.caffe_pb2


@pytest.fixture(scope="module")
def test_records(run_copy, caffe_pb2):
    """(pixels as an array, label) of the first 200 records of the run's test database, read directly."""
    path = examples.database(run_copy, caffe_pb2)
    records = []
    for channels, height, width, data, label in datum.read(path, caffe_pb2):
        records.append((np.frombuffer(data, np.uint8).reshape(channels, height, width), label))
        if len(records) == 200:
            break
    return records


@pytest.fixture(scope="module")
def server(run_copy):
    """The demo serving the copied run; then two evaluations made while it serves (the page reads them
    at each request): a stale one, and ``caffetool evaluate``'s."""
    port = free_port()
    child = start_server(["--run", str(run_copy)], port)
    assert child.poll() is None, child.stderr.read()
    try:
        older = run_copy / "eval" / "older"
        older.mkdir(parents=True)
        (older / "summary.json").write_text(json.dumps({"weights": "older.caffemodel", "count": 1, "top1": 0.0}))
        os.utime(older / "summary.json", (1_000_000_000, 1_000_000_000))
        done = subprocess.run([sys.executable, "-m", "invoke", "evaluate", str(run_copy), "--no-caffe-test"],
                              cwd=PROJECT, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(child)


def raw_get(base: str, target: str) -> tuple[int, bytes]:
    """GET with the request target sent byte for byte (an HTTP client would normalise ``..``)."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def png_of(image: np.ndarray) -> bytes:
    return cv2.imencode(".png", image.transpose(1, 2, 0))[1].tobytes()


# --- multipart, without a server

def test_several_parts_keep_their_order_and_the_last_component_of_their_names():
    body = (b'--b\r\nContent-Disposition: form-data; name="file"; filename="C:\\\\fakepath\\\\one.png"\r\n\r\n1\r\n'
            b'--b\r\nContent-Disposition: form-data; name="file"; filename="dir/two.png"\r\n\r\n22\r\n'
            b'--b\r\nContent-Disposition: form-data; name="empty"; filename="none.png"\r\n\r\n\r\n'
            b'--b\r\nContent-Disposition: form-data; name="field"\r\n\r\n333\r\n--b--\r\n')
    got = multipart.uploads("multipart/form-data; boundary=b", body)
    assert got == [multipart.Upload("one.png", b"1"), multipart.Upload("two.png", b"22"),
                   multipart.Upload(None, b"333")]
    with pytest.raises(multipart.TooManyFiles, match="^3 files in one request, over the limit of 2$"):
        multipart.uploads("multipart/form-data; boundary=b", body, max_files=2)
    assert multipart.uploads("image/png", b"raw") == [multipart.Upload(None, b"raw")]


def test_a_run_without_a_readable_test_database_has_no_examples(caffe_pb2, tmp_path):
    net = tmp_path / "train_val.prototxt"
    net.write_text('layer { name: "d" type: "Data" top: "data" include { phase: TRAIN } '
                   'data_param { source: "train_lmdb" backend: LMDB batch_size: 1 } }\n')
    with pytest.raises(examples.NoExamples, match="has no TEST-phase Data layer: no test images to show$"):
        examples.for_run(tmp_path, caffe_pb2)
    net.write_text('layer { name: "d" type: "Data" top: "data" include { phase: TEST } '
                   'data_param { source: "missing_lmdb" backend: LMDB batch_size: 1 } }\n')
    assert examples.database(tmp_path, caffe_pb2) == tmp_path / "missing_lmdb"  # relative to the run, as caffe runs
    with pytest.raises(examples.NoExamples, match=f"^the test database of run {tmp_path} cannot be read: "):
        examples.for_run(tmp_path, caffe_pb2)


# --- classify many

def test_several_files_get_a_list_one_result_or_error_each(server, test_records):
    images = [png_of(image) for image, _ in test_records[:3]]
    singles = [httpx.post(f"{server}/api/classify?top=3", content=png).json() for png in images]
    files = [("file", ("a.png", images[0], "image/png")), ("file", ("notes.txt", b"not an image", "text/plain")),
             ("file", ("b.png", images[1], "image/png")), ("file", ("c.png", images[2], "image/png"))]
    r = httpx.post(f"{server}/api/classify?top=3&input=1", files=files)
    assert r.status_code == 200
    answer = r.json()
    assert [a["file"] for a in answer] == ["a.png", "notes.txt", "b.png", "c.png"]
    assert answer[1] == {"file": "notes.txt", "status": 415,
                         "error": "the body is not an image the demo reads (PNG, JPEG, GIF, BMP or WebP)"}
    for got, single in zip([answer[0], answer[2], answer[3]], singles):
        assert [t["index"] for t in got["top"]] == [t["index"] for t in single["top"]]
        assert got["top"][0]["prob"] == pytest.approx(single["top"][0]["prob"], abs=1e-6)
        assert got["input_png"] and got["timings_ms"]["forward"] > 0


def test_one_file_in_a_form_keeps_the_single_answer(server, test_records):
    r = httpx.post(f"{server}/api/classify?top=2", files={"file": ("a.png", png_of(test_records[0][0]), "image/png")})
    assert r.status_code == 200
    body = r.json()
    assert isinstance(body, dict) and "file" not in body and len(body["top"]) == 2


def test_more_files_than_the_limit_are_413(server, test_records):
    png = png_of(test_records[0][0])
    r = httpx.post(f"{server}/api/classify", files=[("file", (f"{i}.png", png, "image/png")) for i in range(33)])
    assert r.status_code == 413 and r.json() == {"error": "33 files in one request, over the limit of 32"}


def test_a_form_over_the_body_limit_is_413(server):
    r = httpx.post(f"{server}/api/classify", files={"file": ("big.png", b"\0" * (MAX_BODY + 1), "image/png")})
    assert r.status_code == 413 and r.json() == {"error": f"body over the {MAX_BODY:,}-byte limit"}


@pytest.mark.parametrize("query,message", [("top=0", "top must be from 1 to 1000000, got 0"),
                                           ("top=x", "top must be an integer")])
def test_a_bad_top_is_400(server, test_records, query, message):
    r = httpx.post(f"{server}/api/classify?{query}", content=png_of(test_records[0][0]))
    assert r.status_code == 400 and r.json() == {"error": message}


# --- examples from the test set

def test_examples_list_the_test_database_in_order(server, run_copy, caffe_pb2, test_records):
    total = db.count(examples.database(run_copy, caffe_pb2))
    classes = httpx.get(f"{server}/api/model").json()["classes"]
    r = httpx.get(f"{server}/api/examples?count=5&offset=10")
    assert r.status_code == 200
    listing = r.json()
    assert listing["total"] == total and listing["offset"] == 10
    assert listing["examples"] == [{"index": i, "label": test_records[i][1], "class": classes[test_records[i][1]],
                                    "url": f"/api/examples/{i}.png"} for i in range(10, 15)]
    last = httpx.get(f"{server}/api/examples?count=100&offset={total - 2}").json()
    assert [e["index"] for e in last["examples"]] == [total - 2, total - 1]


def test_an_example_is_its_record_as_png(server, test_records):
    for index in (0, 7, 199):
        r = httpx.get(f"{server}/api/examples/{index}.png")
        assert r.status_code == 200 and r.headers["content-type"] == "image/png"
        image = cv2.imdecode(np.frombuffer(r.content, np.uint8), cv2.IMREAD_UNCHANGED)
        assert np.array_equal(image, test_records[index][0][0])


@pytest.mark.parametrize("query,message", [
    ("count=0", "count must be from 1 to 100, got 0"),
    ("count=101", "count must be from 1 to 100, got 101"),
    ("count=ten", "count must be an integer"),
    ("offset=-1", "offset must be from 0 to {last}, got -1"),
    ("offset={total}", "offset must be from 0 to {last}, got {total}"),
])
def test_example_listings_out_of_range_are_400(server, query, message):
    total = httpx.get(f"{server}/api/examples?count=1").json()["total"]
    r = httpx.get(f"{server}/api/examples?" + query.format(total=total))
    assert r.status_code == 400
    assert r.json() == {"error": message.format(total=total, last=total - 1)}


OUT_OF_RANGE = "no example {n}: the test set holds records 0 to {last}"
MISNAMED = "no example {name!r}: examples are named by number, as 0.png"


@pytest.mark.parametrize("name,message", [
    ("{total}.png", OUT_OF_RANGE), ("99999999999.png", OUT_OF_RANGE), ("-1.png", MISNAMED),
    ("abc.png", MISNAMED), ("1.jpg", MISNAMED), ("1", MISNAMED), ("1234567890123.png", MISNAMED),
])
def test_examples_outside_the_database_are_404(server, name, message):
    total = httpx.get(f"{server}/api/examples?count=1").json()["total"]
    name = name.format(total=total)
    r = httpx.get(f"{server}/api/examples/{name}")
    assert r.status_code == 404 and r.headers["content-type"] == "application/json"
    number = name.removesuffix(".png")
    assert r.json() == {"error": message.format(n=number, last=total - 1, name=name)}


# --- the run: JSON, page and images

def test_the_run_as_json(server, run_copy):
    manifest = json.loads((run_copy / "manifest.json").read_text())
    metrics = json.loads((run_copy / "metrics.json").read_text())
    r = httpx.get(f"{server}/api/run")
    assert r.status_code == 200
    run = r.json()
    assert (run["name"], run["model"], run["dataset"], run["iterations"]) == (
        manifest["name"], manifest["model"], manifest["dataset"]["name"], manifest["iterations"])
    assert run["final"] == manifest["final"] and run["timings_s"] == manifest["timings_s"]
    assert run["metrics"] == {"train": metrics["train"][-1], "test": {"0": metrics["test"]["0"][-1]}}
    assert [p["name"] for p in run["plots"]] == sorted(p.name for p in (run_copy / "plots").glob("*.png")
                                                              if not p.is_symlink())
    evaluation = run["evaluation"]  # the newer of the two
    summary = json.loads((run_copy / "eval" / "lenet_iter_600" / "summary.json").read_text())
    assert evaluation == {**summary, "dir": "lenet_iter_600", "images": [
        {"name": name, "url": f"/run/eval/{name}"} for name in ("confusion.png", "mistakes.png")]}


def test_examples_are_classified_as_the_evaluation_classified_them(server, run_copy):
    """The example PNGs carry the records' pixels exactly: the demo's answers are ``evaluate``'s."""
    with open(run_copy / "eval" / "lenet_iter_600" / "predictions.csv") as f:
        rows = list(csv.DictReader(f))[:40]
    with httpx.Client(base_url=server) as client:
        for row in rows:
            png = client.get(f"/api/examples/{row['index']}.png").content
            best = client.post("/api/classify?top=1", content=png).json()["top"][0]
            assert best["label"] == row["predicted"]
            assert best["prob"] == pytest.approx(float(row["probability"]), abs=1e-5)


def test_run_images_are_the_files(server, run_copy):
    for name in runview.RunView(run_copy).plots():
        r = httpx.get(f"{server}/run/plots/{name}")
        assert r.status_code == 200 and r.content == (run_copy / "plots" / name).read_bytes()
    r = httpx.get(f"{server}/run/eval/confusion.png")
    assert r.content == (run_copy / "eval" / "lenet_iter_600" / "confusion.png").read_bytes()


@pytest.mark.parametrize("target", [
    "/run/plots/..%2fmanifest.json", "/run/plots/..%2F..%2Fmanifest.json", "/run/plots/%2e%2e%2fmetrics.json",
    "/run/plots/../manifest.json", "/run/plots/manifest.json", "/run/plots/..%5cmanifest.json",
    "/run/eval/summary.json", "/run/eval/..%2f..%2fmanifest.json", "/run/plots/link.png", "/run/plots/",
])
def test_nothing_outside_the_images_is_served(server, run_copy, target):
    link = run_copy / "plots" / "link.png"
    if not link.is_symlink():
        link.symlink_to(run_copy / "manifest.json")
    status, body = raw_get(server, target)
    assert status == 404 and b'"error"' in body and b"caffe_command" not in body and b"per_class" not in body


def test_the_run_page_lists_figures_curves_and_the_evaluation(server):
    r = httpx.get(f"{server}/run")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    page = r.text
    assert '<img id="plot-loss_accuracy_vs_iters" src="/run/plots/loss_accuracy_vs_iters.png"' in page
    assert '<img id="confusion" src="/run/eval/confusion.png"' in page
    assert page.count('<tr><th scope="row">') == 10 and "link.png" not in page


# --- visualizations

def test_visualizations_of_the_first_convolution_and_a_chosen_layer(server, test_records):
    png = png_of(test_records[0][0])
    r = httpx.post(f"{server}/api/visualize", content=png)
    assert r.status_code == 200, r.text
    shown = r.json()
    assert shown["layer"] == "conv1" and shown["layers"][:2] == ["conv1", "pool1"]
    for key in ("filters_png", "activations_png"):
        image = cv2.imdecode(np.frombuffer(base64.b64decode(shown[key]), np.uint8), cv2.IMREAD_UNCHANGED)
        assert image is not None and image.size > 0
    other = httpx.post(f"{server}/api/visualize?layer=conv2", content=png).json()
    assert other["layer"] == "conv2" and other["activations_png"] != shown["activations_png"]


@pytest.mark.parametrize("query,status", [("layer=no_such_layer", 400), ("layer=a%20b", 400), ("layer=" + "x" * 201, 400)])
def test_visualizations_of_a_bad_layer_are_400(server, test_records, query, status):
    r = httpx.post(f"{server}/api/visualize?{query}", content=png_of(test_records[0][0]))
    assert r.status_code == status and r.json()["error"]


def test_visualize_bodies_have_the_same_limits(server):
    assert httpx.post(f"{server}/api/visualize", content=b"\0" * (MAX_BODY + 1)).status_code == 413
    r = httpx.post(f"{server}/api/visualize", content=b"not an image")
    assert r.status_code == 415 and "not an image" in r.json()["error"]


# --- refusals shared by every route

def test_every_route_of_the_table_is_served_and_no_other(server, run_copy):
    """The table the server and the documentation are built from: a GET route answers 200, a POST
    route reaches its handler (an empty body is refused by it, not by the router), and each route
    refuses the methods it does not list."""
    model = httpx.get(f"{server}/api/model").json()["name"]
    filled = {"name": "0.png", "model": model, "version": "1"}
    for endpoint in webapp.ROUTES:
        path = endpoint.path.format(**filled)
        if endpoint.path.startswith("/run/plots/"):
            path = f"/run/plots/{next(iter(runview.RunView(run_copy).plots()))}"
        if endpoint.path.startswith("/run/eval/"):
            path = "/run/eval/confusion.png"
        method = endpoint.methods[0]
        r = httpx.request(method, f"{server}{path}", content=b"")
        if method == "GET" or endpoint.path == "/v2/repository/index":
            assert r.status_code == 200, (path, r.text[:200])
        else:
            assert r.status_code in (400, 415, 422) and r.json()["error"] not in ("Not Found", "Method Not Allowed"), (
                path, r.status_code, r.text[:200])
        other = "POST" if method == "GET" else "GET"
        assert httpx.request(other, f"{server}{path}").status_code == 405, (other, path)


def test_a_route_table_and_its_handlers_must_agree():
    async def handler(request):
        return None

    table = (Endpoint("/a", "a", ""), Endpoint("/b", "b", "", ("POST",)))
    assert [(r.path, sorted(r.methods)) for r in routed(table, {"a": handler, "b": handler})] == [
        ("/a", ["GET", "HEAD"]), ("/b", ["POST"])]
    with pytest.raises(RouteTableError, match=r"rows without a handler \['b'\], handlers without a row \['c'\]"):
        routed(table, {"a": handler, "c": handler})


def test_unknown_routes_and_methods_are_json(server):
    r = httpx.get(f"{server}/api/nothing")
    assert r.status_code == 404 and r.json() == {"error": "Not Found"}
    r = httpx.get(f"{server}/api/classify")
    assert r.status_code == 405 and r.json() == {"error": "Method Not Allowed"}


def test_model_files_on_opencv_have_no_run_page_examples_nor_visualizations(trained_run, test_records):
    port = free_port()
    child = start_server(["--deploy", str(trained_run / "deploy.prototxt"),
                          "--weights", str(next((trained_run / "snapshots").glob("*.caffemodel"))),
                          "--labels", str(trained_run / "labels.txt"), "--backend", "opencv"], port)
    try:
        base = f"http://127.0.0.1:{port}"
        model = httpx.get(f"{base}/api/model").json()
        assert model["run"] is None and model["examples"] == 0 and model["visualize"] is False
        r = httpx.post(f"{base}/api/visualize", content=png_of(test_records[0][0]))
        assert r.status_code == 501 and "visualizations need the caffe backend" in r.json()["error"]
        no_run = "the demo serves model files given one by one (--deploy), not a run"
        for path in ("/api/run", "/run/plots/lr_vs_iters.png", "/api/examples", "/api/examples/0.png"):
            r = httpx.get(base + path)
            assert r.status_code == 404 and r.json()["error"].startswith(no_run), path
        r = httpx.get(f"{base}/run")
        assert r.status_code == 404 and no_run in r.text
    finally:
        stop(child)


# --- the page in a browser

@pytest.fixture(scope="module")
def browser():
    with chromium.launched() as launched:
        yield launched


@pytest.fixture
def page(browser, server):
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(server)
    page.wait_for_selector("#model:has-text('10 classes')")
    yield page
    context.close()
    assert errors == []


# Images shown without a loaded source (a broken-image placeholder and its alt text), once every
# image the page asked for has arrived or failed.
UNLOADED = """() => [...document.images]
  .filter(img => img.checkVisibility() && !(img.complete && img.naturalWidth > 0))
  .map(img => img.id || img.alt || img.src)"""
HEADERS = "cells => cells.map(cell => cell.innerText.trim())"


def unloaded_images(page) -> list[str]:
    page.wait_for_function("[...document.images].every(img => img.complete)")
    return page.evaluate(UNLOADED)


# A pair of trousers (the run's data set is Fashion-MNIST) in strokes of the mouse, in the canvas's
# pixels: a waistband across the top, then each leg down, three strokes wide.
TROUSERS = ([[(85, y), (195, y)] for y in (30, 45, 60)]
            + [[(x, 30), (x - 10, 255)] for x in (85, 100, 115)]
            + [[(x, 30), (x + 10, 255)] for x in (165, 180, 195)])


def draw(page, strokes: list[list[tuple[int, int]]]) -> None:
    """Each stroke dragged by the mouse from point to point, in steps so that the page sees the moves."""
    box = page.locator("#canvas").bounding_box()
    for stroke in strokes:
        page.mouse.move(box["x"] + stroke[0][0], box["y"] + stroke[0][1])
        page.mouse.down()
        for x, y in stroke[1:]:
            page.mouse.move(box["x"] + x, box["y"] + y, steps=10)
        page.mouse.up()


def test_browser_first_view_then_one_upload(page, server, test_records, tmp_path):
    """Before anything is chosen no image is shown without a source and no results table is shown;
    after an upload, its classes, its input as the net sees it and a row whose every column is named."""
    page.wait_for_selector("#examples button >> nth=11")
    assert unloaded_images(page) == []
    assert page.is_hidden("#seen") and page.is_hidden("#results")
    assert page.inner_text("#current-name").startswith("Nothing classified yet")
    image, label = test_records[0]
    name = httpx.get(f"{server}/api/model").json()["classes"][label].lower().replace(" ", "-") + ".png"
    upload = tmp_path / name
    upload.write_bytes(png_of(image))
    expected = httpx.post(f"{server}/api/classify", content=upload.read_bytes()).json()["top"][0]["label"]
    page.set_input_files("#file", str(upload))
    page.wait_for_selector(f"#results tbody tr td:has-text('{name}')")
    assert page.inner_text("#predicted") == f"— {expected}"
    assert page.is_visible("#seen") and unloaded_images(page) == []
    headers = page.eval_on_selector_all("#results thead th", HEADERS)
    assert len(headers) == page.locator("#results tbody tr").first.locator("td").count() and all(headers), headers
    screenshots.save(page, "demo-upload.png", full_page=True)


def test_browser_a_drawing_is_classified(page, server):
    page.wait_for_selector("#examples button >> nth=11")
    draw(page, TROUSERS)
    page.click("#classify-drawing")
    page.wait_for_selector("#results tbody tr td:has-text('drawing')")
    drawn = page.evaluate("new Promise(done => document.getElementById('canvas').toBlob(done, 'image/png'))"
                          ".then(blob => blob.arrayBuffer()).then(data => [...new Uint8Array(data)])")
    expected = httpx.post(f"{server}/api/classify", content=bytes(drawn)).json()["top"][0]["label"]
    assert page.inner_text("#predicted") == f"— {expected}" == "— Trouser"
    assert page.locator("#bars .bar").count() == 5 and unloaded_images(page) == []
    screenshots.save(page, "demo-drawing.png", full_page=True)


def test_browser_several_files_give_one_row_each(page, server, test_records, tmp_path):
    paths = []
    for i in range(3):
        paths.append(tmp_path / f"item{i}.png")
        paths[-1].write_bytes(png_of(test_records[i][0]))
    (tmp_path / "broken.png").write_bytes(b"not an image at all")
    paths.insert(1, tmp_path / "broken.png")
    page.set_input_files("#file", [str(p) for p in paths])
    page.wait_for_selector("#results tbody tr >> nth=3")
    rows = page.locator("#results tbody tr")
    assert rows.count() == 4
    assert rows.nth(1).inner_text().startswith("broken.png")
    assert "not an image" in rows.nth(1).locator("td.error").inner_text()
    for row, i in ((0, 0), (2, 1), (3, 2)):
        expected = httpx.post(f"{server}/api/classify", content=paths[row].read_bytes()).json()["top"][0]["label"]
        assert rows.nth(row).locator("td").nth(2).inner_text().startswith(expected + " ")
        assert float(rows.nth(row).locator("td.num").inner_text()) > 0
    assert page.inner_text("#predicted") == "— " + rows.nth(0).locator("td").nth(2).inner_text().rsplit(" ", 1)[0]
    assert page.locator("#bars .bar").count() == 5
    assert "1 refused" in page.inner_text("#announce")


def test_browser_clicking_an_example_classifies_it(page, server):
    listing = httpx.get(f"{server}/api/examples?count=12").json()["examples"]
    page.wait_for_selector("#examples button >> nth=11")
    assert page.eval_on_selector("#examples button img", "img => img.complete && img.naturalWidth") == 28
    page.click("#examples li:nth-child(4) button")
    page.wait_for_selector("#results tbody tr td:has-text('example 3')")
    cells = page.locator("#results tbody tr td")
    assert cells.nth(1).inner_text() == listing[3]["class"]
    png = httpx.get(f"{server}/api/examples/3.png").content
    expected = httpx.post(f"{server}/api/classify", content=png).json()["top"][0]["label"]
    assert page.inner_text("#predicted") == f"— {expected}"
    page.click("#more-examples")
    page.wait_for_selector("#examples button >> nth=23")


def test_browser_keyboard_only(page, server, test_records, tmp_path):
    (tmp_path / "one.png").write_bytes(png_of(test_records[5][0]))
    page.wait_for_selector("#examples button >> nth=0")

    def tab_to(check: str, limit: int = 12) -> None:
        for _ in range(limit):
            page.keyboard.press("Tab")
            if page.evaluate(f"(el => {check})(document.activeElement)"):
                return
        raise AssertionError(f"Tab never reached an element where {check}")

    tab_to("el.id === 'file'")
    # A native file input opens its chooser on Enter or Space: the browser's part, and in headless
    # Chromium not reliably observable. What is the page's part: the control is reached by Tab, is a
    # real file input, and choosing a file there classifies it.
    assert page.evaluate("document.activeElement.type") == "file"
    page.set_input_files("#file", str(tmp_path / "one.png"))
    page.wait_for_selector("#results tbody tr td:has-text('one.png')")
    tab_to("el.classList.contains('example')")
    index = page.evaluate("document.activeElement.dataset.index")
    page.keyboard.press("Enter")
    page.wait_for_selector(f"#results tbody tr td:has-text('example {index}')")
    assert page.inner_text("#announce").startswith(f"example {index}: ")


def test_browser_visualizations(page, server):
    page.wait_for_selector("#examples button >> nth=0")
    page.click("#examples li:nth-child(1) button")
    page.wait_for_selector("#results tbody tr td:has-text('example 0')")
    page.click("#visualize")
    page.wait_for_selector("#activations-figure:not([hidden])")
    assert page.eval_on_selector("#filters", "img => img.naturalWidth") > 0
    page.select_option("#layer", "conv2")
    page.wait_for_selector("#activations-caption:has-text('conv2')")
    assert page.eval_on_selector("#activations", "img => img.naturalWidth") > 0


def test_browser_run_page_shows_curves_and_the_confusion_matrix(browser, server):
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    try:
        page.goto(f"{server}/run")
        page.wait_for_load_state("load")
        for image in ("#plot-loss_accuracy_vs_iters", "#plot-lr_vs_iters", "#confusion"):
            assert page.eval_on_selector(image, "img => img.complete && img.naturalWidth") > 0, image
        assert page.locator("#per-class tbody tr").count() == 10 and unloaded_images(page) == []
        screenshots.save(page, "run-page.png")
        screenshots.save(page.locator("figure:has(#plot-loss_accuracy_vs_iters)"), "training-curves.png")
        screenshots.save(page.locator("figure:has(#confusion)"), "confusion-matrix.png")
        page.click("text=Classify images")
        page.wait_for_url(server + "/")
    finally:
        page.close()


def test_labelled_classify_results_are_not_the_runs_evaluation(tmp_path):
    """``demo.classify --labelled`` writes beside ``evaluate``'s folders; the run page shows the latter."""
    for name, split in (("lenet_iter_600", "test"), ("classify-20261123-120000", "images")):
        (tmp_path / "eval" / name).mkdir(parents=True)
        (tmp_path / "eval" / name / "summary.json").write_text(json.dumps({"split": split, "top1": 0.5}))
    os.utime(tmp_path / "eval/lenet_iter_600/summary.json", (1, 1))  # the older of the two
    assert runview.RunView(tmp_path).evaluation().folder == tmp_path / "eval/lenet_iter_600"
