"""The GPU engine proven on a GPU: a CUDA engine bundle installed and run where the GPU is.

Three steps, because the machine with the GPU has no compiler toolchain for Caffe's dependencies,
no caffetool environment and no network:

``prepare`` (here, with the caffetool venv and the CPU engine for pycaffe's NetSpec): bundles the
CUDA engine (``engine.bundle`` of the compile-check prefix), and writes a payload folder with the
bundle, Fashion-MNIST's IDX files, the nets and solvers (LeNet's published recipe on the GPU with
cuDNN and with every layer on Caffe's own engine; CaffeNet and VGG-16 for ``caffe time``; LeNet,
CaffeNet, VGG-16 and a ResNet-style net for memory) and the estimator's GPU figures for them.

``run`` (on the GPU machine, with only the standard library, zstandard, platformdirs, lmdb,
numpy and nvidia-ml-py): installs the bundle with caffetool's own bundle installer (sha256,
machine, glibc and driver checks, the CUDA wheels found in that Python), then ``caffe
device_query``, LeNet's 10,000 iterations with ``-gpu all`` (cuDNN, then without) while NVML
samples utilisation, ``caffe time`` for CaffeNet and VGG-16 with cuDNN on and off, and device
memory around one training step of each memory net (NVML's used memory at its peak, less that of
a one-layer net run the same way: the CUDA context and library handles). Every step records its
own error and the next one still runs; ``results.json`` and the logs go to the output folder.

``report``: the table for ``benchmarks/RESULTS.md`` from ``results.json``.

    .venv/bin/python benchmarks/gpu_proof.py prepare --prefix ~/.cache/caffetool/engine-cuda-check --out build/gpu-proof
    python3 benchmarks/gpu_proof.py run --payload build/gpu-proof --out "$OUT"     # on the GPU machine
    .venv/bin/python benchmarks/gpu_proof.py report results.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import traceback
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

DATA_TOKEN = "@DATA@"
FASHION_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                 "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
TIME_NETS = (("caffenet", 256), ("vgg16", 64))
MEMORY_NETS = (("lenet", 64), ("caffenet", 32), ("vgg16", 16), ("resnet_style", 16))
# Published: BVLC's LeNet solver on MNIST, Caffe 1.0-rc5, CUDA 8, cuDNN 5.1, 4 x Tesla M40 (Dell EMC
# PowerEdge C4130 walkthrough); CPU figure measured here (benchmarks/RESULTS.md).
PUBLISHED_M40 = {"seconds": 32, "accuracy": 0.9909}


# ---------------------------------------------------------------------------------------------
# prepare (here)


def prepare(prefix: str, out: Path, fashion: Path | None, existing: Path | None = None,
            gtest: Path | None = None) -> None:
    from caffetool.engine import bundle, import_caffe, locate
    from caffetool.memory import estimate as est
    from caffetool.memory import nets as memory_nets

    caffe = import_caffe(locate(probe=False))
    pb = caffe.proto.caffe_pb2
    if out.exists():
        shutil.rmtree(out)
    (out / "nets").mkdir(parents=True)
    if existing is None:
        made = bundle.make(prefix, out / "engine.tar.zst")
        print(f"bundle: {made.size / 2**20:.1f} MiB, glibc >= {made.glibc}, CUDA {(made.cuda or {}).get('major')}")
    else:
        for suffix in ("", ".sha256"):
            shutil.copyfile(f"{existing}{suffix}", out / f"engine.tar.zst{suffix}")
    (out / "data").mkdir()
    for name in FASHION_FILES if fashion else ():
        shutil.copyfile(fashion / name, out / "data" / name)
    if gtest is not None:
        pack_gtest(gtest, out / "gtest.tar.zst", made.cuda if existing is None else bundle.read_manifest(
            out / "engine.tar.zst")["cuda"])

    lenet = memory_nets.load(caffe, "lenet", None, batch=64, test_batch=100)
    for layer in lenet.net.layer:
        if layer.type == "Data":
            layer.data_param.source = f"{DATA_TOKEN}/{'train' if layer.include[0].phase == pb.TRAIN else 'test'}_lmdb"
    for variant, engine in (("cudnn", None), ("caffe", pb.ConvolutionParameter.CAFFE)):
        net = pb.NetParameter()
        net.CopyFrom(lenet.net)
        if engine is not None:
            set_engine(net, engine)
        (out / "nets" / f"lenet_{variant}.prototxt").write_text(str(net))
        (out / "nets" / f"lenet_{variant}_solver.prototxt").write_text(lenet_solver(pb, f"lenet_{variant}.prototxt"))

    for name, batch in TIME_NETS:
        source = memory_nets.load(caffe, name, None, batch=batch, test_batch=batch)
        timed = dummy_data(pb, source.net, batch, source.input_shape, source.num_classes)
        (out / "nets" / f"time_{name}_cudnn.prototxt").write_text(str(timed))
        set_engine(timed, pb.ConvolutionParameter.CAFFE)
        (out / "nets" / f"time_{name}_caffe.prototxt").write_text(str(timed))

    estimates = {}
    for name, batch in MEMORY_NETS:
        if name == "resnet_style":
            net, shape, classes = resnet_style(caffe, batch), (3, 224, 224), 1000
        else:
            source = memory_nets.load(caffe, name, None, batch=batch, test_batch=batch)
            net, shape, classes = source.net, source.input_shape, source.num_classes
        for layer in net.layer:
            if layer.type == "Data":
                layer.data_param.source = f"{DATA_TOKEN}/memory_{name}"
        (out / "nets" / f"memory_{name}_cudnn.prototxt").write_text(str(net))
        e = est.estimate(net, est.Options(mode="gpu", cudnn=True, solver="SGD", input_shape=shape))
        plain = est.estimate(net, est.Options(mode="gpu", cudnn=False, solver="SGD", input_shape=shape))
        set_engine(net, pb.ConvolutionParameter.CAFFE)
        (out / "nets" / f"memory_{name}_caffe.prototxt").write_text(str(net))
        estimates[name] = {"batch": batch, "shape": list(shape), "classes": classes, "estimate": e.total,
                           "estimate_no_cudnn": plain.total, "groups": e.groups, "host_pinned": e.host_pinned}
    (out / "estimates.json").write_text(json.dumps(estimates, indent=1))
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"payload {out}: {size / 2**20:.1f} MiB")


GTEST_HOME = Path("/tmp/gpu-proof")
# The GPU half of Caffe's suite: typed tests over TestDtypesAndDevices run CPUDevice<float>,
# CPUDevice<double>, GPUDevice<float>, GPUDevice<double> as /0 to /3; the cuDNN layer tests; and
# the plain tests with GPU in their names. The CPU half passes on the project's machines.
GPU_TESTS = "*/2.*:*/3.*:CuDNN*:*GPU*"  # where ``run`` installs the engine on the GPU machine


def pack_gtest(build: Path, archive: Path, cuda: dict) -> None:
    """Caffe's own test suite from a CUDA build tree (``make test.testbin``): the binary, the
    ``libcaffe`` it was linked with, and the test data, which the suite reads through the absolute
    source path baked in at configure time. Their RUNPATH points at the engine ``run`` installs."""
    import zstandard

    from caffetool.engine import elf

    source = Path((build / "build" / "CMakeCache.txt").read_text().split("CMAKE_HOME_DIRECTORY:INTERNAL=")[1].split()[0])
    staged = archive.parent / "gtest-staged"
    shutil.rmtree(staged, ignore_errors=True)
    (staged / "bin").mkdir(parents=True)
    shutil.copyfile(build / "build" / "test" / "test.testbin", staged / "bin" / "test.testbin")
    shutil.copyfile(build / "build" / "lib" / "libcaffe.so.1.0.0", staged / "bin" / "libcaffe.so.1.0.0")
    engine = GTEST_HOME / "engine" / "lib"
    runpath = ["$ORIGIN", str(engine / "vendor")] + [str(engine / f) for f in cuda["folders"]]
    for name in ("test.testbin", "libcaffe.so.1.0.0"):
        elf.set_runpath(staged / "bin" / name, runpath)
    shutil.copytree(source / "src" / "caffe" / "test" / "test_data", staged / "src" / "caffe" / "test" / "test_data")
    with open(archive, "wb") as raw, zstandard.ZstdCompressor(level=19).stream_writer(raw) as zst:
        with tarfile.open(fileobj=zst, mode="w|") as tar:
            tar.add(staged / "bin", arcname="bin")
            tar.add(staged / "src", arcname=f"{source.relative_to('/')}/src")
    shutil.rmtree(staged)
    (archive.parent / "gtest.txt").write_text(str(source) + "\n")


def run_gtest(payload: Path, work: Path, out: Path, env: dict) -> dict:
    """Unpack and run Caffe's test suite (CPU and GPU tests) from the source root it was built in."""
    import zstandard

    root = work / "gtest"
    with open(payload / "gtest.tar.zst", "rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as zst:
        with tarfile.open(fileobj=zst, mode="r|") as tar:
            tar.extractall(root)
    source = Path((payload / "gtest.txt").read_text().strip())
    shutil.copytree(root / source.relative_to("/") / "src", source / "src", dirs_exist_ok=True)
    (root / "bin" / "test.testbin").chmod(0o755)
    start = time.perf_counter()
    with open(out / "gtest.log", "w") as log:
        try:
            exit_code: int | str = subprocess.run([str(root / "bin" / "test.testbin"), f"--gtest_filter={GPU_TESTS}"],
                                                  cwd=source, stdout=log, stderr=subprocess.STDOUT, env=env,
                                                  timeout=420).returncode
        except subprocess.TimeoutExpired:
            exit_code = "timed out after 420 s"
    text = (out / "gtest.log").read_text(errors="replace")
    lines = text.splitlines()
    summary = [line for line in lines if line.startswith(("[  PASSED  ]", "[  FAILED  ]", "[==========]"))]
    return {"exit": exit_code, "seconds": round(time.perf_counter() - start, 1), "filter": GPU_TESTS,
            "tests_ok": sum(line.startswith("[       OK ]") for line in lines),
            "tests_failed": sorted({line.split()[3] for line in lines if line.startswith("[  FAILED  ]") and
                                    len(line.split()) > 3 and "." in line.split()[3]}),
            "summary": summary[-40:]}


def set_engine(net, engine: int) -> None:
    """Put every layer that has a cuDNN implementation on ``engine`` (CAFFE: cuDNN off)."""
    for layer in net.layer:
        for field in ("convolution_param", "pooling_param", "relu_param", "sigmoid_param", "tanh_param",
                      "softmax_param", "lrn_param"):
            if layer.type in LAYER_OF_FIELD[field]:
                getattr(layer, field).engine = engine


LAYER_OF_FIELD = {
    "convolution_param": ("Convolution", "Deconvolution"), "pooling_param": ("Pooling",),
    "relu_param": ("ReLU",), "sigmoid_param": ("Sigmoid",), "tanh_param": ("TanH",),
    "softmax_param": ("Softmax", "SoftmaxWithLoss"), "lrn_param": ("LRN",),
}


def lenet_solver(pb, net: str) -> str:
    """BVLC's ``examples/mnist/lenet_solver.prototxt``, on the GPU, without snapshots."""
    s = pb.SolverParameter(net=net, test_interval=500, base_lr=0.01, momentum=0.9, weight_decay=0.0005,
                           lr_policy="inv", gamma=0.0001, power=0.75, display=100, max_iter=10000,
                           snapshot_after_train=False, solver_mode=pb.SolverParameter.GPU)
    s.test_iter.append(100)
    return str(s)


def dummy_data(pb, net, batch: int, shape, classes: int):
    """The TRAIN net with its Data layer replaced by Gaussian DummyData (``caffe time`` input)."""
    timed = pb.NetParameter(name=net.name)
    layer = timed.layer.add(name="data", type="DummyData", top=["data", "label"])
    p = layer.dummy_data_param
    p.shape.add(dim=[batch, *shape])
    p.shape.add(dim=[batch])
    p.data_filler.add(type="gaussian", std=1.0)
    p.data_filler.add(type="uniform", min=0, max=classes - 1)
    for original in net.layer:
        if original.type == "Data" or any(rule.phase == pb.TEST for rule in original.include):
            continue
        timed.layer.add().CopyFrom(original)
    return timed


def resnet_style(caffe, batch: int):
    """A ResNet-style train net (He et al. 2016 block: conv-BatchNorm-Scale-ReLU, identity and
    projection shortcuts summed by Eltwise), fed by a Data layer like the others."""
    L, P = caffe.layers, caffe.params
    pb = caffe.proto.caffe_pb2
    n = caffe.NetSpec()
    n.data, n.label = L.Input(shape=[dict(dim=[batch, 3, 224, 224]), dict(dim=[batch])], ntop=2)

    def cbr(bottom, name, out, k, stride=1, relu=True):
        conv = L.Convolution(bottom, num_output=out, kernel_size=k, stride=stride, pad=k // 2, bias_term=False,
                             weight_filler=dict(type="msra"))
        n[name] = conv
        n[f"bn_{name}"] = L.BatchNorm(conv, in_place=True)
        n[f"scale_{name}"] = L.Scale(conv, bias_term=True, in_place=True)
        if relu:
            n[f"relu_{name}"] = L.ReLU(conv, in_place=True)
        return conv

    x = cbr(n.data, "conv1", 64, 7, stride=2)
    n.pool1 = L.Pooling(x, pool=P.Pooling.MAX, kernel_size=3, stride=2)
    x = n.pool1
    for stage, (width, stride) in enumerate(((64, 1), (128, 2), (256, 2)), start=2):
        for block in range(2):
            s = stride if block == 0 else 1
            name = f"res{stage}{'ab'[block]}"
            branch = cbr(x, f"{name}_branch2a", width, 3, stride=s)
            branch = cbr(branch, f"{name}_branch2b", width, 3, relu=False)
            projection = block == 0 and stage > 2  # width and stride change: a 1x1 projection
            shortcut = cbr(x, f"{name}_branch1", width, 1, stride=s, relu=False) if projection else x
            n[name] = L.Eltwise(shortcut, branch)
            n[f"{name}_relu"] = L.ReLU(n[name], in_place=True)
            x = n[name]
    n.pool5 = L.Pooling(x, pool=P.Pooling.AVE, global_pooling=True)
    n.fc = L.InnerProduct(n.pool5, num_output=1000, weight_filler=dict(type="msra"))
    n.accuracy = L.Accuracy(n.fc, n.label, include=dict(phase=pb.TEST))
    n.loss = L.SoftmaxWithLoss(n.fc, n.label)
    body = n.to_proto()
    net = pb.NetParameter(name="ResNetStyle")
    for phase in (pb.TRAIN, pb.TEST):
        layer = net.layer.add(name="data", type="Data", top=["data", "label"])
        layer.include.add(phase=phase)
        layer.data_param.source = "memory"
        layer.data_param.batch_size = batch
        layer.data_param.backend = pb.DataParameter.LMDB
    net.layer.extend(layer for layer in body.layer if layer.type != "Input")
    return net


# ---------------------------------------------------------------------------------------------
# run (on the GPU machine)


class Step:
    """Records one step's result or its error in ``results``; the proof goes on either way."""

    def __init__(self, results: dict, name: str) -> None:
        self.results, self.name = results, name

    def __enter__(self) -> dict:
        print(f"== {self.name}", flush=True)
        self.start = time.perf_counter()
        return self.results.setdefault(self.name, {})

    def __exit__(self, kind, error, tb) -> bool:
        entry = self.results[self.name]
        entry["step_seconds"] = round(time.perf_counter() - self.start, 2)
        if error is not None:
            entry["error"] = "".join(traceback.format_exception(kind, error, tb))[-2000:]
            print(entry["error"], flush=True)
        return True


class Sampler(threading.Thread):
    """NVML samples of the first GPU: utilisation and used memory, every ``period`` seconds."""

    def __init__(self, period: float) -> None:
        super().__init__(daemon=True)
        import pynvml

        pynvml.nvmlInit()
        self.nvml, self.handle, self.period = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0), period
        self.util: list[int] = []
        self.used: list[int] = []
        self.stop = threading.Event()

    def memory_used(self) -> int:
        return self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used

    def run(self) -> None:
        while not self.stop.is_set():
            self.util.append(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)
            self.used.append(self.memory_used())
            self.stop.wait(self.period)

    def finish(self) -> None:
        self.stop.set()
        self.join()


def run(payload: Path, out: Path, only: str | None = None) -> None:
    from caffetool.engine import bundle
    from caffetool.train import logparse

    out.mkdir(parents=True, exist_ok=True)
    work = Path("/tmp/gpu-proof")
    shutil.rmtree(work, ignore_errors=True)
    (work / "data").mkdir(parents=True)
    results: dict = {"host": os.uname().nodename}
    prefix = work / "engine"
    caffe = prefix / "bin" / "caffe"
    env = {**os.environ, "GLOG_logtostderr": "1"}
    env.pop("LD_LIBRARY_PATH", None)

    with Step(results, "install"):
        start = time.perf_counter()
        done = bundle.install(str(payload / "engine.tar.zst"), prefix, link=False, pip=False)
        results["install"].update(seconds=round(time.perf_counter() - start, 2), notes=done.notes,
                                  version=done.engine.manifest["source"]["version"], cuda_libraries=done.engine.manifest["bundle"]["cuda_libraries"])
    with Step(results, "device_query"):
        q = subprocess.run([str(caffe), "device_query", "-gpu", "0"], capture_output=True, text=True, env=env)
        (out / "device_query.log").write_text(q.stderr)
        results["device_query"].update(exit=q.returncode, lines=[line.split("] ", 1)[-1] for line in q.stderr.splitlines()
                                                                if "] " in line][-24:])
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True)
        results["device_query"]["nvidia_smi"] = smi.stdout.strip()
    if only in (None, "training"):
        with Step(results, "data") as entry:
            entry["seconds"] = convert_data(payload, work, prefix, env)
    nets = work / "nets"
    shutil.copytree(payload / "nets", nets)
    for path in nets.glob("*.prototxt"):
        path.write_text(path.read_text().replace(DATA_TOKEN, str(work / "data")))

    if only == "gtest":
        with Step(results, "caffe_test_suite") as entry:
            entry.update(run_gtest(payload, work, out, env))
    for variant in ("cudnn", "caffe") if only in (None, "training") else ():
        with Step(results, f"lenet_{variant}"):
            sampler = Sampler(0.2)
            sampler.start()
            start = time.perf_counter()
            with open(out / f"lenet_{variant}.log", "w") as log:
                done = subprocess.run([str(caffe), "train", f"-solver=lenet_{variant}_solver.prototxt", "-gpu", "all"],
                                      cwd=nets, stderr=log, stdout=subprocess.DEVNULL, env=env)
            seconds = time.perf_counter() - start
            sampler.finish()
            metrics = logparse.parse_file(out / f"lenet_{variant}.log")
            busy = [u for u in sampler.util if u > 0]
            results[f"lenet_{variant}"].update(
                exit=done.returncode, seconds=round(seconds, 2),
                final_accuracy=metrics.latest("accuracy"), final_loss=metrics.latest("loss"),
                iterations=metrics.iteration, iter_per_s=metrics.iter_per_s, testing_seconds=metrics.testing_seconds,
                fatal=metrics.fatal,
                gpu_util_mean=round(sum(sampler.util) / max(1, len(sampler.util)), 1),
                gpu_util_busy_mean=round(sum(busy) / max(1, len(busy)), 1), samples=len(sampler.util))

    for name, batch in TIME_NETS if only in (None, "training") else ():
        for variant in ("cudnn", "caffe"):
            key = f"time_{name}_{variant}"
            with Step(results, key):
                done = subprocess.run([str(caffe), "time", f"-model=time_{name}_{variant}.prototxt", "-gpu", "0",
                                       "-iterations", "20"], cwd=nets, capture_output=True, text=True, env=env)
                (out / f"{key}.log").write_text(done.stderr)
                results[key].update(exit=done.returncode, batch=batch, **time_figures(done.stderr))

    estimates = json.loads((payload / "estimates.json").read_text()) if only in (None, "memory") else {}
    if only in (None, "memory", "gtest"):
        with Step(results, "memory_baseline"):
            results["memory_baseline"]["used"] = memory_step(caffe, work, "baseline", None, env)
    baseline = results.get("memory_baseline", {}).get("used")
    for name, info in estimates.items():
        make_lmdb(work / "data" / f"memory_{name}", info["batch"] + 2, tuple(info["shape"]), info["classes"])
        for variant in ("cudnn", "caffe"):
            with Step(results, f"memory_{name}_{variant}") as entry:
                used = memory_step(caffe, work, f"{name}_{variant}", nets / f"memory_{name}_{variant}.prototxt", env)
                measured = used - baseline
                estimate = info["estimate" if variant == "cudnn" else "estimate_no_cudnn"]
                entry.update(batch=info["batch"], estimate=estimate, used=used, measured=measured,
                             relative_error=(estimate - measured) / measured)
    for engine in ("CUDNN", "CAFFE") if only in (None, "memory", "gtest") else ():
        for layers in (1, 4, 16):
            with Step(results, f"calibrate_{engine.lower()}_{layers}") as entry:
                entry["used"] = memory_step(caffe, work, f"cal_{engine}_{layers}", None, env,
                                            text=calibration_net(engine, layers))
    if only == "gtest":
        with Step(results, "cudnn_1x1_single_channel") as entry:
            debug = {**env, "CUDNN_LOGLEVEL_DBG": "2", "CUDNN_LOGDEST_DBG": "stderr"}
            entry["used"] = memory_step(caffe, work, "cudnn_1x1", None, debug, text=calibration_net("CUDNN", 1, 1, 1))
    (out / "results.json").write_text(json.dumps(results, indent=1))
    with tarfile.open(out / "logs.tar.gz", "w:gz") as tar:  # one file: the transfer back takes few
        for log in sorted(p for p in out.glob("*.log") if p.name != "run.log"):
            tar.add(log, arcname=log.name)
            log.unlink()
    print(json.dumps(summary(results), indent=1))


def convert_data(payload: Path, work: Path, prefix: Path, env: dict) -> float:
    """Fashion-MNIST's IDX files into LMDB with the bundle's own ``convert_mnist_data``."""
    start = time.perf_counter()
    for split, stem in (("train", "train"), ("test", "t10k")):
        raw = {}
        for kind in ("images-idx3", "labels-idx1"):
            raw[kind] = work / f"{stem}-{kind}-ubyte"
            with gzip.open(payload / "data" / f"{stem}-{kind}-ubyte.gz") as src, open(raw[kind], "wb") as dst:
                shutil.copyfileobj(src, dst)
        subprocess.run([str(prefix / "bin" / "convert_mnist_data"), str(raw["images-idx3"]),
                        str(raw["labels-idx1"]), str(work / "data" / f"{split}_lmdb"), "--backend=lmdb"],
                       check=True, capture_output=True, env=env)
    return round(time.perf_counter() - start, 2)


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


def calibration_net(engine: str, layers: int, channels: int = 8, kernel: int = 3) -> str:
    """A chain of ``layers`` small convolutions on ``engine``: what each layer costs beyond its blobs
    (cuDNN handles and streams, allocation granularity) shows as the slope over ``layers``."""
    text = ('layer { name: "d" type: "DummyData" top: "c0" top: "l" dummy_data_param { shape { dim: 1 '
            f'dim: {channels} dim: 16 dim: 16 }} shape {{ dim: 1 }} data_filler {{ type: "gaussian" }} }} }} ')
    for i in range(1, layers + 1):
        text += (f'layer {{ name: "c{i}" type: "Convolution" bottom: "c{i - 1}" top: "c{i}" convolution_param {{ '
                 f'num_output: {channels} kernel_size: {kernel} pad: {kernel // 2} engine: {engine} '
                 'weight_filler { type: "gaussian" std: 0.1 } } } ')
    return text + (f'layer {{ name: "ip" type: "InnerProduct" bottom: "c{layers}" top: "ip" inner_product_param {{ '
                   'num_output: 2 } } layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "l" top: "loss" }')


def memory_step(caffe: Path, work: Path, name: str, net: Path | None, env: dict, text: str | None = None) -> int:
    """Peak device memory in use while ``caffe train`` builds the solver, tests once and steps once
    (caffetool's ``memory.measure --mode gpu`` mechanism; the baseline is its one-layer net)."""
    from caffetool.memory import gpumeasure

    folder = work / f"mem_{name}"
    folder.mkdir()
    if net is None:
        (folder / "net.prototxt").write_text(text or gpumeasure.BASELINE_NET)
        test = ""
    else:
        shutil.copyfile(net, folder / "net.prototxt")
        test = "test_iter: 1 test_interval: 1000 test_initialization: true "
    (folder / "solver.prototxt").write_text(f'net: "net.prototxt" {test}base_lr: 0.001 lr_policy: "fixed" '
                                            'momentum: 0.9 max_iter: 1 snapshot_after_train: false solver_mode: GPU')
    return gpumeasure.peak_of_one_step(caffe, folder, 0, gpumeasure.nvml(), env)


def make_lmdb(path: Path, records: int, shape: tuple[int, int, int], classes: int) -> None:
    """Random images of ``shape`` as Caffe Datums (caffetool's encoder) in a fresh LMDB."""
    import lmdb
    import numpy as np

    from caffetool.data import datum

    rng = np.random.default_rng(0)
    env = lmdb.open(str(path), map_size=1 << 32, subdir=True)
    with env.begin(write=True) as txn:
        for i in range(records):
            pixels = rng.integers(0, 256, int(np.prod(shape)), dtype=np.uint8).tobytes()
            txn.put(f"{i:08d}".encode(), datum.encode_one(pixels, i % classes, *shape))
    env.close()


def summary(results: dict) -> dict:
    return {key: {k: v for k, v in value.items() if k not in ("lines", "error", "summary")} | (
        {"error": value["error"].strip().splitlines()[-1]} if "error" in value else {})
        for key, value in results.items() if isinstance(value, dict)}


# ---------------------------------------------------------------------------------------------
# report


def report(paths: list[Path]) -> None:
    """Every step of one or more ``results.json`` files (later files add the steps they ran)."""
    r: dict = {}
    for path in paths:
        r.update(json.loads(path.read_text()))
    print(f"device: {r['device_query'].get('nvidia_smi')}; bundle installed in {r['install'].get('seconds')} s")
    for variant in ("cudnn", "caffe"):
        x = r.get(f"lenet_{variant}", {})
        if "seconds" in x:
            print(f"LeNet 10,000 iterations, -gpu all, {variant:5}: {x['seconds']} s ({x['iter_per_s']} iter/s), "
                  f"accuracy {x['final_accuracy']}, GPU utilisation mean {x['gpu_util_mean']}%")
    print(f"published 4 x Tesla M40: {PUBLISHED_M40['seconds']} s, accuracy {PUBLISHED_M40['accuracy']}")
    for name, batch in TIME_NETS:
        for variant in ("cudnn", "caffe"):
            x = r.get(f"time_{name}_{variant}", {})
            if "net_ms" in x:
                print(f"caffe time {name} batch {batch} {variant:5}: forward+backward {x['net_ms']} ms without the "
                      f"data layer ({x['ms'].get('Average Forward-Backward')} ms with it)")
    if "memory_baseline" in r:
        print(f"memory baseline (context, handles): {r['memory_baseline']['used'] / 2**20:,.1f} MiB")
    for name, _ in MEMORY_NETS:
        for variant in ("cudnn", "caffe"):
            x = r.get(f"memory_{name}_{variant}", {})
            if "measured" in x:
                print(f"memory {name} batch {x['batch']} {variant:5}: estimate {x['estimate'] / 2**20:,.1f} MiB, "
                      f"measured {x['measured'] / 2**20:,.1f} MiB, error {100 * x['relative_error']:+.1f}%")
    for engine in ("cudnn", "caffe"):
        grown = [f"{n} layers +{(r[k]['used'] - r['memory_baseline']['used']) / 2**20:,.0f} MiB"
                 for n in (1, 4, 16) if "used" in r.get(k := f"calibrate_{engine}_{n}", {})]
        if grown:
            print(f"tiny 1x1 convolutions on {engine}: {', '.join(grown)} over the baseline")
    for key, x in r.items():
        if isinstance(x, dict) and "error" in x and isinstance(x["error"], str):
            lines = x["error"].strip().splitlines()
            print(f"{key}: failed: {next((l for l in reversed(lines) if l.startswith('RuntimeError')), lines[-1]).strip()[:200]}")
    if "caffe_test_suite" in r:
        x = r["caffe_test_suite"]
        print(f"Caffe's test suite: exit {x.get('exit')} in {x.get('seconds')} s; " + " / ".join(x.get("summary", [])[-3:]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--prefix", required=True, help="the CUDA engine to bundle (engine.compile-check's prefix)")
    p.add_argument("--out", type=Path, default=PROJECT / "build" / "gpu-proof")
    p.add_argument("--fashion", type=Path, default=Path("/usr/share/datasets/fashion-mnist"))
    p.add_argument("--bundle", type=Path, help="an engine bundle made already (else one is made of --prefix)")
    p.add_argument("--no-data", action="store_true", help="leave Fashion-MNIST out (for --only memory or gtest)")
    p.add_argument("--gtest", type=Path, help="a CUDA build tree where `make test.testbin` ran (Caffe's test suite)")
    r = sub.add_parser("run")
    r.add_argument("--payload", type=Path, required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--only", choices=("training", "memory", "gtest"), help="run only these steps (install always runs)")
    t = sub.add_parser("report")
    t.add_argument("results", type=Path, nargs="+")
    args = parser.parse_args()
    if args.step == "prepare":
        prepare(args.prefix, args.out, None if args.no_data else args.fashion, args.bundle, args.gtest)
    elif args.step == "run":
        run(args.payload, args.out, args.only)
    else:
        report(args.results)


if __name__ == "__main__":
    main()
