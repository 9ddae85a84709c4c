"""Demo server throughput and latency, against the in-process floor.

16 concurrent clients (wrk, over loopback, on this same 2-core machine) post 28x28 PNGs of
Fashion-MNIST test images to ``/api/classify`` for a fixed time (wrk measures a duration, not a
count: a thread stopped early still waits the duration out, so the count is what it answered);
every answer must be 200. The floor is the same decode + preprocess + forward in a loop inside one
process, on one core.
Targets for LeNet: >= 1,000 requests/s and p99 <= 25 ms, client included.

    .venv/bin/python benchmarks/demo_throughput.py [--run RUN] [--seconds 20] [--workers 1]
"""

from __future__ import annotations

import argparse
import gzip
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cv2
import httpx
import numpy as np

from caffetool import apt
from caffetool.data.registry import FASHION_MNIST
from caffetool.demo import classifier as demo_model
from caffetool.engine import locate

PROJECT = Path(__file__).resolve().parents[1]
LUA = """
local bodies, n = {}, 0
init = function(args)
  for i = 0, %(last)d do
    local f = io.open("%(folder)s/" .. i .. ".png", "rb"); bodies[i] = f:read("*all"); f:close()
  end
end
request = function()
  n = n + 1
  return wrk.format("POST", "/api/classify", {["Content-Type"] = "image/png"}, bodies[n %% %(count)d])
end
"""


def pngs(count: int) -> list[bytes]:
    raw = gzip.open(FASHION_MNIST.local_dirs[0] / "t10k-images-idx3-ubyte.gz").read()[16:]
    images = np.frombuffer(raw, np.uint8).reshape(-1, 28, 28)[:count]
    return [cv2.imencode(".png", image)[1].tobytes() for image in images]


def floor(run: Path, bodies: list[bytes], seconds: float = 5.0) -> float:
    classifier = demo_model.load(locate(probe=False), demo_model.from_run(run), "caffe")
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for data in bodies:
            classifier.classify(data, 5)
        done += len(bodies)
    return done / (time.perf_counter() - start)


def newest_run(runs: Path) -> Path:
    return max(runs.glob("*/snapshots/*.caffemodel"), key=lambda p: p.stat().st_mtime).parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    apt.install_packages(["wrk"])
    run = args.run or newest_run(PROJECT / "runs")
    bodies = pngs(256)
    with tempfile.TemporaryDirectory(prefix="caffetool-demo-bench-") as tmp:
        for i, body in enumerate(bodies):
            Path(tmp, f"{i}.png").write_bytes(body)
        script = Path(tmp, "post.lua")
        script.write_text(LUA % {"last": len(bodies) - 1, "folder": tmp, "count": len(bodies)})
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = subprocess.Popen([sys.executable, "-m", "invoke", "demo.serve", "--run", str(run), "--port",
                                   str(port), "--workers", str(args.workers)], cwd=PROJECT,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            for _ in range(300):
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.2)
            out = subprocess.run(["wrk", "-t2", "-c16", f"-d{args.seconds}s", "--latency", "-s", str(script),
                                  f"http://127.0.0.1:{port}/"], capture_output=True, text=True, check=True).stdout
        finally:
            server.terminate()
            server.wait(10)
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    total = int(re.search(r"(\d+) requests in", out).group(1))
    p50 = re.search(r"50%\s+([\d.]+)(ms|us|s)", out)
    p99 = re.search(r"99%\s+([\d.]+)(ms|us|s)", out)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    in_process = floor(run, bodies)
    print(f"run {run.name}; {total} requests in {args.seconds} s, 16 connections, {args.workers} server worker(s), wrk on the same machine")
    print(f"server: {rate:.0f} requests/s, p50 {p50.group(1)} {p50.group(2)}, p99 {p99.group(1)} {p99.group(2)}, "
          f"errors {errors.group(1) if errors else 0}")
    print(f"floor (in-process decode + preprocess + forward, one core): {in_process:.0f} requests/s")
    print(f"server / floor: {rate / in_process:.2f}; targets: >= 1000 requests/s, p99 <= 25 ms")


if __name__ == "__main__":
    main()
