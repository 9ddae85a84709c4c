"""ONNX export speed: onnxruntime against pycaffe forward, on the same nets, weights and inputs.

Each net gets random weights (seeded: He-scaled Gaussians for convolutions and inner products,
Scale near 1, BatchNorm statistics those of its own input on one seeded batch, so positive
variances, with scale factor 1), saved with ``net.save`` in a temporary folder and exported with
``caffetool.export`` (dynamic batch; the export verifies itself against Caffe on 4 drawn images
and writes nothing otherwise). The nets:
BVLC's LeNet, CaffeNet and GoogLeNet deploy nets as the engine ships them, and a ResNet-50 deploy
net built here (:func:`resnet50_deploy`) in the layout of Kaiming He's published
``ResNet-50-deploy.prototxt`` at 224x224.

For each net and batch size (1 and 64), one input batch (seeded N(0, 1)) goes to both sides. After
warm-up passes on each side, the sides take turns, the one going first swapped every round: a turn
is one untimed pass (``--settle``) and then ``--block`` timed passes (each net's own by default,
:data:`NETS`). Turns rather than single passes because a side's first pass after the other's turn
is slow on this VM whichever side it is (its threads have gone to sleep; LeNet b64, measured:
pycaffe 3.5 ms back to back, 13.9 ms after a 0.1 s pause, 13.7 ms alternating pass by pass);
``--block 1 --settle 0`` is the pass-by-pass alternation. A pycaffe pass is copying the batch into
the input blob and ``net.forward()`` (the blob and the net reshaped once, before warm-up); an
onnxruntime pass is ``sess.run`` on the session ``caffetool.export.runtime.session_of`` makes (CPU
provider, full graph optimisations). Figures are medians of the timed passes; the ratio is
onnxruntime's images/s over pycaffe's (above 1: onnxruntime is faster). The outputs of the two
sides' last passes are compared as well. "others" is the CPU time other programs took while a row
was timed (/proc/stat's busy ticks less this process's own times: tick-sampled, so a few % either
side of 0 on a quiet machine), to tell a noisy row.

Threads: every core this process may run on for both — Caffe's OpenMP and MKL threads through
caffetool's thread variables (:func:`caffetool.engine.cpu_threads.apply`), onnxruntime's intra-op
pool at its default (one thread per physical core). No thread placement is set in this process
(see :mod:`caffetool.engine.cpu_threads`).

    .venv/bin/python benchmarks/export_speed.py [--nets lenet,caffenet,googlenet,resnet50]
        [--repeats N] [--warmup N] [--block N] [--settle N] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
from _common import median
from memory_nets import bottleneck, conv_bn  # ResNet-50's units, as the memory benchmark builds them

from caffetool import __version__, fsio
from caffetool.engine import EngineInfo, cpu_threads, import_caffe, locate
from caffetool.errors import CaffetoolError
from caffetool.export import exporter, runtime
from caffetool.serving.classifier import ModelFiles

HERE = Path(__file__).resolve().parent
RECORDS = HERE / "export"
SEED = 0
BATCHES = (1, 64)
VERIFY_IMAGES = 4


@dataclass(frozen=True)
class BenchNet:
    name: str
    follows: str
    deploy: Callable[[Any, Path, Path], Path]  # (caffe, engine's share/caffe, folder) -> deploy prototxt
    # batch -> (timed passes per side, timed passes per turn), chosen so the default run fits ~10 min on 2 cores
    plan: dict[int, tuple[int, int]]


def shipped(relative: str) -> Callable[[Any, Path, Path], Path]:
    return lambda caffe, share, folder: share / relative


# ---- ResNet-50 --------------------------------------------------------------------------------

def resnet50_deploy(caffe: Any, size: int = 224, classes: int = 1000, blocks: tuple[int, ...] = (3, 4, 6, 3)) -> Any:
    """ResNet-50 as KaimingHe/deep-residual-networks ``prototxt/ResNet-50-deploy.prototxt`` lays it out:
    conv1 7x7/2 + BatchNorm + Scale + ReLU, max pool 3x3/2, stages of 3, 4, 6, 3 bottleneck blocks
    (the first of each projects its shortcut, stride 2 from res3a on), global average pool 7x7,
    fc1000, Softmax; a ``NetParameter`` with one Input layer ``data`` of 1x3xSIZExSIZE."""
    L, n = caffe.layers, caffe.NetSpec()
    n.data = L.Input(input_param={"shape": {"dim": [1, 3, size, size]}})
    x = conv_bn(caffe, n, "conv1", "_conv1", n.data, 64, 7, 2, 3, True)
    n.pool1 = L.Pooling(x, pooling_param={"pool": caffe.params.Pooling.MAX, "kernel_size": 3, "stride": 2})
    x = n.pool1
    for stage, count in enumerate(blocks):
        for i in range(count):
            x = bottleneck(caffe, n, x, f"{stage + 2}{chr(ord('a') + i)}", 64 * 2 ** stage,
                            2 if (i == 0 and stage > 0) else 1, i == 0)
    n.pool5 = L.Pooling(x, pooling_param={"pool": caffe.params.Pooling.AVE, "kernel_size": size // 32, "stride": 1})
    n.fc1000 = L.InnerProduct(n.pool5, inner_product_param={"num_output": classes})
    n.prob = L.Softmax(n.fc1000)
    return n.to_proto()


def resnet50_file(caffe: Any, share: Path, folder: Path) -> Path:
    path = folder / "ResNet-50-deploy.prototxt"
    path.write_text(str(resnet50_deploy(caffe)))
    return path


NETS: tuple[BenchNet, ...] = (
    BenchNet("lenet", "BVLC examples/mnist/lenet.prototxt, 1x28x28",
             shipped("examples/mnist/lenet.prototxt"), {1: (1000, 100), 64: (200, 20)}),
    BenchNet("caffenet", "BVLC models/bvlc_reference_caffenet/deploy.prototxt, 3x227x227",
             shipped("models/bvlc_reference_caffenet/deploy.prototxt"), {1: (60, 10), 64: (15, 5)}),
    BenchNet("googlenet", "BVLC models/bvlc_googlenet/deploy.prototxt, 3x224x224",
             shipped("models/bvlc_googlenet/deploy.prototxt"), {1: (40, 10), 64: (8, 2)}),
    BenchNet("resnet50", "ResNet-50-deploy.prototxt's layout (K. He), built here, 3x224x224",
             resnet50_file, {1: (30, 10), 64: (6, 2)}),
)


# ---- weights and export -----------------------------------------------------------------------

def randomise(net: Any, rng: np.random.Generator) -> None:
    """Seeded weights that keep activations finite and BatchNorm well defined."""
    for name, blobs in net.params.items():
        kind = net.layer_dict[name].type
        if kind == "BatchNorm":
            mean, variance, factor = (b.data for b in blobs)
            mean[...] = rng.normal(0.0, 0.1, mean.shape)
            variance[...] = rng.uniform(0.5, 1.5, variance.shape)
            factor[...] = 1.0
        elif kind == "Scale":
            blobs[0].data[...] = rng.uniform(0.8, 1.2, blobs[0].data.shape)
            for b in blobs[1:]:
                b.data[...] = rng.normal(0.0, 0.1, b.data.shape)
        else:
            weights = blobs[0].data
            fan_in = int(np.prod(weights.shape[1:])) or 1
            weights[...] = rng.normal(0.0, np.sqrt(2.0 / fan_in), weights.shape)
            for b in blobs[1:]:
                b.data[...] = rng.normal(0.0, 0.01, b.data.shape)


def calibrate_batchnorm(net: Any, rng: np.random.Generator) -> None:
    """Each BatchNorm's statistics from its own input on one seeded batch, as a trained net's match its
    data: random statistics do not normalise, and ResNet's shortcuts then grow its scores to ~1e4."""
    names = list(net._layer_names)
    bn = [i for i, layer in enumerate(net.layers) if layer.type == "BatchNorm"]
    if not bn:
        return
    data = net.blobs[net.inputs[0]].data
    data[...] = rng.standard_normal(data.shape)
    start = names[0]
    for i in bn:
        if i > 0:
            net.forward(start=start, end=names[i - 1])
        x = net.blobs[net.bottom_names[names[i]][0]].data
        mean, variance, factor = (b.data for b in net.params[names[i]])
        mean[...] = x.mean(axis=(0, *range(2, x.ndim)))
        variance[...] = x.var(axis=(0, *range(2, x.ndim))) + 1e-3
        factor[...] = 1.0
        start = names[i]


def exported(engine: EngineInfo, caffe: Any, spec: BenchNet, folder: Path) -> tuple[Path, Path, Path, dict]:
    """(deploy, weights, model, export figures) of ``spec`` in ``folder``: random weights, then the export."""
    folder.mkdir(parents=True)
    deploy = spec.deploy(caffe, engine.prefix / "share" / "caffe", folder)
    net = caffe.Net(str(deploy), caffe.TEST)
    rng = np.random.default_rng(SEED)
    randomise(net, rng)
    calibrate_batchnorm(net, rng)
    weights = folder / f"{spec.name}.caffemodel"
    net.save(str(weights))
    request = exporter.ExportRequest(ModelFiles(deploy, weights, labels=folder / "no-labels.txt"),
                                     out=folder / "model.onnx", images=VERIFY_IMAGES)
    started = time.perf_counter()
    result = exporter.export(engine, request, say=lambda _: None)
    figures = {"seconds": round(time.perf_counter() - started, 2), "verification": result.verification.summary(),
               "model_mib": round(result.model.stat().st_size / 2**20, 1)}
    return deploy, weights, result.model, figures


# ---- timing -----------------------------------------------------------------------------------

@dataclass
class Timing:
    net: str
    batch: int
    warmup: int
    block: int
    settle: int
    pycaffe_ms: list[float] = field(default_factory=list)
    ort_ms: list[float] = field(default_factory=list)
    max_abs_output_diff: float = 0.0
    others_cpu_s: float = 0.0  # CPU time other programs took while this pair was timed
    wall_s: float = 0.0

    def summary(self) -> dict:
        caffe_ms, ort_ms = median(self.pycaffe_ms), median(self.ort_ms)
        return {"pycaffe_ms": caffe_ms, "ort_ms": ort_ms, "pycaffe_images_per_s": self.batch * 1000 / caffe_ms,
                "ort_images_per_s": self.batch * 1000 / ort_ms, "ort/pycaffe": caffe_ms / ort_ms}


def timed_ms(step: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = step()
    return (time.perf_counter() - start) * 1000, out


def time_pair(caffe: Any, deploy: Path, weights: Path, model: Path, spec: BenchNet, batch: int, repeats: int,
              warmup: int, block: int, settle: int) -> Timing:
    """Both sides on one batch: warm-up on each, then turns of ``settle`` untimed and ``block`` timed
    passes, alternating, until each side has ``repeats`` timed passes."""
    net = caffe.Net(str(deploy), str(weights), caffe.TEST)
    name = net.inputs[0]
    shape = (batch, *net.blobs[name].data.shape[1:])
    net.blobs[name].reshape(*shape)
    net.reshape()
    sess = runtime.session_of(model)
    ort_input = sess.get_inputs()[0].name
    x = np.random.default_rng(SEED).standard_normal(shape, dtype=np.float32)

    def pycaffe() -> dict[str, np.ndarray]:
        net.blobs[name].data[...] = x
        return net.forward()

    def ort() -> list[np.ndarray]:
        return sess.run(None, {ort_input: x})

    for _ in range(warmup):
        pycaffe()
        ort()
    timing = Timing(spec.name, batch, warmup, block, settle)
    sides = {"pycaffe": (pycaffe, timing.pycaffe_ms), "ort": (ort, timing.ort_ms)}
    last: dict[str, Any] = {}
    others, started = others_cpu_s(), time.perf_counter()
    for turn in range((repeats + block - 1) // block):
        count = min(block, repeats - turn * block)
        for side in (("pycaffe", "ort") if turn % 2 == 0 else ("ort", "pycaffe")):
            step, times = sides[side]
            for _ in range(settle):
                step()
            for _ in range(count):
                ms, last[side] = timed_ms(step)
                times.append(ms)
    timing.others_cpu_s = round(others_cpu_s() - others, 2)
    timing.wall_s = round(time.perf_counter() - started, 2)
    names = [o.name for o in sess.get_outputs()]
    timing.max_abs_output_diff = max(float(np.abs(last["pycaffe"][n] - o).max()) for n, o in zip(names, last["ort"]))
    return timing


# ---- the run ----------------------------------------------------------------------------------

def physical_cores() -> int:
    """Distinct (package, core) pairs among the CPUs this process may use: onnxruntime's default pool size."""
    cores = set()
    for cpu in os.sched_getaffinity(0):
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            cores.add(((topology / "physical_package_id").read_text(), (topology / "core_id").read_text()))
        except OSError:
            cores.add(("?", str(cpu)))
    return len(cores)


def others_cpu_s() -> float:
    """CPU seconds the whole machine has been busy, less this process's and its children's: read twice,
    what other programs took from the 2 cores in between (a noisy row shows here)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    busy = sum(fields) - fields[3] - fields[4]  # less idle and iowait
    t = os.times()
    return busy / os.sysconf("SC_CLK_TCK") - (t.user + t.system + t.children_user + t.children_system)


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def versions(engine: EngineInfo) -> dict:
    manifest = engine.manifest
    return {"onnxruntime": onnxruntime.__version__, "onnx": onnx.__version__, "numpy": np.__version__,
            "caffetool": __version__, "engine": manifest.get("source", {}).get("version"),
            "engine_blas": manifest.get("options", {}).get("blas"), "mkl": manifest.get("mkl", {}).get("version"),
            "engine_built_at": manifest.get("built_at"), "python": platform.python_version()}


def print_table(timings: list[Timing], cores: int) -> None:
    print(f"\n{'net':<10} {'batch':>5} {'passes':>6} {'pycaffe ms':>11} {'ort ms':>9} {'pycaffe img/s':>14} "
          f"{'ort img/s':>10} {'ort/pycaffe':>12} {'max |diff|':>11} {'others':>7}")
    for t in timings:
        s = t.summary()
        others = 100 * t.others_cpu_s / (t.wall_s * cores) if t.wall_s else 0.0
        print(f"{t.net:<10} {t.batch:>5} {len(t.ort_ms):>6} {s['pycaffe_ms']:>11.2f} {s['ort_ms']:>9.2f} "
              f"{s['pycaffe_images_per_s']:>14.1f} {s['ort_images_per_s']:>10.1f} {s['ort/pycaffe']:>12.2f} "
              f"{t.max_abs_output_diff:>11.2e} {others:>6.1f}%")


def run(args: argparse.Namespace, specs: list[BenchNet]) -> dict:
    threads = cpu_threads.apply(None)  # every core this process may use; before libcaffe loads
    engine = locate(probe=False)
    caffe = import_caffe(engine)
    caffe.set_mode_cpu()
    notes = {"cores": os.cpu_count(), "available_cores": cpu_threads.available(), "physical_cores": physical_cores(),
             "cpu": cpu_model(), "caffe_threads": {n: os.environ[n] for n in cpu_threads.VARIABLES},
             "ort_intra_op_threads": "onnxruntime's default (0: one per physical core)",
             "engine_prefix": str(engine.prefix), "load_average_before": os.getloadavg()}
    vers = versions(engine)
    print(f"{notes['cpu']}, {notes['cores']} cores ({notes['physical_cores']} physical); pycaffe on {threads} "
          f"OpenMP/MKL threads ({', '.join(f'{k}={v}' for k, v in notes['caffe_threads'].items())}); onnxruntime "
          f"{vers['onnxruntime']} CPU provider, intra-op threads at its default: {notes['physical_cores']}")
    print(f"engine {vers['engine']} ({vers['engine_blas']} {vers['mkl']}), built {vers['engine_built_at']}; "
          f"load average {notes['load_average_before'][0]:.2f} at the start")
    timings: list[Timing] = []
    exports: dict[str, dict] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="caffetool-export-speed-") as tmp:
        for spec in specs:
            deploy, weights, model, exports[spec.name] = exported(engine, caffe, spec, Path(tmp) / spec.name)
            print(f"\n{spec.name}: {spec.follows}; exported in {exports[spec.name]['seconds']:.1f} s "
                  f"({exports[spec.name]['model_mib']} MiB): {exports[spec.name]['verification']}", flush=True)
            for batch in BATCHES:
                repeats, block = spec.plan[batch]
                repeats = args.repeats or repeats
                block = min(args.block or block, repeats)
                warmup = args.warmup if args.warmup is not None else max(2, repeats // 10)
                t = time_pair(caffe, deploy, weights, model, spec, batch, repeats, warmup, block, args.settle)
                timings.append(t)
                s = t.summary()
                print(f"  batch {batch:>2}: {repeats} passes each after {warmup} warm-up, in turns of "
                      f"{args.settle} + {block}; pycaffe "
                      f"{s['pycaffe_ms']:.2f} ms, onnxruntime {s['ort_ms']:.2f} ms, ort/pycaffe "
                      f"{s['ort/pycaffe']:.2f}", flush=True)
    wall = time.perf_counter() - started
    print_table(timings, notes["available_cores"])
    print(f"median latency per pass (ms) and images/s; ort/pycaffe = onnxruntime images/s over pycaffe's; "
          f"max |diff| = largest difference of the last passes' outputs; others = CPU other programs took "
          f"while a row was timed, % of all cores; {wall:.0f} s in all")
    return {"settings": {"nets": [s.name for s in specs], "batches": list(BATCHES), "repeats": args.repeats,
                         "warmup": args.warmup, "block": args.block, "settle": args.settle, "seed": SEED,
                         "verify_images": VERIFY_IMAGES},
            "date": date.today().isoformat(), "notes": notes, "versions": vers, "exports": exports,
            "timings": [{**asdict(t), "summary": t.summary()} for t in timings], "wall_s": round(wall, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nets", default=",".join(n.name for n in NETS),
                        help=f"comma-separated, of {', '.join(n.name for n in NETS)}")
    parser.add_argument("--repeats", type=int, help="timed passes per side for every net and batch "
                                                    "(default: each net's own, see NETS)")
    parser.add_argument("--warmup", type=int, help="warm-up passes per side (default: max(2, passes / 10))")
    parser.add_argument("--block", type=int, help="timed passes per turn (default: each net's own, see NETS)")
    parser.add_argument("--settle", type=int, default=1, help="untimed passes opening each turn")
    parser.add_argument("--json", type=Path, default=RECORDS / f"speed-{date.today().isoformat()}.json",
                        help="record file (default: benchmarks/export/speed-DATE.json)")
    args = parser.parse_args()
    known = {n.name: n for n in NETS}
    names = [n.strip() for n in args.nets.split(",") if n.strip()]
    if not names or any(n not in known for n in names):
        parser.error(f"--nets takes names among {', '.join(known)}")
    if any(v is not None and v < 1 for v in (args.repeats, args.block)) or min(args.warmup or 0, args.settle) < 0:
        parser.error("--repeats and --block must be at least 1, --warmup and --settle at least 0")
    try:
        figures = run(args, [known[n] for n in names])
        fsio.write_atomic(args.json, json.dumps(figures, indent=2) + "\n", CaffetoolError)
    except CaffetoolError as e:
        print(f"Error: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"figures -> {args.json}")


if __name__ == "__main__":
    main()
