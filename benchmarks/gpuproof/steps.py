"""The GPU proof's run step, on the GPU machine (Python 3.12, the payload's wheels, no caffetool venv).

Each step records its figures, or its error, in ``results.json`` (rewritten after every step, so a
call cut short still returns what it measured) and the next step runs either way. Steps come in
groups, one or more per call: ``training`` (LeNet on cuDNN; the same seed twice; NCCL on one GPU;
the 1x1 case), ``compare`` (LeNet with cuDNN's timed choice and on Caffe's kernels), ``time`` (``caffe time`` of four nets on cuDNN and on
Caffe's kernels), ``memory`` (the calibration nets and the published nets against the estimate),
``gtest`` (Caffe's whole test suite, sharded over the cores: the GPU tests are latency-bound).
"""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import re
import shutil
import subprocess
import tarfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from gpuproof import nets as proof_nets
from gpuproof.payload import WORK, data_name

GROUPS = ("training", "time", "memory", "gtest", "compare", "host")
CUDNN_LINE = re.compile(r"cuDNN (?P<layer>\S+) (?P<direction>forward|backward filter|backward data): "
                        r"(?P<algo>\S+), workspace (?P<bytes>\d+) bytes, (?P<math>\S+) math")
# Settings of the engine's cuDNN convolutions (patch 0006), per variant.
VARIANTS: dict[str, dict[str, str]] = {
    "cudnn": {},
    "cudnn_find": {"CAFFE_CUDNN_ALGO": "find"},
    "caffe": {},
}
VGG_EXTRA: dict[str, dict[str, str]] = {
    "cudnn_ws8": {"CAFFE_CUDNN_WORKSPACE_MB": "8"},
    "cudnn_ws1024": {"CAFFE_CUDNN_WORKSPACE_MB": "1024"},
    "cudnn_find_ws1024": {"CAFFE_CUDNN_ALGO": "find", "CAFFE_CUDNN_WORKSPACE_MB": "1024"},
    "cudnn_tf32": {"CAFFE_CUDNN_TF32": "1"},
}


class Proof:
    """The run: where the engine is, the results so far, and the time left."""

    def __init__(self, payload: Path, out: Path, budget: float) -> None:
        self.payload, self.out = payload.resolve(), out.resolve()
        self.deadline = time.monotonic() + budget
        self.results: dict = {"host": os.uname().nodename}
        self.caffe = WORK / "engine" / "bin" / "caffe"
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
                  timeout: float | None = None, wrap: list[str] | None = None) -> tuple[int, float]:
        """``caffe ARGS`` in ``cwd`` (under ``wrap``, e.g. taskset), stderr into ``log``: exit
        status and wall seconds."""
        start = time.perf_counter()
        with open(log, "w") as out:
            done = subprocess.run([*(wrap or []), str(self.caffe), *args], cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
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


# ---- common -----------------------------------------------------------------------------------

def install(proof: Proof) -> None:
    from importlib import metadata

    from caffetool.engine import bundles

    archive = proof.payload / "common" / "engine.tar.zst"

    def unpack(entry: dict) -> None:
        shutil.rmtree(WORK, ignore_errors=True)
        WORK.mkdir(parents=True)
        start = time.perf_counter()
        done = bundles.install(str(archive), WORK / "engine", link=False, pip=False)
        entry.update(seconds=round(time.perf_counter() - start, 2), notes=done.notes,
                     cuda_libraries=done.engine.manifest["bundle"].get("cuda_libraries"),
                     patches=done.engine.manifest.get("patches"), built_against=bundles.read_manifest(archive)["cuda"])
        versions = {}
        for dist in ("nvidia-cudnn-cu13", "nvidia-nccl-cu13", "nvidia-cublas", "nvidia-curand", "nvidia-cuda-runtime"):
            try:
                versions[dist] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                versions[dist] = None
        entry["running_with"] = versions

    def query(entry: dict) -> None:
        code, _ = proof.caffe_run(["device_query", "-gpu", "0"], WORK, proof.log("device_query"))
        lines = proof.log("device_query").read_text(errors="replace").splitlines()
        entry.update(exit=code, lines=[line.split("] ", 1)[-1] for line in lines if "] " in line][-24:])
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                              "--format=csv,noheader"], capture_output=True, text=True)
        entry["nvidia_smi"] = smi.stdout.strip()

    proof.do("install", unpack)
    proof.do("device_query", query)
    proof.do("gpu_facts", gpu_facts)
    nets = WORK / "nets"
    shutil.copytree(proof.payload / "common" / "nets", nets, dirs_exist_ok=True)
    for path in nets.glob("*.prototxt"):
        path.write_text(path.read_text().replace(proof_nets.DATA, str(WORK / "data")))
    (WORK / "data").mkdir(exist_ok=True)


def gpu_facts(entry: dict) -> None:
    """What the engine's checks without a GPU rely on, read off a real card and its cuDNN: NVML's
    compute capability and name, the architectures the engine's ``libcaffe`` carries (cuobjdump),
    and every file of the installed cuDNN with the libraries each needs that do not resolve."""
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    name = pynvml.nvmlDeviceGetName(handle)
    entry.update(nvml_name=name.decode() if isinstance(name, bytes) else name,
                 nvml_compute_capability=list(pynvml.nvmlDeviceGetCudaComputeCapability(handle)),
                 nvml_cuda_driver_version=pynvml.nvmlSystemGetCudaDriverVersion_v2())
    libcaffe = next((WORK / "engine" / "lib").glob("libcaffe.so*"), None)
    if libcaffe is not None and shutil.which("cuobjdump"):
        listing = subprocess.run(["cuobjdump", "--list-elf", "--list-ptx", str(libcaffe)], capture_output=True,
                                 text=True)
        entry["cuobjdump_archs"] = sorted(set(re.findall(r"\.(sm_\d+a?|compute_\d+a?)\.", listing.stdout)))
        entry["cuobjdump_lines"] = listing.stdout.splitlines()[:40]
    if libcaffe is not None:
        from caffetool.engine import fatbin

        entry["fatbin_archs"] = fatbin.architectures(libcaffe).as_dict()
    import nvidia.cudnn

    folder = Path(list(nvidia.cudnn.__path__)[0]) / "lib"
    files = {}
    for lib in sorted(folder.glob("libcudnn*.so*")):
        ldd = subprocess.run(["ldd", str(lib)], capture_output=True, text=True).stdout
        files[lib.name] = [line.split()[0] for line in ldd.splitlines() if "not found" in line]
    entry.update(cudnn_folder=str(folder), cudnn_files=files)


# ---- training ---------------------------------------------------------------------------------

def train(proof: Proof, name: str, solver: str, extra: dict[str, str], needs: float,
          wrap: list[str] | None = None) -> None:
    """``caffe train -gpu all`` of ``solver``, NVML sampled every 50 ms: wall seconds, accuracy,
    utilisation and the cuDNN choices."""
    from caffetool.runs import logparse

    def fill(entry: dict) -> None:
        sampler = Sampler(0.05)
        sampler.start()
        try:
            code, seconds = proof.caffe_run(["train", f"-solver={solver}", "-gpu", "all"], WORK / "nets",
                                            proof.log(name), extra, timeout=max(10.0, proof.left() - 5), wrap=wrap)
        finally:
            figures = sampler.finish()
        metrics = logparse.parse_file(proof.log(name))
        entry.update(exit=code, seconds=seconds, settings=extra, final_accuracy=metrics.latest("accuracy"),
                     final_loss=metrics.latest("loss"), iterations=metrics.iteration,
                     iter_per_s=metrics.iter_per_s, testing_seconds=metrics.testing_seconds,
                     fatal=metrics.fatal, cudnn=cudnn_choices(proof.log(name)), **figures)
    proof.do(name, fill, needs)


def training(proof: Proof) -> None:
    nets = WORK / "nets"

    def reproducible(entry: dict) -> None:
        digests = []
        for run in ("a", "b"):
            folder = WORK / f"repro_{run}"
            shutil.copytree(nets, folder, dirs_exist_ok=True)
            code, seconds = proof.caffe_run(["train", "-solver=lenet_seeded_solver.prototxt", "-gpu", "0"], folder,
                                            proof.log(f"lenet_repro_{run}"))
            model = folder / "seeded_iter_2000.caffemodel"
            digests.append(hashlib.sha256(model.read_bytes()).hexdigest() if model.exists() else None)
            entry[f"run_{run}"] = {"exit": code, "seconds": seconds}
        entry.update(sha256=digests, identical=digests[0] is not None and digests[0] == digests[1])

    proof.do("data", lambda entry: entry.update(seconds=convert_fashion(proof)), 20)
    train(proof, "lenet_cudnn", "lenet_cudnn_solver.prototxt", {}, 40)
    proof.do("lenet_reproducible", reproducible, 30)
    proof.do("nccl_one_gpu", lambda entry: nccl(proof, entry), 30)
    proof.do("cudnn_1x1_single_channel", lambda entry: entry.update(
        one_step(proof, "cudnn_1x1", proof_nets.conv_chain("CUDNN", 1, channels=1, kernel=1, size=8))), 15)


def nccl(proof: Proof, entry: dict) -> None:
    """``caffe::NCCL<float>::Run`` on one GPU against a plain solve (``benchmarks/nccl_one_gpu.cpp``)."""
    text, code, seconds = tool(proof, "nccl_one_gpu", ["lenet_nccl_solver.prototxt"])
    entry.update(exit=code, seconds=seconds,
                 summary=[line for line in text.splitlines() if line.startswith("NCCL one GPU")],
                 nccl=[line.split("] ", 1)[-1] for line in text.splitlines() if "NCCL" in line][:6])


def tool(proof: Proof, name: str, args: list[str]) -> tuple[str, int, float]:
    """One of the payload's C++ tools run in the nets folder: its output, exit status and seconds."""
    binary = proof.payload / "common" / "bin" / name
    binary.chmod(0o755)
    start = time.perf_counter()
    with open(proof.log(name), "w") as log:
        done = subprocess.run([str(binary), *args], cwd=WORK / "nets", stdout=log, stderr=subprocess.STDOUT,
                              env=proof.env, timeout=max(10.0, proof.left() - 5))
    return proof.log(name).read_text(errors="replace"), done.returncode, round(time.perf_counter() - start, 2)


HOST_LINE = re.compile(r"^(?P<what>.+?)\s+host\s+(?P<host>[\d.]+) us\s+wall\s+(?P<wall>[\d.]+) us$")


def host(proof: Proof) -> None:
    """Where LeNet's GPU time goes: host and wall microseconds per layer call and per iteration
    (``benchmarks/gpu_host_time.cpp``), and 2,000 training iterations of LeNet varied one part at a
    time (all on cuDNN, only the convolutions, none; no Data layer), twice as published and once
    with the process held to two cores; then NCCL on one GPU."""
    if "seconds" not in proof.results.get("data", {}):
        proof.do("data", lambda entry: entry.update(seconds=convert_fashion(proof)), 20)

    def host_time(entry: dict, net: str) -> None:
        text, code, seconds = tool(proof, "gpu_host_time", [net, "1000"])
        entry.update(exit=code, seconds=seconds, calls={
            m.group("what"): {"host_us": float(m.group("host")), "wall_us": float(m.group("wall"))}
            for line in text.splitlines() if (m := HOST_LINE.match(line.strip()))})
        if code:
            entry["tail"] = text.splitlines()[-12:]

    for net in ("lenet_no_data", "time_lenet_caffe"):
        proof.do(f"host_{net}", lambda entry, net=net: host_time(entry, f"{net}.prototxt"), 20)
    for variant in ("all_cudnn", "conv_cudnn", "no_cudnn", "no_data", "all_cudnn"):
        key = f"lenet2000_{variant}" + ("_again" if f"lenet2000_{variant}" in proof.results else "")
        train(proof, key, f"lenet_{variant}_solver.prototxt", {}, 15)
    taskset = shutil.which("taskset")
    if taskset:
        train(proof, "lenet2000_all_cudnn_two_cores", "lenet_all_cudnn_solver.prototxt", {}, 15,
              wrap=[taskset, "-c", "2,3"])
    proof.do("nccl_one_gpu", lambda entry: nccl(proof, entry), 15)


def compare(proof: Proof) -> None:
    """LeNet with cuDNN's timed algorithm choice and on Caffe's own kernels: figures beside the
    proof's, not targets, so they run last."""
    if "seconds" not in proof.results.get("data", {}):
        proof.do("data", lambda entry: entry.update(seconds=convert_fashion(proof)), 20)
    train(proof, "lenet_cudnn_find", "lenet_cudnn_solver.prototxt", VARIANTS["cudnn_find"], 40)
    train(proof, "lenet_caffe", "lenet_caffe_solver.prototxt", {}, 120)


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


# ---- caffe time -------------------------------------------------------------------------------

def timing(proof: Proof) -> None:
    nets = WORK / "nets"
    runs = [(name, batch, variant, VARIANTS[variant]) for name, batch in proof_nets.TIME_NETS for variant in VARIANTS]
    runs.sort(key=lambda run: run[0] != "vgg16")  # the target's net first
    runs += [("vgg16", 64, variant, extra) for variant, extra in VGG_EXTRA.items()]
    for name, batch, variant, extra in runs:
        key = f"time_{name}_{variant}"
        engine = "caffe" if variant == "caffe" else "cudnn"

        def fill(entry: dict, key: str = key, name: str = name, batch: int = batch, engine: str = engine,
                 extra: dict = extra) -> None:
            code, seconds = proof.caffe_run(["time", f"-model=time_{name}_{engine}.prototxt", "-gpu", "0",
                                             "-iterations", str(proof_nets.TIME_ITERATIONS.get(name, 20))],
                                            nets, proof.log(key), extra,
                                            timeout=max(10.0, proof.left() - 5))
            entry.update(exit=code, batch=batch, seconds=seconds, settings=extra, cudnn=cudnn_choices(proof.log(key)),
                         **time_figures(proof.log(key).read_text(errors="replace")))
        proof.do(key, fill, 30)


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


# ---- memory -----------------------------------------------------------------------------------

CALIBRATION: dict[str, Callable[[], str]] = {
    "baseline": lambda: __import__("caffetool.memory.gpumeasure", fromlist=["x"]).BASELINE_NET,
    "dropout": proof_nets.dropout_net,
    "data_1": lambda: proof_nets.data_net(1),
    "data_2": lambda: proof_nets.data_net(2),
    "cudnn_relu_1": lambda: proof_nets.neuron_chain("relu", 1),
    "cudnn_relu_16": lambda: proof_nets.neuron_chain("relu", 16),
    "cudnn_pool_1": lambda: proof_nets.neuron_chain("pool", 1),
    "cudnn_pool_16": lambda: proof_nets.neuron_chain("pool", 16),
    **{f"conv_{engine.lower()}_{k}": (lambda engine=engine, k=k: proof_nets.conv_chain(engine, k))
       for engine in ("CUDNN", "CAFFE") for k in (1, 4, 16)},
}


def memory(proof: Proof) -> None:
    plan = json.loads((proof.payload / "common" / "nets" / "plan.json").read_text())
    make_lmdb(WORK / "data" / "memory_tiny", 4, (2, 1, 1), 2)
    for name, text in CALIBRATION.items():
        proof.do(f"memory_{name}", lambda entry, name=name, text=text: entry.update(
            one_step(proof, name, text().replace(proof_nets.DATA, str(WORK / "data")), test=name == "data_2")), 15)
    for name, info in plan.items():
        make_lmdb(WORK / "data" / f"memory_{name}", info["batch"] + 2, tuple(info["shape"]), info["classes"])
        for variant in ("cudnn", "caffe"):
            def fill(entry: dict, name: str = name, variant: str = variant, batch: int = info["batch"]) -> None:
                net = (WORK / "nets" / f"memory_{name}_{variant}.prototxt").read_text()
                entry.update(batch=batch, **one_step(proof, f"{name}_{variant}", net, test=True))
            proof.do(f"memory_{name}_{variant}", fill, 30)


def one_step(proof: Proof, name: str, net: str, test: bool = False) -> dict:
    """Peak device memory over the idle card while ``caffe train`` builds the solver, tests once
    (``test``) and steps once (caffetool's ``memory.measure --mode gpu`` mechanism), and the cuDNN
    choices it logged."""
    from caffetool.memory import gpumeasure

    folder = WORK / f"mem_{name}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    (folder / "net.prototxt").write_text(net)
    tests = "test_iter: 1 test_interval: 1000 test_initialization: true " if test else ""
    (folder / "solver.prototxt").write_text(f'net: "net.prototxt" {tests}base_lr: 0.001 lr_policy: "fixed" '
                                            f'momentum: 0.9 max_iter: {gpumeasure.STEPS} snapshot_after_train: false '
                                            'solver_mode: GPU')
    try:
        used = gpumeasure.peak_of_one_step(proof.caffe, folder, 0, gpumeasure.nvml(), proof.env)
    finally:
        if (folder / "caffe.log").exists():
            shutil.copyfile(folder / "caffe.log", proof.log(f"memory_{name}"))
    choices = cudnn_choices(folder / "caffe.log")
    return {"used": used, "workspace": max((c["bytes"] for c in choices), default=0), "cudnn": choices}


def make_lmdb(path: Path, records: int, shape: tuple[int, ...], classes: int) -> None:
    """Random images of ``shape`` as Caffe Datums (caffetool's encoder) in a fresh LMDB."""
    import lmdb
    import numpy as np

    from caffetool.data import datum

    if path.exists():
        return
    rng = np.random.default_rng(0)
    env = lmdb.open(str(path), map_size=1 << 32, subdir=True)
    with env.begin(write=True) as txn:
        for i in range(records):
            pixels = rng.integers(0, 256, int(np.prod(shape)), dtype=np.uint8).tobytes()
            txn.put(f"{i:08d}".encode(), datum.encode_one(pixels, i % classes, *shape))
    env.close()


# ---- Caffe's test suite -----------------------------------------------------------------------

SUMMARY = re.compile(r"^\[==========\] (\d+) tests? from \d+ test cases? ran")
OK = re.compile(r"^\[       OK \] (\S+)")
FAILED = re.compile(r"^\[  FAILED  \] (\S+?),?( .*)?$")


def gtest(proof: Proof, shards: int) -> None:
    """Caffe's whole suite (CPU and GPU tests) in ``shards`` processes on the one GPU (googletest's
    own sharding), then every failed test once more alone: a test that passes alone failed only
    for the company (the timer tests measure wall time)."""
    import zstandard

    root = WORK / "gtest"
    binary = root / "bin" / "test.testbin"
    source = Path((proof.payload / "gtest" / "gtest.txt").read_text().strip())

    def unpack(entry: dict) -> None:
        with open(proof.payload / "gtest" / "gtest.tar.zst", "rb") as raw, \
                zstandard.ZstdDecompressor().stream_reader(raw) as zst, tarfile.open(fileobj=zst, mode="r|") as tar:
            tar.extractall(root)
        shutil.copytree(root / source.relative_to("/") / "src", source / "src", dirs_exist_ok=True)
        binary.chmod(0o755)
        entry["source"] = str(source)

    def suite(entry: dict) -> None:
        start = time.perf_counter()
        procs = []
        mps = start_mps(proof)
        entry["mps"] = mps is not None
        for index in range(shards):
            log = open(proof.log(f"gtest_shard{index}"), "w")
            env = {**proof.env, **(mps or {}), "GTEST_TOTAL_SHARDS": str(shards), "GTEST_SHARD_INDEX": str(index)}
            procs.append((subprocess.Popen([str(binary)], cwd=source, stdout=log, stderr=subprocess.STDOUT,
                                           env=env), log))
        codes: list[int | str] = []
        for proc, log in procs:
            try:
                codes.append(proc.wait(timeout=max(5.0, proof.left() - 60)))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                codes.append("killed at the time limit")
            log.close()
        stop_mps(mps)
        ran = ok = 0
        failed: list[str] = []
        aborted: list[str] = []  # a shard that died (a CHECK aborts the binary): the test it was in
        for index in range(shards):
            lines = proof.log(f"gtest_shard{index}").read_text(errors="replace").splitlines()
            for line in lines:
                if m := SUMMARY.match(line):
                    ran += int(m.group(1))
                elif OK.match(line):
                    ok += 1
                elif (m := FAILED.match(line)) and "." in m.group(1) and m.group(1) not in failed:
                    failed.append(m.group(1))
            running = [line.split("]", 1)[1].strip() for line in lines if line.startswith("[ RUN      ]")]
            if running and not any(SUMMARY.match(line) for line in lines):
                aborted.append(running[-1])
        entry.update(shards=shards, exits=codes, seconds=round(time.perf_counter() - start, 1), tests_run=ran,
                     tests_ok=ok, failed=failed, aborted=aborted)

    def rerun(entry: dict) -> None:
        failed = proof.results["caffe_test_suite"]["failed"] + proof.results["caffe_test_suite"]["aborted"]
        with open(proof.log("gtest_rerun"), "w") as log:
            code = subprocess.run([str(binary), f"--gtest_filter={':'.join(failed)}"], cwd=source, stdout=log,
                                  stderr=subprocess.STDOUT, env=proof.env,
                                  timeout=max(5.0, proof.left() - 10)).returncode
        lines = proof.log("gtest_rerun").read_text(errors="replace").splitlines()
        passed = {m.group(1) for line in lines if (m := OK.match(line))}
        entry.update(exit=code, tests_ok=len(passed), still_failed=sorted(set(failed) - passed))

    proof.do("gtest_unpack", unpack)
    proof.do("caffe_test_suite", suite, 60)
    if proof.results["caffe_test_suite"].get("failed") or proof.results["caffe_test_suite"].get("aborted"):
        proof.do("caffe_test_suite_rerun", rerun, 20)


def start_mps(proof: Proof) -> dict[str, str] | None:
    """NVIDIA's Multi-Process Service for the shards, where the machine has it: without it the
    shards' contexts take turns on the GPU in time slices, and the suite's GPU tests (gradient checks:
    thousands of tiny kernels, each followed by a wait) ran 100-190 s each in 12 shards (record of
    2026-11-27) instead of running side by side. The environment the shards need, or None."""
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        return None
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(WORK / "mps-pipe"), "CUDA_MPS_LOG_DIRECTORY": str(WORK / "mps-log")}
    for folder in env.values():
        Path(folder).mkdir(parents=True, exist_ok=True)
    done = subprocess.run([control, "-d"], env={**os.environ, **env}, capture_output=True, text=True)
    return env if done.returncode == 0 else None


def stop_mps(env: dict[str, str] | None) -> None:
    if env is not None:
        subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", text=True, env={**os.environ, **env},
                       capture_output=True, timeout=30)


def run(payload: Path, out: Path, groups: list[str], budget: float, shards: int) -> dict:
    proof = Proof(payload, out, budget)
    install(proof)
    for group in groups:
        if group == "gtest":
            gtest(proof, shards)
        else:
            {"training": training, "time": timing, "memory": memory, "compare": compare, "host": host}[group](proof)
    (out / "results.json").write_text(json.dumps(proof.results, indent=1))
    with tarfile.open(out / "logs.tar.gz", "w:gz") as tar:  # one file: few files come back
        tar.add(out / "logs", arcname="logs")
    shutil.rmtree(out / "logs")
    return proof.results


def summary(results: dict) -> dict:
    """The results without their long lists: what the call's output tail shows."""
    short = {}
    for key, value in results.items():
        if not isinstance(value, dict):
            continue
        short[key] = {k: v for k, v in value.items() if k not in ("lines", "error", "cudnn", "patches", "built_against")}
        if "error" in value:
            short[key]["error"] = value["error"].strip().splitlines()[-1][:300]
    return short
