"""The GPU proof's groups of steps, on the GPU machine (Python 3.12, the payload's wheels, no caffetool venv).

Each step records its figures, or its error, in ``results.json`` (:class:`gpuproof.proof.Proof`)
and the next step runs either way. Steps come in groups, one or more per call: ``training`` (LeNet
on the baseline engine and on the engine under test with CUDA graphs off and on, twice each, and
VGG-16's ``caffe time`` on both engines (:mod:`gpuproof.versus`); the same seed twice; NCCL on one
GPU; the 1x1 case), ``torch`` (the same LeNet in PyTorch, eager and as a CUDA graph), ``compare``
(LeNet with cuDNN's timed choice and on Caffe's kernels), ``time`` (``caffe time`` of five nets on
cuDNN and on Caffe's kernels), ``memory`` (Caffe's own allocations logged call by call for the
three nets whose estimates are off, then the calibration nets and the published nets against the
estimate), ``host`` (where LeNet's GPU time goes), ``pycaffe`` (pycaffe on the GPU, in the Python
the payload carries: :mod:`gpuproof.pycaffe_gpu`), ``gtest`` (Caffe's test suite, continued across
calls: :mod:`gpuproof.gtestrun`).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

from gpuproof import allocations, enginediff, gtestrun, pyruntime, versus
from gpuproof import nets as proof_nets
from gpuproof.payload import BASELINE, ENGINE_LIB, LOGGER, PYCAFFE, WORK
from gpuproof.proof import Proof, caffe_time, cudnn_choices, fashion_data, tool, train

GROUPS = ("training", "torch", "time", "memory", "pycaffe", "gtest", "compare", "host")
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
# The memory nets whose estimates were furthest off (record of 2026-11-27): (net, engine).
LOGGED = (("lenet", "caffe"), ("caffenet", "caffe"), ("lenet", "cudnn"))


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

    def second(entry: dict) -> None:
        listing = enginediff.install_copy(WORK / "engine", proof.payload / BASELINE, WORK / "baseline")
        entry.update(changed=listing["changed"], removed=listing["removed"])
        built = json.loads((WORK / "baseline" / "caffetool-engine.json").read_text())
        entry["patches"] = [patch.get("name") for patch in built.get("patches", [])]

    proof.do("install", unpack)
    if (proof.payload / BASELINE / enginediff.LISTING).exists():
        proof.do("install_baseline", second)
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

def training(proof: Proof) -> None:
    nets = WORK / "nets"

    def reproducible(entry: dict) -> None:
        """The same seed twice, then once more with the CUDA graphs off: the weights of all three."""
        digests = []
        for run, flags in (("a", []), ("b", []), ("eager", list(versus.NO_GRAPHS))):
            folder = WORK / f"repro_{run}"
            shutil.copytree(nets, folder, dirs_exist_ok=True)
            code, seconds = proof.caffe_run(["train", "-solver=lenet_seeded_solver.prototxt", "-gpu", "0", *flags],
                                            folder, proof.log(f"lenet_repro_{run}"))
            model = folder / "seeded_iter_2000.caffemodel"
            digests.append(hashlib.sha256(model.read_bytes()).hexdigest() if model.exists() else None)
            entry[f"run_{run}"] = {"exit": code, "seconds": seconds}
        entry.update(sha256=digests, identical=digests[0] is not None and digests[0] == digests[1],
                     graphs_equal_eager=digests[0] is not None and digests[0] == digests[2])

    fashion_data(proof)
    versus.engines(proof)
    versus.host_waits(proof)
    versus.vgg16_time(proof)
    proof.do("lenet_reproducible", reproducible, 45)
    proof.do("nccl_one_gpu", lambda entry: nccl(proof, entry), 30)
    proof.do("cudnn_1x1_single_channel", lambda entry: entry.update(
        one_step(proof, "cudnn_1x1", proof_nets.conv_chain("CUDNN", 1, channels=1, kernel=1, size=8))), 15)


def nccl(proof: Proof, entry: dict) -> None:
    """``caffe::NCCL<float>::Run`` on one GPU against a plain solve (``benchmarks/nccl_one_gpu.cpp``)."""
    text, code, seconds = tool(proof, "nccl_one_gpu", ["lenet_nccl_solver.prototxt"])
    entry.update(exit=code, seconds=seconds,
                 summary=[line for line in text.splitlines() if line.startswith("NCCL one GPU")],
                 nccl=[line.split("] ", 1)[-1] for line in text.splitlines() if "NCCL" in line][:6])


HOST_LINE = re.compile(r"^(?P<what>.+?)\s+host\s+(?P<host>[\d.]+) us\s+wall\s+(?P<wall>[\d.]+) us$")


def host(proof: Proof) -> None:
    """Where LeNet's GPU time goes: host and wall microseconds per layer call and per iteration
    (``benchmarks/gpu_host_time.cpp``), and 2,000 training iterations of LeNet varied one part at a
    time (all on cuDNN, only the convolutions, none; no Data layer), twice as published and once
    with the process held to two cores; then NCCL on one GPU."""
    fashion_data(proof)

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
    fashion_data(proof)
    train(proof, "lenet_cudnn_find", "lenet_cudnn_solver.prototxt", VARIANTS["cudnn_find"], 40)
    train(proof, "lenet_caffe", "lenet_caffe_solver.prototxt", {}, 120)


# ---- pycaffe ----------------------------------------------------------------------------------

def pycaffe(proof: Proof) -> None:
    """pycaffe on the GPU (:mod:`gpuproof.pycaffe_gpu`) in the Python 3.11 the payload carries
    (:mod:`gpuproof.pyruntime`): every check's figures in the step's entry."""
    from caffetool.engine.locate import PYCAFFE_DIR

    root = WORK / "python"

    def unpack(entry: dict) -> None:
        start = time.perf_counter()
        python = pyruntime.unpack(proof.payload / PYCAFFE / pyruntime.ARCHIVE, root)
        entry.update(seconds=round(time.perf_counter() - start, 2), interpreter=str(python))

    def checks(entry: dict) -> None:
        env = {k: v for k, v in proof.env.items() if not k.startswith("PYTHON")}
        env.update(pyruntime.environment(root, WORK / "engine" / PYCAFFE_DIR, ENGINE_LIB / "vendor"))
        out = proof.out / "pycaffe.json"
        with open(proof.log("pycaffe"), "w") as log:
            done = subprocess.run([str(root / pyruntime.INTERPRETER), str(Path(__file__).with_name("pycaffe_gpu.py")),
                                   "run", "--mode", "gpu", "--suite", str(root / "suite"), "--out", str(out)],
                                  stdout=log, stderr=subprocess.STDOUT, env=env, timeout=max(60.0, proof.left() - 30))
        entry["exit"] = done.returncode
        if out.exists():
            entry.update(json.loads(out.read_text()))
            out.unlink()

    proof.do("pycaffe_runtime", unpack, 10)
    proof.do("pycaffe", checks, 90)


# ---- caffe time -------------------------------------------------------------------------------

def timing(proof: Proof) -> None:
    runs = [(name, batch, variant, VARIANTS[variant]) for name, batch in proof_nets.TIME_NETS for variant in VARIANTS]
    runs.sort(key=lambda run: run[0] != "vgg16")  # the target's net first
    runs += [("vgg16", 64, variant, extra) for variant, extra in VGG_EXTRA.items()]
    for name, batch, variant, extra in runs:
        key = f"time_{name}_{variant}"
        engine = "caffe" if variant == "caffe" else "cudnn"

        def fill(entry: dict, key: str = key, name: str = name, batch: int = batch, engine: str = engine,
                 extra: dict = extra) -> None:
            entry.update(batch=batch, **caffe_time(proof, key, name, engine, extra))
        proof.do(key, fill, 30)


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
    for name, engine in LOGGED:
        info = plan[name]
        make_lmdb(WORK / "data" / f"memory_{name}", info["batch"] + 2, tuple(info["shape"]), info["classes"])
        proof.do(f"allocations_{name}_{engine}", lambda entry, name=name, engine=engine: entry.update(
            logged_step(proof, name, engine, plan[name]["batch"])), 20)
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


def logged_step(proof: Proof, name: str, engine: str, batch: int) -> dict:
    """One memory step of ``memory_NAME_ENGINE`` with every ``cudaMalloc``/``cudaFree`` of
    ``libcaffe`` logged (:mod:`gpuproof.allocations`): NVML's peak beside Caffe's own live bytes."""
    log = proof.log(f"allocations_{name}_{engine}_calls")
    log.unlink(missing_ok=True)
    library = proof.payload / LOGGER
    net = (WORK / "nets" / f"memory_{name}_{engine}.prototxt").read_text()
    figures = one_step(proof, f"{name}_{engine}_logged", net, test=True,
                       extra={"LD_PRELOAD": str(library), allocations.VARIABLE: str(log)})
    calls = log.read_text() if log.exists() else ""
    return {"batch": batch, "used": figures["used"], "workspace": figures["workspace"],
            "logged_lines": len(calls.splitlines()), **allocations.peak(calls)}


def one_step(proof: Proof, name: str, net: str, test: bool = False, extra: dict[str, str] | None = None) -> dict:
    """Peak device memory over the idle card while ``caffe train`` builds the solver, tests once
    (``test``) and steps once (caffetool's ``memory.measure --mode gpu`` mechanism), and the cuDNN
    choices it logged; ``extra`` is added to the process's environment."""
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
        used = gpumeasure.peak_of_one_step(proof.caffe, folder, 0, gpumeasure.nvml(), {**proof.env, **(extra or {})})
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


def run(payload: Path, out: Path, groups: list[str], budget: float, shards: int, done: Path | None = None) -> dict:
    """Install the payload's engines, then each group in turn; ``done`` (for ``gtest``): the tests
    finished in earlier calls."""
    proof = Proof(payload, out, budget)
    install(proof)
    for group in groups:
        if group == "gtest":
            gtestrun.gtest(proof, shards, done)
        else:
            {"training": training, "torch": versus.torch_anchor, "time": timing, "memory": memory,
             "pycaffe": pycaffe, "compare": compare, "host": host}[group](proof)
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
        short[key] = {k: v for k, v in value.items()
                      if k not in ("lines", "error", "cudnn", "patches", "built_against", "sizes_at_peak", "changed")}
        if "error" in value:
            short[key]["error"] = value["error"].strip().splitlines()[-1][:300]
    return short
