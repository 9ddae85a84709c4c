"""Demo server throughput and latency with dynamic batching off and on, for LeNet and CaffeNet.

For each model, ``caffetool demo.serve`` (pycaffe backend, one server process) is started twice:
batching off (``--max-batch 1``) and on (``--max-batch B --max-queue-delay-us D``), B and D per model
(:data:`MAX_BATCH`, :data:`DELAY_US`; ``--max-batch``, ``--delay-us`` to change):

- LeNet 8 images, 500 us: a pass of 8 costs about what a pass of one does (0.5 ms), and what limits
  the server is its one process's event loop (HTTP, decoding, answers: most of a ms a request). A
  batch of half the 16 clients keeps two groups of requests in turn: one in its forward pass (which
  lets go of the GIL) while the loop reads and answers the other. A batch of all 16 puts every
  client in one group that waits for the loop to answer all of them, and the tail doubles (p99 31
  to 38 ms against 15 ms at 8, measured); 500 us gathers the requests of a group in flight and adds
  at most half a ms to a lone request.
- CaffeNet 16 images, 10,000 us: one image's pass takes 50 ms or more on 2 cores, so requests pile
  up during passes anyway; the delay only lets the first pass after a lull wait for the rest of the
  clients' requests, and 10 ms is a fifth of one pass at most for a lone request. On ``api`` the
  batches stay small all the same: preprocessing (scikit-image's resize, about 23 ms an image)
  shares the 2 cores and paces the arrivals.

Against each server, wrk (16 connections on 2 threads, over loopback, on this same
machine) posts single-image requests for ``--seconds`` on two routes, after a ``--warmup``:

- ``api``: ``POST /api/classify`` with an encoded image (LeNet: 256 Fashion-MNIST test images as
  28x28 PNGs; CaffeNet: JPEGs of 4 of scikit-image's photos, 300x451 to 427x640, and their mirrors),
  so the server decodes and preprocesses each;
- ``v2``: ``POST /v2/models/{name}/infer`` with the binary tensor extension: one image already
  preprocessed (``Classifier.prepare``) as FP32 [1, C, H, W], output asked binary too, the body made
  once by ``tritonclient.http.InferenceServerClient.generate_request_body`` and sent by a wrk Lua
  script with its ``Inference-Header-Content-Length`` — no JSON tensor on either side, so what is
  measured is HTTP, the queue and the forward pass.

Reported per row: requests/s, p50 and p99 latency (wrk's, client included), the mean batch size
(``nv_inference_count_total`` over ``nv_inference_exec_count_total``, deltas of ``/metrics`` scraped
just before and just after the measurement), the answers' statuses (``caffetool_http_requests_total``
deltas for the route, and wrk's non-2xx and socket errors), the server's CPU (% of one core) and the
CPU other programs took meanwhile (% of all cores: the machine's busy time less the server's, wrk's and
this script's; a loaded row is a noisy row). Between measurements the server is left to drain what
the departed connections had in flight. The in-process floors, with the server stopped: single image
(``Classifier.prepare`` + ``Classifier.rows`` of one, per image) and batched (``rows`` of 16 prepared
images, per image; forward only), each a timed loop of about half ``--seconds``.

The models: LeNet is a caffetool run (``--run``; without it one is trained first, 600 iterations of
the recipe on Fashion-MNIST, in a temporary runs folder). CaffeNet is BVLC's
``models/bvlc_reference_caffenet/deploy.prototxt`` as the engine ships it (``share/caffe``), with
seeded random weights (``export_speed.randomise``: throughput does not depend on them), 1000 labels
``class N`` in a temporary folder, served with ``--mean-values 104,117,123 --image-dims 256,256``
(channel swap 2,1,0 and raw scale 255 are the demo's defaults: Caffe's ``classify.py`` feed, one
centre crop).

Threads: the server gets what a user gets who sets nothing on this machine, every core this process
may run on, through caffetool's thread variables (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``,
``OPENBLAS_NUM_THREADS``; an ``OMP_NUM_THREADS`` already set is kept, ``--threads`` wins), and the
short OpenMP spin the server sets for itself (``cpu_threads.for_serving``); no placement. The floors
run in this process with the same settings.

Targets: batching on at least 1.5x off (requests/s) for CaffeNet and 1.2x for LeNet, on each route,
and LeNet's p99 at most 25 ms on every row; printed PASS/MISS, never failing the script.

    .venv/bin/python benchmarks/demo_throughput.py [--run RUN] [--models lenet,caffenet] [--seconds 10]
        [--warmup 2] [--max-batch lenet=8,caffenet=16] [--delay-us lenet=500,caffenet=10000] [--threads N]
        [--json OUT]
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path

import cv2
import httpx
import numpy as np
import psutil
from prometheus_client.parser import text_string_to_metric_families

from caffetool import apt, fsio
from caffetool.data.registry import FASHION_MNIST
from caffetool.engine import cpu_threads, import_caffe, locate
from caffetool.errors import CaffetoolError
from caffetool.inference.modelfiles import ModelFiles, from_run
from caffetool.serving import classifier

PROJECT = Path(__file__).resolve().parents[1]
CAFFETOOL = Path(sys.executable).parent / "caffetool"
CLIENTS, WRK_THREADS = 16, 2
MODELS = ("lenet", "caffenet")
# Queue delay with batching on, per model (--delay-us overrides; why these: the module's docstring).
MAX_BATCH = {"lenet": 8, "caffenet": 16}
DELAY_US = {"lenet": 500, "caffenet": 10000}
SPEEDUP_TARGET = {"lenet": 1.2, "caffenet": 1.5}
LENET_P99_MS = 25.0
ROUTES = {"api": "/api/classify", "v2": "/v2/models/{model}/infer"}
LUA = """
local bodies, n = {}, 0
local headers = {%(headers)s}
init = function(args)
  for i = 0, %(last)d do
    local f = assert(io.open("%(folder)s/" .. i .. ".bin", "rb")); bodies[i] = f:read("*all"); f:close()
  end
end
request = function()
  n = n + 1
  return wrk.format("POST", "%(path)s", headers, bodies[n %% %(count)d])
end
"""


# ---- the models ---------------------------------------------------------------------------------

@dataclass
class Model:
    name: str  # lenet or caffenet
    serve: list[str]  # demo.serve's model flags
    files: ModelFiles  # the same model for the in-process classifier (floors, the v2 body)
    images: list[bytes]  # encoded images for /api/classify
    content_type: str
    described: str


def lenet(run: Path | None, tmp: Path) -> Model:
    run = run.resolve() if run else train_lenet(tmp / "runs")
    return Model("lenet", ["--run", str(run)], from_run(run), fashion_pngs(256), "image/png",
                 f"LeNet, run {run} (1x28x28, 10 classes); 256 Fashion-MNIST test images as PNG")


def train_lenet(runs: Path) -> Path:
    """A LeNet trained now as tests/conftest.py's trained_run is: 600 iterations of the recipe."""
    argv = [str(CAFFETOOL), "train", "--max-iter", "600", "--test-interval", "600", "--runs-dir", str(runs),
            "--name", "lenet600"]
    print(f"no --run: training one ({' '.join(argv[1:])})", flush=True)
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=PROJECT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"training failed:\n{(done.stdout + done.stderr)[-2000:]}")
    final = [line for line in done.stdout.splitlines() if line.startswith("final test")]
    print(f"  trained in {time.perf_counter() - started:.0f} s; {final[0] if final else ''}", flush=True)
    return runs / "lenet600"


def fashion_pngs(count: int) -> list[bytes]:
    raw = gzip.open(FASHION_MNIST.local_dirs[0] / "t10k-images-idx3-ubyte.gz").read()[16:]
    images = np.frombuffer(raw, np.uint8).reshape(-1, 28, 28)[:count]
    return [cv2.imencode(".png", image)[1].tobytes() for image in images]


def caffenet(engine: object, tmp: Path) -> Model:
    """BVLC's CaffeNet deploy net, seeded random weights, 1000 labels, in ``tmp``."""
    from export_speed import SEED, randomise  # noqa: PLC0415 - the export benchmark's weights

    caffe = import_caffe(engine)
    deploy = engine.prefix / "share" / "caffe" / "models" / "bvlc_reference_caffenet" / "deploy.prototxt"
    folder = tmp / "caffenet"
    folder.mkdir()
    net = caffe.Net(str(deploy), caffe.TEST)
    randomise(net, np.random.default_rng(SEED))
    weights, labels = folder / "caffenet.caffemodel", folder / "labels.txt"
    net.save(str(weights))
    labels.write_text("".join(f"class {i}\n" for i in range(1000)))
    flags = {"--mean-values": "104,117,123", "--image-dims": "256,256"}
    files = ModelFiles(deploy, weights, labels, mean_values=(104.0, 117.0, 123.0), image_dims=(256, 256))
    return Model("caffenet", ["--deploy", str(deploy), "--weights", str(weights), "--labels", str(labels),
                              *[x for pair in flags.items() for x in pair]], files, photo_jpegs(), "image/jpeg",
                 f"CaffeNet, {deploy} (3x227x227, 1000 classes), random weights; "
                 f"{' '.join(f'{k} {v}' for k, v in flags.items())}; 8 JPEGs of scikit-image's photos")


def photo_jpegs() -> list[bytes]:
    """scikit-image's chelsea, coffee, astronaut and rocket (300x451 to 427x640) and their mirrors, JPEG 90."""
    import skimage.data  # noqa: PLC0415

    photos = [skimage.data.chelsea(), skimage.data.coffee(), skimage.data.astronaut(), skimage.data.rocket()]
    photos += [p[:, ::-1] for p in photos]
    return [cv2.imencode(".jpg", np.ascontiguousarray(p[:, :, ::-1]), [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes()
            for p in photos]


def v2_body(blob: np.ndarray, data: str, output: str) -> tuple[bytes, int]:
    """An infer request of one preprocessed image, binary in and out: (body, JSON header length)."""
    import tritonclient.http as triton  # noqa: PLC0415

    given = triton.InferInput(data, list(blob.shape), "FP32")
    given.set_data_from_numpy(np.ascontiguousarray(blob, np.float32), binary_data=True)
    wanted = triton.InferRequestedOutput(output, binary_data=True)
    body, json_size = triton.InferenceServerClient.generate_request_body([given], outputs=[wanted])
    return body, json_size


# ---- in-process floors ---------------------------------------------------------------------------

def per_call_ms(step: Callable[[int], object], seconds: float) -> float:
    """Mean milliseconds of ``step(i)`` over a loop of about ``seconds`` (at least 3 calls), after one."""
    step(0)
    done, start = 0, time.perf_counter()
    while done < 3 or time.perf_counter() - start < seconds:
        step(done)
        done += 1
    return (time.perf_counter() - start) / done * 1e3


def floors(model: object, images: list[bytes], seconds: float) -> dict:
    blobs = [model.prepare(images[i % len(images)]).blob for i in range(16)]
    batch = np.concatenate(blobs)
    prepare_ms = per_call_ms(lambda i: model.prepare(images[i % len(images)]), seconds)
    one_ms = per_call_ms(lambda i: model.rows(blobs[i % 16]), seconds)
    batch_ms = per_call_ms(lambda i: model.rows(batch), seconds)
    return {"prepare_ms": round(prepare_ms, 3), "forward_1_ms": round(one_ms, 3),
            "forward_16_ms": round(batch_ms, 3),
            "single_images_per_s": round(1e3 / (prepare_ms + one_ms), 1),
            "batched_images_per_s": round(16e3 / batch_ms, 1)}


# ---- the server ----------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    argv: list[str]
    port: int
    log: Path
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, limit_s: float = 600) -> None:
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(self.argv, cwd=PROJECT, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"server exited ({self.process.returncode}):\n{self.log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise SystemExit(f"server not ready in {limit_s:.0f} s:\n{self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def cpu_s(self) -> float:
        times = psutil.Process(self.process.pid).cpu_times()
        return times.user + times.system + times.children_user + times.children_system

    def model_name(self) -> str:
        return httpx.get(f"{self.url}/api/model", timeout=10).json()["name"]

    def scrape(self) -> dict:
        """Counters of /metrics: inferences, executions, and requests by (route, status)."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        found: dict = {"inferences": 0.0, "executions": 0.0, "requests": {}}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "nv_inference_count_total":
                    found["inferences"] += sample.value
                elif sample.name == "nv_inference_exec_count_total":
                    found["executions"] += sample.value
                elif sample.name == "caffetool_http_requests_total":
                    key = (sample.labels["route"], sample.labels["status"])
                    found["requests"][key] = found["requests"].get(key, 0.0) + sample.value
        return found

    def drain(self, limit_s: float = 120) -> float:
        """Wait until requests left by departed connections are done (the server idle, its counts still)."""
        started = time.monotonic()
        last = None
        while time.monotonic() - started < limit_s:
            cpu = self.cpu_s()
            time.sleep(0.5)
            counts = self.scrape()
            now = (counts["inferences"], sum(v for (route, _), v in counts["requests"].items() if route != "/metrics"))
            if now == last and self.cpu_s() - cpu < 0.05:
                break
            last = now
        return time.monotonic() - started

    def errors(self) -> list[str]:
        lines = self.log.read_text(errors="replace").splitlines()
        return [line for line in lines if re.search(r"error|exception|traceback|warning", line, re.I)]


@contextmanager
def serving(argv: list[str], log: Path) -> Iterator[Server]:
    """``argv`` served on a free port of 127.0.0.1 until the block ends."""
    port = free_port()
    server = Server([*argv, "--port", str(port)], port, log)
    try:
        server.start()
        yield server
    finally:
        server.stop()


# ---- one measurement -----------------------------------------------------------------------------

@dataclass
class Row:
    model: str
    batching: str  # off or on
    max_batch: int
    delay_us: int
    route: str
    seconds: int
    requests: int = 0
    requests_per_s: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0
    wrk_non_2xx: int = 0
    wrk_socket_errors: dict = field(default_factory=dict)
    statuses: dict = field(default_factory=dict)  # the server's count for the route, by status
    mean_batch: float = 0.0
    inferences: int = 0
    executions: int = 0
    server_cpu_pct: float = 0.0  # of one core
    wrk_cpu_pct: float = 0.0  # of one core
    others_cpu_pct: float = 0.0  # of all cores
    drained_s: float = 0.0


def lua_script(folder: Path, path: str, bodies: list[bytes], headers: dict[str, str]) -> Path:
    folder.mkdir(parents=True)
    for i, body in enumerate(bodies):
        (folder / f"{i}.bin").write_bytes(body)
    literal = ", ".join(f'["{k}"] = "{v}"' for k, v in headers.items())
    script = folder / "post.lua"
    script.write_text(LUA % {"headers": literal, "last": len(bodies) - 1, "folder": folder, "path": path,
                             "count": len(bodies)})
    return script


def wrk(script: Path, url: str, seconds: int) -> str:
    argv = ["wrk", f"-t{WRK_THREADS}", f"-c{CLIENTS}", f"-d{seconds}s", "--timeout", "120s", "--latency",
            "-s", str(script), f"{url}/"]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def milliseconds(out: str, pattern: str) -> float:
    """A latency wrk printed (``12.5ms``, ``850.00us``, ``1.20s``) in ms; NaN when it printed none."""
    found = re.search(pattern + r"\s+([\d.]+)(us|ms|s|m)\b", out)
    return float(found.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[found.group(2)] if found else math.nan


def parse_wrk(out: str, row: Row) -> None:
    row.requests = int(re.search(r"(\d+) requests in", out).group(1))
    row.requests_per_s = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    row.p50_ms, row.p99_ms = milliseconds(out, r"\s50%"), milliseconds(out, r"\s99%")
    row.max_ms = milliseconds(out, r"Latency\s+\S+\s+\S+")
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    row.wrk_non_2xx = int(non_2xx.group(1)) if non_2xx else 0
    socket_errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if socket_errors:
        row.wrk_socket_errors = dict(zip(("connect", "read", "write", "timeout"), map(int, socket_errors.groups())))


def busy_s() -> float:
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def own_and_children_s() -> tuple[float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def measure(server: Server, script: Path, route: str, row: Row, warmup: int) -> Row:
    """wrk against ``server`` for ``row.seconds`` after ``warmup`` s, with the server's counts and CPU."""
    if warmup:
        wrk(script, server.url, warmup)
        server.drain()
    before, server_cpu, busy, (own, children) = server.scrape(), server.cpu_s(), busy_s(), own_and_children_s()
    started = time.perf_counter()
    out = wrk(script, server.url, row.seconds)
    wall = time.perf_counter() - started
    after, server_cpu, busy = server.scrape(), server.cpu_s() - server_cpu, busy_s() - busy
    own, children = (now - then for now, then in zip(own_and_children_s(), (own, children)))
    parse_wrk(out, row)
    row.inferences = int(after["inferences"] - before["inferences"])
    row.executions = int(after["executions"] - before["executions"])
    row.mean_batch = round(row.inferences / row.executions, 2) if row.executions else 0.0
    row.statuses = {status: int(v - before["requests"].get((r, status), 0.0))
                    for (r, status), v in after["requests"].items() if r == route
                    and v - before["requests"].get((r, status), 0.0) > 0}
    row.server_cpu_pct = round(100 * server_cpu / wall, 1)
    row.wrk_cpu_pct = round(100 * children / wall, 1)
    row.others_cpu_pct = round(100 * max(0.0, busy - server_cpu - children - own) / (wall * psutil.cpu_count()), 1)
    row.drained_s = round(server.drain(), 1)
    return row


# ---- a model -------------------------------------------------------------------------------------

def bench_model(engine: object, model: Model, args: argparse.Namespace, tmp: Path) -> dict:
    """The model's floors, then its four rows (batching off and on, each route), with the server logs' errors."""
    loaded = classifier.load(engine, model.files, "caffe")
    body, json_size = v2_body(loaded.prepare(model.images[0]).blob, *loaded.blobs)
    print(f"\n{model.described}", flush=True)
    floor = floors(loaded, model.images, args.seconds / 2)
    print(f"  floors: prepare {floor['prepare_ms']:.2f} ms, forward of 1 {floor['forward_1_ms']:.2f} ms, of 16 "
          f"{floor['forward_16_ms']:.2f} ms", flush=True)
    scripts = {
        "api": lua_script(tmp / model.name / "api", ROUTES["api"], model.images, {"Content-Type": model.content_type}),
        "v2": lua_script(tmp / model.name / "v2", ROUTES["v2"].format(model=loaded.name), [body],
                         {"Content-Type": "application/octet-stream",
                          "Inference-Header-Content-Length": str(json_size)}),
    }
    del loaded
    rows, logs = [], {}
    for batching, max_batch, delay in (("off", 1, 0), ("on", args.max_batch[model.name], args.delay_us[model.name])):
        argv = [str(CAFFETOOL), "demo.serve", *model.serve, "--max-batch", str(max_batch),
                "--max-queue-delay-us", str(delay)]
        started = time.perf_counter()
        with serving(argv, tmp / f"{model.name}-{batching}.log") as server:
            print(f"  batching {batching} (--max-batch {max_batch} --max-queue-delay-us {delay}): server ready in "
                  f"{time.perf_counter() - started:.1f} s", flush=True)
            for route, script in scripts.items():
                row = measure(server, script, ROUTES[route],
                              Row(model.name, batching, max_batch, delay, route, args.seconds), args.warmup)
                rows.append(row)
                print(f"    {route}: {row.requests_per_s:.1f} requests/s, p50 {row.p50_ms:.1f} ms, p99 "
                      f"{row.p99_ms:.1f} ms, mean batch {row.mean_batch:.2f}, statuses {row.statuses}, others' CPU "
                      f"{row.others_cpu_pct:.0f}%", flush=True)
        logs[batching] = server.errors()
        if logs[batching]:
            print(f"  server log: {len(logs[batching])} error/warning lines, e.g. {logs[batching][:3]}", flush=True)
    return {"described": model.described, "serve": model.serve, "floors": floor, "rows": rows, "server_log": logs}


# ---- report --------------------------------------------------------------------------------------

LEFT = "499"  # the server's status for a request whose client closed its connection first


def bad_answers(row: Row) -> int:
    """Answers that were neither 200 nor for a client gone (wrk closes its connections when its time is
    up, with requests in flight): the server's count for the route, else wrk's, plus wrk's socket errors."""
    server = sum(n for status, n in row.statuses.items() if status not in ("200", LEFT))
    return max(server, row.wrk_non_2xx) + sum(row.wrk_socket_errors.values())


def print_table(results: dict) -> None:
    print(f"\n{'model':<9}{'batching':<20}{'route':<6}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}"
          f"{'batch':>7}{'errors':>7}{'left':>6}{'server':>8}{'wrk':>6}{'others':>8}")
    for result in results.values():
        for r in result["rows"]:
            setting = f"on (b{r.max_batch}, {r.delay_us} us)" if r.batching == "on" else "off (b1)"
            print(f"{r.model:<9}{setting:<20}{r.route:<6}{r.requests_per_s:>9.1f}{r.p50_ms:>9.1f}{r.p99_ms:>9.1f}"
                  f"{r.max_ms:>9.1f}{r.mean_batch:>7.2f}{bad_answers(r):>7}{r.statuses.get(LEFT, 0):>6}"
                  f"{r.server_cpu_pct:>7.0f}%"
                  f"{r.wrk_cpu_pct:>5.0f}%{r.others_cpu_pct:>7.0f}%")
    print("batch: mean images per forward pass (/metrics); errors: answers neither 200 nor 499; left: 499, the "
          "requests in flight when wrk closed its connections; server, wrk: CPU as % of one core; others: CPU other "
          "programs took, % of all cores")
    print(f"\n{'floors':<9}{'prepare ms':>11}{'fwd 1 ms':>10}{'1 image/s':>11}{'fwd 16 ms':>11}{'per image':>11}"
          f"{'batched/s':>11}")
    for name, result in results.items():
        f = result["floors"]
        print(f"{name:<9}{f['prepare_ms']:>11.2f}{f['forward_1_ms']:>10.2f}{f['single_images_per_s']:>11.1f}"
              f"{f['forward_16_ms']:>11.2f}{f['forward_16_ms'] / 16:>11.2f}{f['batched_images_per_s']:>11.1f}")
    print("1 image/s: prepare + forward of one, in process; batched/s: forward of 16 prepared images, per image")


def checks(results: dict) -> list[dict]:
    """Batching on over off per model and route, and LeNet's p99, against the targets."""
    found = []
    for name, result in results.items():
        rows = {(r.batching, r.route): r for r in result["rows"]}
        for route in ROUTES:
            ratio = rows["on", route].requests_per_s / max(rows["off", route].requests_per_s, 1e-9)
            found.append({"check": f"{name} {route}: batching on / off requests/s", "value": round(ratio, 2),
                          "target": f">= {SPEEDUP_TARGET[name]}", "met": ratio >= SPEEDUP_TARGET[name]})
        if name == "lenet":
            for r in result["rows"]:
                found.append({"check": f"lenet {r.route}, batching {r.batching}: p99 ms", "value": r.p99_ms,
                              "target": f"<= {LENET_P99_MS:g}", "met": r.p99_ms <= LENET_P99_MS})
    return found


def print_checks(found: list[dict]) -> None:
    print()
    for c in found:
        print(f"{c['check']:<44} {c['value']:>8.2f}  target {c['target']:<7} {'PASS' if c['met'] else 'MISS'}")


# ---- main ----------------------------------------------------------------------------------------

def per_model(flag: str, defaults: dict[str, int], low: int) -> Callable[[str], dict[str, int]]:
    """A parser of ``MODEL=N,...`` (N at least ``low``) over ``defaults``."""
    def parse(text: str) -> dict[str, int]:
        given = dict(defaults)
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, _, value = part.partition("=")
            if name not in MODELS or not value.isdigit() or int(value) < low:
                raise argparse.ArgumentTypeError(f"{flag} takes MODEL=N (N at least {low}), MODEL one of "
                                                 f"{', '.join(MODELS)}")
            given[name] = int(value)
        return given
    return parse


def listed(values: dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in values.items())


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, help="LeNet run folder (default: train one, 600 iterations)")
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--seconds", type=int, default=10, help="each wrk measurement (floors: half each)")
    parser.add_argument("--warmup", type=int, default=2, help="wrk seconds before each measurement")
    parser.add_argument("--max-batch", type=per_model("--max-batch", MAX_BATCH, 2), default=dict(MAX_BATCH),
                        help=f"--max-batch with batching on, per model (default: {listed(MAX_BATCH)}; why: the "
                             "module's docstring)")
    parser.add_argument("--delay-us", type=per_model("--delay-us", DELAY_US, 0), default=dict(DELAY_US),
                        help=f"--max-queue-delay-us with batching on, per model (default: {listed(DELAY_US)})")
    parser.add_argument("--threads", type=int, help="the server's (and floors') CPU threads (default: "
                                                    "OMP_NUM_THREADS if set, else every core)")
    parser.add_argument("--json", type=Path, help="write the raw figures here")
    args = parser.parse_args()
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not args.models or any(m not in MODELS for m in args.models):
        parser.error(f"--models takes names among {', '.join(MODELS)}")
    if args.seconds < 1 or args.warmup < 0:
        parser.error("--seconds must be at least 1, --warmup at least 0")
    return args


def environment(threads: int) -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown")
    return {"cpu": cpu, "cores": psutil.cpu_count(), "available_cores": cpu_threads.available(), "threads": threads,
            "thread_variables": {n: os.environ[n] for n in (*cpu_threads.VARIABLES, *cpu_threads.SERVING_WAIT)
                                 if n in os.environ},
            "clients": CLIENTS, "wrk_threads": WRK_THREADS, "load_average_before": os.getloadavg()}


def finite(value: object) -> object:
    """``value`` with NaN (a latency wrk did not print) as null, which JSON has."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def main() -> None:
    args = parse_args()
    threads = cpu_threads.apply(args.threads)  # before libcaffe loads, here and in the servers (inherited)
    cpu_threads.for_serving()  # the wait the servers set themselves, for the floors too
    apt.install_packages(["wrk"])
    engine = locate(probe=False)
    notes = environment(threads)
    print(f"{notes['cpu']}, {notes['cores']} cores; server and floors on {threads} threads "
          f"({', '.join(f'{k}={v}' for k, v in notes['thread_variables'].items())}), 1 server process; wrk "
          f"{CLIENTS} connections on {WRK_THREADS} threads on the same machine; load average "
          f"{notes['load_average_before'][0]:.2f} at the start", flush=True)
    started = time.perf_counter()
    results = {}
    with tempfile.TemporaryDirectory(prefix="caffetool-demo-bench-") as folder:
        tmp = Path(folder)
        for name in args.models:
            model = lenet(args.run, tmp) if name == "lenet" else caffenet(engine, tmp)
            results[name] = bench_model(engine, model, args, tmp)
    wall = time.perf_counter() - started
    print_table(results)
    found = checks(results)
    print_checks(found)
    print(f"\n{wall:.0f} s in all; load average {os.getloadavg()[0]:.2f} at the end")
    if args.json:
        record = {"date": date.today().isoformat(), "argv": sys.argv[1:], "environment": notes,
                  "settings": {"seconds": args.seconds, "warmup": args.warmup, "max_batch": args.max_batch,
                               "delay_us": args.delay_us, "models": args.models},
                  "models": {name: {**r, "rows": [asdict(row) for row in r["rows"]]} for name, r in results.items()},
                  "checks": found, "wall_s": round(wall, 1)}
        fsio.write_atomic(args.json, json.dumps(finite(record), indent=2) + "\n", CaffetoolError)
        print(f"figures -> {args.json}")


if __name__ == "__main__":
    main()
