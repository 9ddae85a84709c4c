"""The GPU proof's run machinery, on the GPU machine: the run and its budget, NVML sampling, and the
ways a step runs Caffe (``caffe train`` of a solver, the payload's C++ tools, the data conversion).

Each step records its figures, or its error, in ``results.json`` (rewritten after every step, so a
call cut short still returns what it measured) and the next step runs either way. Python 3.12 and
the payload's wheels only: no caffetool venv there.
"""

from __future__ import annotations

import json
import lzma
import os
import re
import shutil
import subprocess
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from gpuproof.nets import TIME_ITERATIONS
from gpuproof.payload import WORK, data_name

CUDNN_LINE = re.compile(r"cuDNN (?P<layer>\S+) (?P<direction>forward|backward filter|backward data): "
                        r"(?P<algo>\S+), workspace (?P<bytes>\d+) bytes, (?P<math>\S+) math")


class Proof:
    """The run: where the engine is, the results so far, and the time left."""

    def __init__(self, payload: Path, out: Path, budget: float) -> None:
        self.payload, self.out = payload.resolve(), out.resolve()
        self.deadline = time.monotonic() + budget
        self.results: dict = {"host": os.uname().nodename}
        self.caffe = WORK / "engine" / "bin" / "caffe"
        self.baseline = WORK / "baseline" / "bin" / "caffe"  # the payload's second engine, when it has one
        self.env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
        self.env["GLOG_logtostderr"] = "1"
        out.mkdir(parents=True, exist_ok=True)
        (out / "logs").mkdir(exist_ok=True)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def do(self, name: str, fill: Callable[[dict], object], needs: float = 0) -> dict:
        """Run step ``name``: ``fill`` records its figures in the step's entry; an error is recorded
        instead of raised; skipped when less than ``needs`` seconds are left."""
        entry = self.results.setdefault(name, {})
        if self.left() < needs:
            entry["skipped"] = f"{self.left():.0f} s left, needs {needs:.0f}"
            print(f"== {name}: skipped", flush=True)
        else:
            print(f"== {name}", flush=True)
            start = time.perf_counter()
            try:
                fill(entry)
            except Exception:  # noqa: BLE001 - the proof records every failure and goes on
                entry["error"] = traceback.format_exc()[-2000:]
                print(entry["error"], flush=True)
            entry["step_seconds"] = round(time.perf_counter() - start, 2)
        (self.out / "results.json").write_text(json.dumps(self.results, indent=1))
        return entry

    def log(self, name: str) -> Path:
        return self.out / "logs" / f"{name}.log"

    def caffe_run(self, args: list[str], cwd: Path, log: Path, extra: dict[str, str] | None = None,
                  timeout: float | None = None, wrap: list[str] | None = None,
                  caffe: Path | None = None) -> tuple[int, float]:
        """``caffe ARGS`` (the engine under test unless ``caffe`` names another) in ``cwd`` (under
        ``wrap``, e.g. taskset), stderr into ``log``: exit status and wall seconds."""
        start = time.perf_counter()
        with open(log, "w") as out:
            done = subprocess.run([*(wrap or []), str(caffe or self.caffe), *args], cwd=cwd, stdout=out,
                                  stderr=subprocess.STDOUT,
                                  env={**self.env, **(extra or {})}, timeout=timeout)
        return done.returncode, round(time.perf_counter() - start, 2)


class Sampler(threading.Thread):
    """NVML samples of GPU 0: utilisation (percent of time a kernel ran) and used memory."""

    def __init__(self, period: float) -> None:
        super().__init__(daemon=True)
        import pynvml

        pynvml.nvmlInit()
        self.nvml, self.handle, self.period = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0), period
        self.util: list[int] = []
        self.used: list[int] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.util.append(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)
            self.used.append(self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used)
            self.stop.wait(self.period)

    def finish(self) -> dict:
        self.stop.set()
        self.join()
        busy = [u for u in self.util if u > 0]
        return {"gpu_util_mean": round(sum(self.util) / max(1, len(self.util)), 1),
                "gpu_util_busy_mean": round(sum(busy) / max(1, len(busy)), 1), "samples": len(self.util),
                "peak_used": max(self.used, default=0)}


def cudnn_choices(log: Path) -> list[dict]:
    """The algorithms the engine's convolutions chose (patch 0006 logs one line per choice)."""
    return [{**m.groupdict(), "bytes": int(m.group("bytes"))}
            for m in CUDNN_LINE.finditer(log.read_text(errors="replace"))]


def train(proof: Proof, name: str, solver: str, extra: dict[str, str], needs: float,
          wrap: list[str] | None = None, caffe: Path | None = None, flags: tuple[str, ...] = ()) -> dict:
    """``caffe train -gpu all`` of ``solver`` (with ``flags``; on ``caffe``, default the engine under
    test), NVML sampled every 50 ms: wall seconds, accuracy, utilisation, the cuDNN choices and the
    lines that speak of CUDA graphs."""
    from caffetool.runs import logparse

    def fill(entry: dict) -> None:
        sampler = Sampler(0.05)
        sampler.start()
        try:
            code, seconds = proof.caffe_run(["train", f"-solver={solver}", "-gpu", "all", *flags], WORK / "nets",
                                            proof.log(name), extra, timeout=max(10.0, proof.left() - 5), wrap=wrap,
                                            caffe=caffe)
        finally:
            figures = sampler.finish()
        metrics = logparse.parse_file(proof.log(name))
        entry.update(exit=code, seconds=seconds, settings=extra, final_accuracy=metrics.latest("accuracy"),
                     final_loss=metrics.latest("loss"), iterations=metrics.iteration,
                     iter_per_s=metrics.iter_per_s, testing_seconds=metrics.testing_seconds,
                     fatal=metrics.fatal, cudnn=cudnn_choices(proof.log(name)), **figures)
        if flags:
            entry["flags"] = list(flags)
        text = proof.log(name).read_text(errors="replace")
        entry["cuda_graph_lines"] = [line.split("] ", 1)[-1] for line in text.splitlines() if "CUDA graph" in line][:20]
        entry.update(training_span(text))
    return proof.do(name, fill, needs)


def training_span(log: str, first: int = 100) -> dict:
    """Training alone, read off ``caffe train``'s log as cpu_speed.py reads it: from the display
    line of iteration ``first`` to the last one, less the tests run in between (each from its
    ``Testing net`` line to its last output line). ``torch_lenet.py`` times the same span."""
    from caffetool import glog

    shown: list[tuple[int, float]] = []
    tests: list[list[float]] = []
    for line in glog.lines(log):
        when = line.time()
        if when is None:
            continue
        seconds = when.timestamp()
        if m := glog.ITERATION.match(line.message):
            shown.append((int(m.group(1)), seconds))
        elif "Testing net" in line.message:
            tests.append([seconds, seconds])
        elif "Test net output" in line.message and tests:
            tests[-1][1] = seconds
    start = next((t for i, t in shown if i == first), None)
    if start is None or shown[-1][0] <= first:
        return {}
    end = shown[-1][1]
    testing = sum(b - a for a, b in tests if start < a < end)
    seconds = end - start - testing
    return {"training_seconds": round(seconds, 3), "timed_iters": shown[-1][0] - first,
            "training_iter_per_s": round((shown[-1][0] - first) / seconds, 1) if seconds > 0 else None}


def caffe_time(proof: Proof, key: str, name: str, engine: str, extra: dict[str, str],
               caffe: Path | None = None) -> dict:
    """``caffe time`` of the nets folder's ``time_NAME_ENGINE.prototxt`` on GPU 0 (on ``caffe``,
    default the engine under test), ``extra`` added to its environment, its log in ``key``'s: exit
    status, wall seconds, the cuDNN choices and :func:`time_figures`. One helper for the ``time``
    group and for the engines' VGG-16 side by side, so that both time the same net the same way."""
    log = proof.log(key)
    code, seconds = proof.caffe_run(["time", f"-model=time_{name}_{engine}.prototxt", "-gpu", "0",
                                     "-iterations", str(TIME_ITERATIONS.get(name, 20))],
                                    WORK / "nets", log, extra, timeout=max(10.0, proof.left() - 5), caffe=caffe)
    return {"exit": code, "seconds": seconds, "settings": extra, "cudnn": cudnn_choices(log),
            **time_figures(log.read_text(errors="replace"))}


def time_figures(log: str) -> dict:
    """``caffe time``'s averages, and forward + backward without the data layer: DummyData refills
    its Gaussian blob on the CPU at every forward pass, which is input generation, not the net."""
    averages, layers = {}, {}
    for line in log.splitlines():
        for label in ("Average Forward pass", "Average Backward pass", "Average Forward-Backward"):
            if label in line:
                averages[label] = float(line.split(":")[-1].split()[0])
        text = line.split("] ", 1)[-1].strip()
        if "\tforward: " in text or "\tbackward: " in text:
            name, rest = text.split("\t", 1)
            direction, value = rest.split(": ")
            layers.setdefault(name.strip(), {})[direction] = float(value.split()[0])
    data = sum(layers.get("data", {}).values())
    total = averages.get("Average Forward-Backward")
    return {"ms": averages, "data_layer_ms": data, "net_ms": None if total is None else round(total - data, 3)}


def tool(proof: Proof, name: str, args: list[str]) -> tuple[str, int, float]:
    """One of the payload's C++ tools run in the nets folder: its output, exit status and seconds."""
    binary = proof.payload / "common" / "bin" / name
    binary.chmod(0o755)
    start = time.perf_counter()
    with open(proof.log(name), "w") as log:
        done = subprocess.run([str(binary), *args], cwd=WORK / "nets", stdout=log, stderr=subprocess.STDOUT,
                              env=proof.env, timeout=max(10.0, proof.left() - 5))
    return proof.log(name).read_text(errors="replace"), done.returncode, round(time.perf_counter() - start, 2)


def fashion_data(proof: Proof) -> None:
    """Fashion-MNIST converted once per call, by whichever group needs it first."""
    if "seconds" not in proof.results.get("data", {}):
        proof.do("data", lambda entry: entry.update(seconds=convert_fashion(proof)), 20)


def convert_fashion(proof: Proof) -> float:
    """Fashion-MNIST's IDX files into LMDB with the bundle's own ``convert_mnist_data``."""
    start = time.perf_counter()
    for split, stem in (("train", "train"), ("test", "t10k")):
        raw = {}
        for kind in ("images-idx3", "labels-idx1"):
            raw[kind] = WORK / f"{stem}-{kind}-ubyte"
            with lzma.open(proof.payload / "data" / data_name(f"{stem}-{kind}-ubyte.gz")) as src, \
                    open(raw[kind], "wb") as dst:
                shutil.copyfileobj(src, dst)
        subprocess.run([str(WORK / "engine" / "bin" / "convert_mnist_data"), str(raw["images-idx3"]),
                        str(raw["labels-idx1"]), str(WORK / "data" / f"{split}_lmdb"), "--backend=lmdb"],
                       check=True, capture_output=True, env=proof.env)
    return round(time.perf_counter() - start, 2)

