"""Exported models' speed: onnxruntime, OpenCV 5's dnn and PyTorch against pycaffe, on the same nets,
weights and inputs.

Each net gets seeded weights (:mod:`published_nets`: He-scaled Gaussians for convolutions and inner
products, Scale near 1, BatchNorm statistics those of its own input on one seeded batch, with scale
factor 1), saved with ``net.save`` in a temporary folder and exported twice into one folder with
``caffetool.export``: to ONNX (dynamic batch) and to PyTorch (``--to pytorch``), each export
verifying itself against Caffe on 4 drawn images and writing nothing otherwise. The nets: BVLC's
LeNet, CaffeNet and GoogLeNet deploy nets as the engine ships them, and ResNet-50 in the layout of
Kaiming He's published ``ResNet-50-deploy.prototxt`` at 224x224 (built by :mod:`published_nets`).

The sides: ``pycaffe`` (copying the batch into the input blob and ``net.forward()``, the blob and
the net reshaped once before warm-up); ``onnxruntime`` (a pass of the model
``caffetool.backends.onnxrt.model_of`` makes: CPU provider, full graph optimisations); ``opencv``
(OpenCV's ``cv2.dnn.readNetFromONNX`` of the same ONNX file, ``setInput`` and ``forward``: the reader
OpenCV 5 keeps; skipped with a note on OpenCV 4, whose ONNX importer is not what a user of it runs);
``pytorch`` (the exported ``model.py`` imported, ``load()`` in eval mode, called under
``torch.inference_mode()`` on a tensor sharing the batch's memory).

For each net and batch size (1 and 64), one input batch (seeded N(0, 1)) goes to every side. After
warm-up passes on each side, the sides take turns, the order rotated every round: a turn is one
untimed pass (``--settle``) and then ``--block`` timed passes (each net's own by default,
:data:`NETS`). Turns rather than single passes because a side's first pass after another's turn is
slow on this VM whichever side it is (its threads have gone to sleep; LeNet b64, measured: pycaffe
3.5 ms back to back, 13.9 ms after a 0.1 s pause, 13.7 ms alternating pass by pass);
``--block 1 --settle 0`` is the pass-by-pass alternation. Figures are medians of the timed passes;
each ratio is that side's images/s over pycaffe's (above 1: faster than pycaffe). The outputs of
each side's last pass are compared with pycaffe's as well. "others" is the CPU time other programs
took while a row was timed (/proc/stat's busy ticks less this process's own times: tick-sampled, so
a few % either side of 0 on a quiet machine), to tell a noisy row.

Threads: every core this process may use, for each side at its own default — Caffe's OpenMP and MKL
threads through caffetool's thread variables (:func:`caffetool.engine.cpu_threads.apply`), waiting
at barriers as caffetool's server has them wait (:func:`caffetool.engine.cpu_threads.for_serving`:
``GOMP_SPINCOUNT=3000``; at GNU OpenMP's default spin, pycaffe's LeNet at batch 1 took 15.9 ms a pass
here against 0.84 ms, its idle thread spinning on the core the Python loop needs; PyTorch's own copy
of GNU OpenMP reads the same variable),
onnxruntime's intra-op pool (one thread per physical core), OpenCV's pool (``cv2.getNumThreads()``),
PyTorch's intra-op pool (``torch.get_num_threads()``). No thread placement is set in this process
(see :mod:`caffetool.engine.cpu_threads`).

    .venv/bin/python benchmarks/export_speed.py [--nets lenet,caffenet,googlenet,resnet50]
        [--sides pycaffe,onnxruntime,opencv,pytorch] [--repeats N] [--warmup N] [--block N] [--settle N]
        [--json FILE]
"""

from __future__ import annotations

import argparse
import importlib.util
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

import cv2
import numpy as np
import onnx
import onnxruntime
from _common import median

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks.published_nets, run as a script
from benchmarks import published_nets  # noqa: E402

from caffetool import __version__, fsio  # noqa: E402
from caffetool.engine import EngineInfo, cpu_threads, import_caffe, locate  # noqa: E402
from caffetool.errors import CaffetoolError  # noqa: E402
from caffetool.backends import onnxrt  # noqa: E402
from caffetool.export import exporter  # noqa: E402
from caffetool.serving.classifier import ModelFiles  # noqa: E402

HERE = Path(__file__).resolve().parent
RECORDS = HERE / "export"
SEED = 0
BATCHES = (1, 64)
VERIFY_IMAGES = 4
SIDES = ("pycaffe", "onnxruntime", "opencv", "pytorch")


@dataclass(frozen=True)
class BenchNet:
    name: str  # as published_nets names it
    follows: str
    # batch -> (timed passes per side, timed passes per turn), chosen so the default run fits ~10 min on 2 cores
    plan: dict[int, tuple[int, int]]


NETS: tuple[BenchNet, ...] = (
    BenchNet("lenet", "BVLC examples/mnist/lenet.prototxt, 1x28x28", {1: (1000, 100), 64: (200, 20)}),
    BenchNet("caffenet", "BVLC models/bvlc_reference_caffenet/deploy.prototxt, 3x227x227", {1: (60, 10), 64: (15, 5)}),
    BenchNet("googlenet", "BVLC models/bvlc_googlenet/deploy.prototxt, 3x224x224", {1: (40, 10), 64: (8, 2)}),
    BenchNet("resnet50", "ResNet-50-deploy.prototxt's layout (K. He), built here, 3x224x224", {1: (30, 10), 64: (6, 2)}),
)


@dataclass
class Exports:
    deploy: Path
    weights: Path
    onnx: Path
    pytorch: Path
    figures: dict


def exported(engine: EngineInfo, caffe: Any, spec: BenchNet, folder: Path, sides: tuple[str, ...]) -> Exports:
    """``spec`` in ``folder``: seeded weights, then its ONNX and PyTorch exports side by side (each
    only where a side runs it)."""
    folder.mkdir(parents=True)
    deploy = published_nets.deploy_file(spec.name, caffe, engine.prefix / "share" / "caffe", folder)
    weights = published_nets.seeded_weights(caffe, deploy, folder / f"{spec.name}.caffemodel", SEED)
    files = ModelFiles(deploy, weights, labels=folder / "no-labels.txt")
    figures, models = {}, {}
    for to, suffix, wanted in (("onnx", ".onnx", {"onnxruntime", "opencv"}), ("pytorch", ".py", {"pytorch"})):
        models[to] = folder / f"{spec.name}{suffix}"
        if not wanted & set(sides):
            continue
        started = time.perf_counter()
        result = exporter.export(engine, exporter.ExportRequest(files, models[to], images=VERIFY_IMAGES, to=to),
                                 say=lambda _: None)
        size = sum(f.stat().st_size for f in exporter.written_files(result.model))
        figures[to] = {"seconds": round(time.perf_counter() - started, 2),
                       "verification": result.verification.summary(),
                       "max_rel_error": max(f.rel for f in result.verification.layers), "mib": round(size / 2**20, 1)}
    return Exports(deploy, weights, models["onnx"], models["pytorch"], figures)


# ---- the sides --------------------------------------------------------------------------------

def pycaffe_side(caffe: Any, e: Exports, x: np.ndarray) -> Callable[[], np.ndarray]:
    net = caffe.Net(str(e.deploy), str(e.weights), caffe.TEST)
    name = net.inputs[0]
    net.blobs[name].reshape(*x.shape)
    net.reshape()
    out = net.outputs[-1]

    def step() -> np.ndarray:
        net.blobs[name].data[...] = x
        return net.forward()[out]
    return step


def onnxruntime_side(e: Exports, x: np.ndarray) -> Callable[[], np.ndarray]:
    model = onnxrt.model_of(e.onnx)
    feeds, last = {model.inputs[0]: x}, model.outputs[-1]
    return lambda: model(feeds)[last]


def opencv_side(e: Exports, x: np.ndarray) -> Callable[[], np.ndarray]:
    net = cv2.dnn.readNetFromONNX(str(e.onnx))

    def step() -> np.ndarray:
        net.setInput(x)
        return net.forward()
    return step


def pytorch_side(e: Exports, x: np.ndarray) -> Callable[[], np.ndarray]:
    import torch  # noqa: PLC0415 - only where this side runs

    spec = importlib.util.spec_from_file_location(f"exported_{e.pytorch.stem}", e.pytorch)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.load()
    tensor = torch.from_numpy(x)

    def step() -> np.ndarray:
        with torch.inference_mode():
            return model(tensor).numpy()
    return step


# ---- timing -----------------------------------------------------------------------------------

@dataclass
class Timing:
    net: str
    batch: int
    warmup: int
    block: int
    settle: int
    ms: dict[str, list[float]] = field(default_factory=dict)  # side -> timed passes
    max_abs_output_diff: dict[str, float] = field(default_factory=dict)  # side -> against pycaffe's output
    others_cpu_s: float = 0.0  # CPU time other programs took while this row was timed
    wall_s: float = 0.0

    def summary(self) -> dict:
        medians = {side: median(times) for side, times in self.ms.items()}
        caffe_ms = medians["pycaffe"]
        return {side: {"ms": ms, "images_per_s": self.batch * 1000 / ms, "over_pycaffe": caffe_ms / ms}
                for side, ms in medians.items()}


def timed_ms(step: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = step()
    return (time.perf_counter() - start) * 1000, out


def time_sides(caffe: Any, e: Exports, spec: BenchNet, sides: tuple[str, ...], batch: int, repeats: int,
               warmup: int, block: int, settle: int) -> Timing:
    """Every side on one batch: warm-up on each, then turns of ``settle`` untimed and ``block`` timed
    passes, the order rotated every round, until each side has ``repeats`` timed passes."""
    net = caffe.Net(str(e.deploy), caffe.TEST)
    x = np.random.default_rng(SEED).standard_normal((batch, *net.blobs[net.inputs[0]].data.shape[1:]),
                                                    dtype=np.float32)
    del net
    makers = {"pycaffe": lambda: pycaffe_side(caffe, e, x), "onnxruntime": lambda: onnxruntime_side(e, x),
              "opencv": lambda: opencv_side(e, x), "pytorch": lambda: pytorch_side(e, x)}
    steps = {side: makers[side]() for side in sides}
    for _ in range(warmup):
        for step in steps.values():
            step()
    timing = Timing(spec.name, batch, warmup, block, settle, {side: [] for side in sides})
    last: dict[str, np.ndarray] = {}
    others, started = others_cpu_s(), time.perf_counter()
    for turn in range((repeats + block - 1) // block):
        count = min(block, repeats - turn * block)
        for side in sides[turn % len(sides):] + sides[:turn % len(sides)]:
            for _ in range(settle):
                steps[side]()
            for _ in range(count):
                ms, last[side] = timed_ms(steps[side])
                timing.ms[side].append(ms)
    timing.others_cpu_s = round(others_cpu_s() - others, 2)
    timing.wall_s = round(time.perf_counter() - started, 2)
    reference = np.asarray(last["pycaffe"])
    timing.max_abs_output_diff = {side: float(np.abs(np.asarray(out).reshape(reference.shape) - reference).max())
                                  for side, out in last.items() if side != "pycaffe"}
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
    found = {"onnxruntime": onnxruntime.__version__, "onnx": onnx.__version__, "opencv": cv2.__version__,
             "numpy": np.__version__, "caffetool": __version__, "engine": manifest.get("source", {}).get("version"),
             "engine_blas": manifest.get("options", {}).get("blas"), "mkl": manifest.get("mkl", {}).get("version"),
             "engine_built_at": manifest.get("built_at"), "python": platform.python_version()}
    try:
        import torch  # noqa: PLC0415

        found["torch"] = torch.__version__
    except ImportError:
        found["torch"] = None
    return found


def thread_counts(sides: tuple[str, ...]) -> dict[str, int | str]:
    counts: dict[str, int | str] = {"pycaffe": int(os.environ["OMP_NUM_THREADS"]),
                                    "onnxruntime": f"default ({physical_cores()} physical cores)",
                                    "opencv": cv2.getNumThreads()}
    if "pytorch" in sides:
        import torch  # noqa: PLC0415

        counts["pytorch"] = torch.get_num_threads()
    return {side: counts[side] for side in sides}


def print_table(timings: list[Timing], sides: tuple[str, ...], cores: int) -> None:
    others = [s for s in sides if s != "pycaffe"]
    print(f"\n{'net':<10} {'batch':>5} {'passes':>6} " + " ".join(f"{s + ' ms':>15}" for s in sides) + " "
          + " ".join(f"{s + '/pycaffe':>20}" for s in others) + f" {'max |diff|':>10} {'others':>7}")
    for t in timings:
        s = t.summary()
        busy = 100 * t.others_cpu_s / (t.wall_s * cores) if t.wall_s else 0.0
        diff = max(t.max_abs_output_diff.values(), default=0.0)
        print(f"{t.net:<10} {t.batch:>5} {len(t.ms['pycaffe']):>6} "
              + " ".join(f"{s[side]['ms']:>15.2f}" for side in sides) + " "
              + " ".join(f"{s[side]['over_pycaffe']:>20.2f}" for side in others) + f" {diff:>10.2e} {busy:>6.1f}%")


def run(args: argparse.Namespace, specs: list[BenchNet], sides: tuple[str, ...]) -> dict:
    threads = cpu_threads.apply(None)  # every core this process may use; before libcaffe loads
    wait = cpu_threads.for_serving()  # pycaffe as caffetool's server runs it: short passes, shorter spins
    engine = locate(probe=False)
    caffe = import_caffe(engine)
    caffe.set_mode_cpu()
    notes = {"cores": os.cpu_count(), "available_cores": cpu_threads.available(), "physical_cores": physical_cores(),
             "cpu": cpu_model(), "caffe_threads": {n: os.environ[n] for n in cpu_threads.VARIABLES},
             "threads": thread_counts(sides), "openmp_wait": wait, "engine_prefix": str(engine.prefix),
             "load_average_before": os.getloadavg()}
    vers = versions(engine)
    print(f"{notes['cpu']}, {notes['cores']} cores ({notes['physical_cores']} physical); pycaffe on {threads} "
          f"OpenMP/MKL threads; threads per side: {notes['threads']}")
    print(f"engine {vers['engine']} ({vers['engine_blas']} {vers['mkl']}), built {vers['engine_built_at']}; "
          f"onnxruntime {vers['onnxruntime']}, OpenCV {vers['opencv']}, torch {vers['torch']}; load average "
          f"{notes['load_average_before'][0]:.2f} at the start")
    timings: list[Timing] = []
    exports: dict[str, dict] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="caffetool-export-speed-") as tmp:
        for spec in specs:
            e = exported(engine, caffe, spec, Path(tmp) / spec.name, sides)
            exports[spec.name] = e.figures
            print(f"\n{spec.name}: {spec.follows}; " + "; ".join(
                f"{to} export in {f['seconds']:.1f} s ({f['mib']} MiB): {f['verification']}, layers within "
                f"{f['max_rel_error']:.2g}" for to, f in e.figures.items()), flush=True)
            for batch in BATCHES:
                repeats, block = spec.plan[batch]
                repeats = args.repeats or repeats
                block = min(args.block or block, repeats)
                warmup = args.warmup if args.warmup is not None else max(2, repeats // 10)
                t = time_sides(caffe, e, spec, sides, batch, repeats, warmup, block, args.settle)
                timings.append(t)
                s = t.summary()
                print(f"  batch {batch:>2}: {repeats} passes each after {warmup} warm-up, in turns of "
                      f"{args.settle} + {block}; " + ", ".join(
                          f"{side} {s[side]['ms']:.2f} ms ({s[side]['over_pycaffe']:.2f}x)" for side in sides),
                      flush=True)
    wall = time.perf_counter() - started
    print_table(timings, sides, notes["available_cores"])
    print(f"median latency per pass (ms); SIDE/pycaffe = that side's images/s over pycaffe's; max |diff| = largest "
          f"difference of a side's last output from pycaffe's; others = CPU other programs took while a row was "
          f"timed, % of all cores; {wall:.0f} s in all")
    return {"settings": {"nets": [s.name for s in specs], "sides": list(sides), "batches": list(BATCHES),
                         "repeats": args.repeats, "warmup": args.warmup, "block": args.block, "settle": args.settle,
                         "seed": SEED, "verify_images": VERIFY_IMAGES},
            "date": date.today().isoformat(), "notes": notes, "versions": vers, "exports": exports,
            "timings": [{**asdict(t), "summary": t.summary()} for t in timings], "wall_s": round(wall, 1)}


def chosen_sides(text: str, parser: argparse.ArgumentParser, known: tuple[str, ...] = SIDES) -> tuple[str, ...]:
    """The sides ``--sides`` names, less those this machine cannot run (said as they are left out)."""
    sides = tuple(s.strip() for s in text.split(",") if s.strip())
    if "pycaffe" not in sides or any(s not in known for s in sides):
        parser.error(f"--sides takes pycaffe and any of {', '.join(known[1:])}")
    if "opencv" in sides and int(cv2.__version__.split(".")[0]) < 5:
        print(f"OpenCV {cv2.__version__} here: the opencv side (OpenCV 5's ONNX reader) is left out")
        sides = tuple(s for s in sides if s != "opencv")
    if "pytorch" in sides and importlib.util.find_spec("torch") is None:
        print("torch is not installed: the pytorch side is left out (pip install 'caffetool[pytorch]')")
        sides = tuple(s for s in sides if s != "pytorch")
    return sides


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nets", default=",".join(n.name for n in NETS),
                        help=f"comma-separated, of {', '.join(n.name for n in NETS)}")
    parser.add_argument("--sides", default=",".join(SIDES), help=f"comma-separated, pycaffe and any of "
                                                                  f"{', '.join(SIDES[1:])}")
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
    sides = chosen_sides(args.sides, parser)
    try:
        figures = run(args, [known[n] for n in names], sides)
        fsio.write_atomic(args.json, json.dumps(figures, indent=2) + "\n", CaffetoolError)
    except CaffetoolError as e:
        print(f"Error: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"figures -> {args.json}")


if __name__ == "__main__":
    main()
