"""The demo: a real server started here, real HTTP, a real browser, both backends."""

from __future__ import annotations

import gzip
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cv2
import httpx
import numpy as np
import pytest

from caffetool.data.registry import FASHION_MNIST
from caffetool.errors import NetError
from caffetool.inference import modelfiles
from caffetool.serving import classifier, telemetry

from . import chromium
from .conftest import PROJECT
from .processes import stop
from .test_preprocess import jpeg_bomb, png_16bit_rgba

FASHION_DIR = FASHION_MNIST.local_dirs[0]


@pytest.fixture(scope="module")
def test_images():
    """The first 300 Fashion-MNIST test images as PNG bytes, with their labels."""
    raw = gzip.open(FASHION_DIR / "t10k-images-idx3-ubyte.gz").read()[16:]
    labels = gzip.open(FASHION_DIR / "t10k-labels-idx1-ubyte.gz").read()[8:]
    images = np.frombuffer(raw, np.uint8).reshape(-1, 28, 28)[:300]
    return [cv2.imencode(".png", img)[1].tobytes() for img in images], list(labels[:300])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serving(port: int | str, child: subprocess.Popen, seconds: float) -> bool:
    """Whether a demo server answers ``/healthz`` on ``port`` within ``seconds``; False as soon as
    ``child`` (the process that should be serving) has exited."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and child.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return True
        except httpx.HTTPError:
            time.sleep(0.2)
    return False


def start_server(args: list[str], port: int) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-m", "invoke", "demo.serve", "--port", str(port), *args],
                             cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if not serving(port, child, 60) and child.poll() is None:
        child.kill()
        raise AssertionError("the demo server did not start")
    return child


@pytest.fixture(scope="module")
def server(trained_run):
    port = free_port()
    child = start_server(["--run", str(trained_run)], port)
    assert child.poll() is None, child.stderr.read()
    yield f"http://127.0.0.1:{port}"
    stop(child)


def test_top1_on_real_fashion_mnist(server, test_images):
    images, labels = test_images
    hits = 0
    with httpx.Client(base_url=server) as client:
        for data, label in zip(images[:200], labels[:200]):
            r = client.post("/api/classify?top=3", content=data, headers={"Content-Type": "image/png"})
            assert r.status_code == 200
            body = r.json()
            assert [t["index"] for t in body["top"]] == sorted((t["index"] for t in body["top"]),
                                                                key=lambda i: -next(t["prob"] for t in body["top"] if t["index"] == i))
            assert set(body["timings_ms"]) == {"decode", "preprocess", "forward"}
            hits += body["top"][0]["index"] == label
    assert hits / 200 >= 0.75


def test_multipart_upload_and_the_model_description(server, test_images):
    images, labels = test_images
    r = httpx.post(f"{server}/api/classify?top=1&input=1", files={"file": ("x.png", images[0], "image/png")})
    assert r.status_code == 200
    body = r.json()
    assert len(body["top"]) == 1 and body["model"] == "lenet600" and body["input_png"]
    model = httpx.get(f"{server}/api/model").json()
    assert model["input_shape"] == [1, 1, 28, 28] and model["classes"] == list(FASHION_MNIST.classes)
    assert model["backend"] == "caffe" and model["run"].endswith("lenet600")


def test_dark_on_light_pictures_are_inverted(server, test_images):
    images, labels = test_images
    image = cv2.imdecode(np.frombuffer(images[0], np.uint8), cv2.IMREAD_GRAYSCALE)
    photo = cv2.resize(255 - image, (200, 200))  # a bigger, dark-on-light "photo"
    plain = httpx.post(f"{server}/api/classify", content=images[0]).json()
    flipped = httpx.post(f"{server}/api/classify", content=cv2.imencode(".jpg", photo)[1].tobytes()).json()
    assert plain["inverted"] is False and flipped["inverted"] is True
    assert flipped["top"][0]["index"] == plain["top"][0]["index"]


@pytest.mark.parametrize("body,status,message", [
    (b"", 422, "empty body"),
    (b"hello, not an image", 415, "not an image"),
])
def test_bad_bodies(server, body, status, message):
    r = httpx.post(f"{server}/api/classify", content=body)
    assert r.status_code == status and message in r.json()["error"]


def test_body_over_the_limit_is_413(server):
    r = httpx.post(f"{server}/api/classify", content=b"\0" * (10 * 1024 * 1024 + 1))
    assert r.status_code == 413 and "limit" in r.json()["error"]


def test_decompression_bomb_is_422(server):
    bomb = cv2.imencode(".png", np.zeros((8000, 8000), np.uint8))[1].tobytes()
    assert len(bomb) < 1_000_000
    r = httpx.post(f"{server}/api/classify", content=bomb, timeout=30)
    assert r.status_code == 422 and "8000x8000 pixels is over the limit" in r.json()["error"]


def test_a_jpeg_bomb_behind_a_fill_byte_is_refused_from_its_header(server):
    r = httpx.post(f"{server}/api/classify", content=jpeg_bomb(), timeout=5)  # decoding it takes 8-12 s
    assert r.status_code == 422
    assert r.json() == {"error": "image of 30000x30000 pixels is over the limit of 40,000,000 pixels"}


def test_a_16_bit_rgba_png_is_refused_for_the_bytes_it_decodes_to(server):
    r = httpx.post(f"{server}/api/classify", content=png_16bit_rgba(), timeout=5)
    assert r.status_code == 422
    assert r.json()["error"].endswith("decodes to 317,520,000 bytes, over the limit of 120,000,000 bytes")


@pytest.mark.parametrize("body,message", [
    (b"garbage", "malformed multipart body"),
    (b"--xyz\r\nno colon in this header\r\n\r\nabc\r\n--xyz--\r\n", "malformed multipart body"),
    (b'--xyz\r\nContent-Disposition: form-data; name="f"\r\n\r\nabc', "ends inside a part"),
], ids=["no-boundary-line", "bad-part-header", "unterminated"])
def test_a_malformed_multipart_body_is_a_json_422(server, body, message):
    r = httpx.post(f"{server}/api/classify", content=body,
                   headers={"Content-Type": "multipart/form-data; boundary=xyz"})
    assert r.status_code == 422 and r.headers["content-type"] == "application/json"
    assert message in r.json()["error"]


def test_an_idle_connection_is_closed_by_the_server(server):
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as idle:
        start = time.monotonic()
        readable, _, _ = select.select([idle], [], [], 20)
        assert readable, "the server kept an idle connection open for 20 s"
        assert idle.recv(1) == b""  # closed without a word: no request was started
    assert time.monotonic() - start < 10


def test_multipart_without_a_file_is_422(server):
    r = httpx.post(f"{server}/api/classify", files={"file": ("x.png", b"", "image/png")})
    assert r.status_code == 422


def test_concurrent_requests_are_all_answered_correctly(server, test_images):
    images, _ = test_images
    with httpx.Client(base_url=server) as client:
        expected = [client.post("/api/classify", content=d).json()["top"][0]["index"] for d in images[:64]]

    def one(i):
        with httpx.Client(base_url=server) as c:
            return c.post("/api/classify", content=images[i % 64]).json()["top"][0]["index"]

    with ThreadPoolExecutor(16) as pool:
        got = list(pool.map(one, range(256)))
    assert got == [expected[i % 64] for i in range(256)]


def test_backends_agree(engine, trained_run, test_images):
    images, _ = test_images
    files = modelfiles.from_run(trained_run)
    caffe_net = classifier.load(engine, files, "caffe")
    opencv_net = classifier.load(engine, files, "opencv", validate=False)
    from caffetool.inference import preprocess

    for data in images[:100]:
        blob = preprocess.prepare(data, caffe_net.transform, caffe_net.max_pixels).blob
        assert np.abs(caffe_net.probabilities(blob) - opencv_net.probabilities(blob)).max() < 1e-4


def test_corrupt_weights_fail_start_up(trained_run, tmp_path):
    bad = tmp_path / "corrupt.caffemodel"
    data = bytearray(next((trained_run / "snapshots").glob("*.caffemodel")).read_bytes())
    bad.write_bytes(bytes(data[: len(data) // 3]))
    port = free_port()
    child = start_server(["--deploy", str(trained_run / "deploy.prototxt"), "--weights", str(bad),
                          "--labels", str(trained_run / "labels.txt")], port)
    try:
        child.wait(30)
    finally:
        stop(child)
    assert child.returncode == 1
    err = child.stderr.read()
    assert err == (f"Error: --weights {bad} is not a Caffe model (a binary NetParameter, as Caffe's snapshots "
                   "write); give the .caffemodel a training run wrote\n")


@pytest.mark.parametrize("port", ["99999", "0"])
def test_a_port_outside_1_to_65535_is_an_error(trained_run, port):
    done = subprocess.run([sys.executable, "-m", "invoke", "demo.serve", "--run", str(trained_run), "--port", port],
                          cwd=PROJECT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "serving" not in done.stdout
    assert done.stderr == f"Error: --port must be a TCP port from 1 to 65535, got {port}\n"


def test_an_address_in_use_is_an_error_before_the_model_loads(trained_run):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "invoke", "demo.serve", "--run", str(trained_run),
                               "--port", str(port)], cwd=PROJECT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "serving" not in done.stdout
    assert done.stderr == (f"Error: cannot listen on 127.0.0.1:{port}: Address already in use; "
                           "choose another --port (or --host)\n")


def test_a_host_that_does_not_resolve_is_an_error(trained_run):
    done = subprocess.run([sys.executable, "-m", "invoke", "demo.serve", "--run", str(trained_run),
                           "--host", "no-such-host.invalid"], cwd=PROJECT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "serving" not in done.stdout
    assert done.stderr.startswith("Error: --host 'no-such-host.invalid' is not an address of this machine: ")


def test_a_host_other_than_loopback_is_served_with_a_warning(trained_run):
    port = free_port()
    child = start_server(["--run", str(trained_run), "--host", "0.0.0.0"], port)
    stop(child)
    assert child.stderr.read().startswith(
        "Warning: --host 0.0.0.0 makes the demo reachable from the network, with no authentication; "
        "--host 127.0.0.1 keeps it on this machine\n")
    assert f"on http://0.0.0.0:{port}/" in child.stdout.read()


def test_wrong_label_count_fails_start_up(engine, trained_run, tmp_path):
    labels = tmp_path / "labels.txt"
    labels.write_text("a\nb\n")
    files = modelfiles.ModelFiles(trained_run / "deploy.prototxt", next((trained_run / "snapshots").glob("*.caffemodel")), labels)
    with pytest.raises(NetError, match="names 2 classes, the net outputs 10"):
        classifier.load(engine, files)


def test_classify_command_and_annotations(trained_run, test_images, tmp_path):
    images, labels = test_images
    folder = tmp_path / "in"
    folder.mkdir()
    for i in range(5):
        (folder / f"img{i}.png").write_bytes(images[i])
    (folder / "broken.png").write_bytes(b"nope")
    out = tmp_path / "annotated"
    done = subprocess.run([sys.executable, "-m", "invoke", "demo.classify", str(folder), "--run", str(trained_run),
                           "--top", "2", "--annotate", str(out)], cwd=PROJECT, capture_output=True, text=True)
    assert done.returncode == 1 and "Error: 1 file(s) could not be classified" in done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"{folder / 'broken.png'}: the body is not an image")
    assert lines[1].startswith(f"{folder / 'img0.png'}: ") and lines[1].count(", ") == 1
    for i in range(5):
        image = cv2.imread(str(out / f"img{i}.annotated.png"))
        assert image is not None and image.shape == (224, 224, 3)


def test_browser_upload_and_drawing(server, test_images, tmp_path):
    images, _ = test_images
    expected = httpx.post(f"{server}/api/classify", content=images[1]).json()["top"][0]["label"]
    (tmp_path / "upload.png").write_bytes(images[1])
    with chromium.launched() as browser:
        page = browser.new_page()
        page.goto(server)
        page.wait_for_selector("#model:has-text('10 classes')")
        page.set_input_files("#file", str(tmp_path / "upload.png"))
        page.wait_for_selector("#predicted:not(:empty)")
        assert page.inner_text("#predicted") == f"— {expected}"
        assert page.locator("#bars .bar").count() == 5
        page.evaluate("document.getElementById('predicted').textContent = ''")
        box = page.locator("#canvas").bounding_box()
        page.mouse.move(box["x"] + 140, box["y"] + 40)
        page.mouse.down()
        for y in range(40, 250, 10):
            page.mouse.move(box["x"] + 140, box["y"] + y)
        page.mouse.up()
        page.click("#classify-drawing")
        page.wait_for_selector("#predicted:not(:empty)")
        assert page.inner_text("#predicted").startswith("— ")
        assert "forward" in page.inner_text("#timings")
        assert page.get_attribute("#seen", "src").startswith("data:image/png;base64,")
        page.screenshot(path=str(tmp_path / "page.png"))
    assert os.path.getsize(tmp_path / "page.png") > 1000


def test_a_5000_character_boundary_is_a_json_422(server):
    boundary = "b" * 5000
    body = (f'--{boundary}\r\nContent-Disposition: form-data; name="f"; filename="a.png"\r\n\r\nabc\r\n'
            f'--{boundary}--\r\n').encode()
    r = httpx.post(f"{server}/api/classify", content=body,
                   headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert r.status_code == 422 and r.headers["content-type"] == "application/json"
    assert r.json()["error"] == "the multipart boundary is 5000 characters long; RFC 2046 allows at most 70"


@pytest.mark.parametrize("length", ["-5", "12x", "99999999999999999999999"])
def test_a_content_length_lie_is_a_json_400(server, length):
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(f"POST /api/classify HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\nabc".encode())
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and b"content-type: application/json" in head.lower(), answer
    assert body.startswith(b'{"error": "invalid HTTP request: ')


def test_links_in_a_run_are_not_followed_and_a_damaged_manifest_names_no_server_path(trained_run, tmp_path):
    outside = tmp_path / "outside"
    (outside / "eval").mkdir(parents=True)
    secret = cv2.imencode(".png", np.full((8, 8), 255, np.uint8))[1].tobytes()
    (outside / "secret.png").write_bytes(secret)
    (outside / "eval" / "confusion.png").write_bytes(secret)
    (outside / "eval" / "summary.json").write_text('{"split": "test", "top1": 1.0}')
    run = tmp_path / "run"
    shutil.copytree(trained_run, run, symlinks=True, ignore=shutil.ignore_patterns("eval"))
    shutil.rmtree(run / "plots")
    (run / "plots").symlink_to(outside)
    (run / "eval").mkdir()
    (run / "eval" / "linked").symlink_to(outside / "eval")
    port = free_port()
    child = start_server(["--run", str(run)], port)
    try:
        assert child.poll() is None, child.stderr.read()
        summary = httpx.get(f"http://127.0.0.1:{port}/api/run").json()
        assert summary["plots"] == [] and summary["evaluation"] is None
        for url in ("/run/plots/secret.png", "/run/eval/confusion.png"):
            assert httpx.get(f"http://127.0.0.1:{port}{url}").status_code == 404
        (run / "manifest.json").write_text('{"status": ')
        r = httpx.get(f"http://127.0.0.1:{port}/api/run")
        assert r.status_code == 503 and str(tmp_path) not in r.text
        assert r.json()["error"] == "the run's manifest.json cannot be read; `caffetool train.report` with the " \
                                    "run's folder, on the server, says why"
    finally:
        stop(child)


def test_sigkill_of_a_server_with_workers_takes_the_workers_along(trained_run):
    import psutil

    port = free_port()
    child = start_server(["--run", str(trained_run), "--workers", "2"], port)
    try:
        assert child.poll() is None, child.stderr.read()
        workers = psutil.Process(child.pid).children(recursive=True)
        assert len(workers) >= 2
        child.kill()
        child.wait(10)
        _, alive = psutil.wait_procs(workers, timeout=15)
        assert alive == [], [p.cmdline() for p in alive]
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
        orphans = list(Path(tempfile.gettempdir()).glob(f"{telemetry.FOLDER_PREFIX}{child.pid}-*"))
        assert len(orphans) == 1  # the workers' metrics, which a server killed outright cannot remove
        again = start_server(["--run", str(trained_run), "--workers", "2"], port)
        stop(again)
        assert not orphans[0].exists()  # the next server with workers removed it
    finally:
        stop(child)


def test_metrics_of_a_server_with_workers_add_up_every_worker(trained_run, test_images):
    """With ``--workers 2`` a scrape is answered by either worker; each scrape still counts every
    request the server answered (prometheus-client's multiprocess mode), so no counter goes back."""
    port = free_port()
    child = start_server(["--run", str(trained_run), "--workers", "2"], port)
    try:
        assert child.poll() is None, child.stderr.read()
        image = test_images[0][0]
        for _ in range(6):  # a new connection each: either worker may answer
            assert httpx.post(f"http://127.0.0.1:{port}/api/classify", content=image).status_code == 200
        for _ in range(6):
            scraped = httpx.get(f"http://127.0.0.1:{port}/metrics").text
            answered = [float(line.split()[-1]) for line in scraped.splitlines()
                        if line.startswith("nv_inference_request_success_total{")]
            assert answered == [6.0], scraped
            assert 'caffetool_http_requests_total{route="/api/classify",status="200"} 6.0' in scraped
    finally:
        stop(child)
