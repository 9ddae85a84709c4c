"""CPU training speed: the stock Caffe engine, the tuned engine and PyTorch on Caffe's LeNet recipe.

All of them train the same LeNet (BVLC examples/mnist/lenet_train_test.prototxt, batch 64, SGD with
lenet_solver.prototxt's momentum, weight decay and ``inv`` policy, ``random_seed: 1``) on the
Fashion-MNIST training set, on the CPU, alternating stock → tuned → PyTorch for several rounds in
one session. The Caffe nets and databases are caffetool's own (``model.generate`` of the ``lenet``
model, ``data.fetch``); PyTorch runs benchmarks/torch_lenet.py in a benchmark-only virtual
environment (benchmarks/.venv-torch, made on first use: torch is no caffetool dependency).

Speed is iterations/s between the solver's ``Iteration 100`` display line and its last one
(``Iteration N``), read from glog's timestamps, so start-up (loading, LMDB opening, net set-up) is
left out; PyTorch times the same span after 100 warm-up iterations. The whole process's wall time
is shown beside it. No test phase runs and no snapshot is written during training.

The BLAS choice: "tuned" is caffetool's engine on its default BLAS; where a tuned engine on the other
BLAS is installed (``--other PREFIX``, default ~/.cache/caffetool/engine-openblas for an MKL default,
engine-mkl for an OpenBLAS one, made by ``engine.install --blas NAME --prefix PREFIX``), it runs too,
as "tuned+openblas" or "tuned+mkl"; its ratio to "tuned" says which BLAS is faster on this machine.

Threads: ``--threads N`` sets caffetool's thread variables (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS,
MKL_NUM_THREADS) for the tuned engines and ``torch.set_num_threads(N)`` for PyTorch; the stock
engine runs with them removed, i.e. its BLAS's own default (OpenBLAS: one thread per core). Goal:
tuned ≥ PyTorch and tuned ≥ 1.6 x stock (medians). ``--time-layers`` adds ``caffe time`` per layer
for LeNet b64 and CaffeNet b32 (deploy nets with ``force_backward``, so no database is needed) on
every engine.

A busy machine (``--busy``, instead of the comparison above): the tuned engine alone, with GNU
OpenMP's defaults (every placement and wait variable removed) and as caffetool runs it
(:func:`caffetool.engine.cpu_threads.placement`), each on a quiet machine and with one core kept busy
by another process (a Python loop), alternating in each round. Goal: caffetool's at least 2x the
defaults' busy speed and within 5% of their quiet speed (medians).

    .venv/bin/python benchmarks/cpu_speed.py [--stock PREFIX] [--tuned PREFIX] [--other PREFIX]
        [--iters 1000] [--rounds 3] [--threads N] [--json FILE] [--time-layers] [--busy]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from _common import median

from caffetool import config, glog
from caffetool.data import fetch
from caffetool.data.registry import FASHION_MNIST
from caffetool.download import DEFAULT_TIMEOUT
from caffetool.engine import EngineInfo, cpu_threads, import_caffe, locate
from caffetool.engine.locate import caffe_env
from caffetool.engine.recipe import BLAS, blas_name
from caffetool.errors import CaffetoolError, EngineNotFound, RunError, SystemDependencyError
from caffetool.nets import builders, declaration, generate, prototxt, solvers
from caffetool.proc import run_checked
from caffetool.train import caffe_commands

HERE = Path(__file__).resolve().parent
TORCH_SCRIPT = HERE / "torch_lenet.py"
TORCH_VENV = HERE / ".venv-torch"
TORCH_PACKAGES = ("torch==2.13.0", "numpy")
TORCH_READY = ".caffetool-bench-complete"  # written last: a venv without it is half-made
DEFAULT_STOCK = config.cache_home() / "engine-stock"
THREAD_VARIABLES = cpu_threads.VARIABLES
FIRST_TIMED = 100  # the first display line timed; Caffe displays every 100 iterations here
# stock: BVLC Caffe as it runs out of the box; stock+kernels: the same engine with the BLAS kernels
# caffetool picks for this CPU (caffetool.engine.cpu), so the layers' own share of the gain shows.
GOAL = {"tuned/pytorch": 1.0, "tuned/stock": 1.6}
BUSY_GOAL = {"busy caffetool/defaults": 2.0, "quiet caffetool/defaults": 0.95}
HOG = "while True: pass"  # one core kept busy
LAYER_NETS = (("lenet", 64), ("caffenet", 32))
LAYER_ITERATIONS = 20


@dataclass
class Sample:
    side: str
    round: int
    iters_per_s: float
    wall_s: float
    timed_iters: int
    losses: list[tuple[int, float]]  # (iteration, loss) at each display: the three should train alike


# ---- the Caffe side ---------------------------------------------------------------------------

def engine_env(threads: int | None, kernels: bool = True) -> dict[str, str]:
    """caffe_env() with the thread variables set to ``threads``, or removed (the engine's default);
    without ``kernels``, also without caffetool's BLAS kernel choice (OpenBLAS detects its own)."""
    dropped = THREAD_VARIABLES if kernels else (*THREAD_VARIABLES, "OPENBLAS_CORETYPE")
    env = {k: v for k, v in caffe_env().items() if k not in dropped}
    if not kernels and "OPENBLAS_CORETYPE" in os.environ:  # the user's own setting stays
        env["OPENBLAS_CORETYPE"] = os.environ["OPENBLAS_CORETYPE"]
    if threads:
        env.update({name: str(threads) for name in THREAD_VARIABLES})
    return env


def blas_of(engine: EngineInfo) -> str:
    """The BLAS library bin/caffe loads, resolved through Debian's alternatives links."""
    try:
        done = subprocess.run(["ldd", str(engine.caffe)], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    found = re.findall(r"^\s*(\S*(?:blas|mkl)\S*) => (\S+)", done.stdout, re.MULTILINE)
    return ", ".join(f"{name} -> {os.path.realpath(path)}" for name, path in found) or "none linked"


def prepare_lenet(engine: EngineInfo, data_dir: Path, folder: Path, iters: int) -> Path:
    """caffetool's LeNet for Fashion-MNIST, its solver set for a timed run: no tests, no snapshots."""
    dataset = fetch.fetch(FASHION_MNIST, data_dir, progress=False, say=lambda _: None).dataset
    options = solvers.SolverOptions(max_iter=iters, display=FIRST_TIMED, random_seed=1, snapshot=iters + 1,
                                   test_interval=iters + 1, mode="cpu")
    files = generate.generate(engine, declaration.get("lenet"), dataset, folder, options).files
    pb = import_caffe(engine).proto.caffe_pb2
    path = files[generate.SOLVER]
    settings = prototxt.read(path, pb.SolverParameter())
    settings.test_initialization = False
    settings.snapshot_after_train = False
    path.write_text(prototxt.to_text(settings))
    return path


def caffe_rate(log: str) -> tuple[float, int]:
    """(iterations/s, iterations timed) between the ``Iteration 100`` display line and the last one."""
    shown = [(int(m.group(1)), line.time()) for line in glog.lines(log)
             if (m := glog.ITERATION.match(line.message))]
    first = next(((i, t) for i, t in shown if i == FIRST_TIMED), None)
    if first is None or not shown or shown[-1][0] <= FIRST_TIMED or None in (first[1], shown[-1][1]):
        raise RunError(f"caffe train logged no display lines from iteration {FIRST_TIMED} on; "
                       f"give --iters above {FIRST_TIMED}")
    (i0, t0), (i1, t1) = first, shown[-1]
    return (i1 - i0) / (t1 - t0).total_seconds(), i1 - i0


def run_caffe(side: str, round_: int, engine: EngineInfo, solver_file: Path, env: dict[str, str]) -> Sample:
    start = time.perf_counter()
    done = run_checked([engine.caffe, "train", f"-solver={solver_file.name}"], what=f"{side} caffe train",
                       cwd=solver_file.parent, env=env)
    wall = time.perf_counter() - start
    rate, timed = caffe_rate(done.stderr)
    return Sample(side, round_, rate, wall, timed, glog.losses(done.stderr))


# ---- the PyTorch side -------------------------------------------------------------------------

def torch_python(say: Callable[[str], None] = print) -> Path:
    """The benchmark venv's python, making the venv first where it is missing or half-made."""
    python = TORCH_VENV / "bin" / "python"
    if (TORCH_VENV / TORCH_READY).exists():
        return python
    base = shutil.which("python3")
    if base is None:
        raise SystemDependencyError("python3 not found — install Debian's python3 and python3-venv")
    shutil.rmtree(TORCH_VENV, ignore_errors=True)
    say(f"making {TORCH_VENV.relative_to(HERE.parent)} with {' '.join(TORCH_PACKAGES)} (once) ...")
    run_checked([base, "-m", "venv", TORCH_VENV], what="python3 -m venv", error=SystemDependencyError)
    run_checked([python, "-m", "pip", "install", "--quiet", *TORCH_PACKAGES], what="pip install torch",
                error=SystemDependencyError)
    (TORCH_VENV / TORCH_READY).write_text(" ".join(TORCH_PACKAGES) + "\n")
    return python


def run_torch(round_: int, python: Path, images: Path, labels: Path, iters: int, threads: int) -> tuple[Sample, dict]:
    start = time.perf_counter()
    done = run_checked([python, TORCH_SCRIPT, "--images", images, "--labels", labels, "--iters", str(iters),
                        "--threads", str(threads)], what="torch_lenet.py")
    wall = time.perf_counter() - start
    result = json.loads(done.stdout.strip().splitlines()[-1])
    losses = [(int(i), float(loss)) for i, loss in result["losses"]]
    return Sample("pytorch", round_, result["iters_per_s"], wall, result["timed_iters"], losses), result


# ---- caffe time per layer ---------------------------------------------------------------------

@contextlib.contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """os.environ replaced by ``env`` for a while: caffe_commands reads it through caffe_env()."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def time_layers(engines: dict[str, tuple[EngineInfo, dict[str, str]]], folder: Path, iterations: int) -> dict:
    """``caffe time`` per layer of each LAYER_NETS net on each engine, printed side by side."""
    figures: dict[str, dict] = {}
    caffe = import_caffe(next(iter(engines.values()))[0])
    for name, batch in LAYER_NETS:
        m = declaration.get(name)
        net = builders.deploy(caffe, m, builders.shape_of(m), batch=batch)
        net.force_backward = True  # a deploy net has no loss; time its backward pass all the same
        path = folder / f"{name}_b{batch}.prototxt"
        path.write_text(prototxt.to_text(net))
        timed = {}
        for side, (engine, env) in engines.items():
            with environment(env):
                layers, averages = caffe_commands.caffe_time(engine, path, iterations, [])
            timed[side] = ({t.layer: t for t in layers}, averages)
        figures[f"{name}_b{batch}"] = print_layers(name, batch, iterations, timed)
    return figures


def print_layers(name: str, batch: int, iterations: int, timed: dict) -> dict:
    """One table: each engine's forward and backward ms per layer, and each one's speed-up on stock."""
    sides = list(timed)
    print(f"\ncaffe time, {name} batch {batch}, CPU, {iterations} iterations, every engine on caffetool's BLAS "
          "kernels (ms; x = stock / that engine)")
    print(f"{'layer':<12}" + "".join(_cells([f"{d} {side}" for side in sides], None)
                                    for d in ("fwd", "bwd")))
    rows = {}
    for layer in timed["stock"][0]:  # costliest first, by the stock engine's times
        if all(layer in timed[side][0] for side in sides):
            rows[layer] = {f"{d}_ms": [getattr(timed[side][0][layer], f"{d}_ms") for side in sides]
                           for d in ("forward", "backward")}
            print(f"{layer:<12}" + "".join(_cells(ms, ms[0]) for ms in rows[layer].values()))
    for key in ("forward", "backward", "forward-backward"):
        values = [timed[side][1].get(key, 0.0) for side in sides]
        shown = ", ".join(f"{side} {ms:.2f} ms" + (f" (x{_ratio(values[0], ms)})" if i else "")
                          for i, (side, ms) in enumerate(zip(sides, values)))
        print(f"average {key}: {shown}")
    return {"sides": sides, "layers": rows, "average_ms": {side: timed[side][1] for side in sides}}


def _cells(values: list, stock_ms: float | None) -> str:
    """Right-aligned cells, a speed-up on stock after each but the first (``stock_ms`` None: titles)."""
    out = ""
    for i, value in enumerate(values):
        out += f" {value:>14}" if stock_ms is None else f" {value:>14.3f}"
        if i:
            out += f" {'x' if stock_ms is None else _ratio(stock_ms, value):>5}"
    return out


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b > 0 else "-"


# ---- a busy machine ---------------------------------------------------------------------------

@contextlib.contextmanager
def busy_core(busy: bool) -> Iterator[None]:
    """One core kept busy by another process for a while (nothing when not ``busy``)."""
    hog = subprocess.Popen([sys.executable, "-c", HOG]) if busy else None
    try:
        yield
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()


def run_busy(args: argparse.Namespace) -> dict:
    """The tuned engine on GNU OpenMP's defaults and on caffetool's placement, quiet and busy."""
    engine = locate(args.tuned, probe=False)
    plain = {k: v for k, v in engine_env(args.threads).items() if k not in cpu_threads.USER_PLACEMENT}
    envs = {"defaults": plain, "caffetool": {**plain, **cpu_threads.placement(plain)}}
    print(f"tuned {engine.prefix}; caffetool's placement here: {cpu_threads.placement(plain) or 'none'}")
    samples: list[Sample] = []
    with tempfile.TemporaryDirectory(prefix="caffetool-cpu-busy-") as tmp:
        solver_file = prepare_lenet(engine, Path(tmp) / "data", Path(tmp) / "lenet", args.iters)
        for i in range(1, args.rounds + 1):
            print(f"\nround {i}\n{'side':<20} {'it/s':>8} {'wall s':>8} {'timed iters':>12} {'loss (iter)':>14}",
                  flush=True)
            for load in ("quiet", "busy"):
                with busy_core(load == "busy"):
                    for name, env in envs.items():
                        samples.append(run_caffe(f"{load} {name}", i, engine, solver_file, env))
                        _print(samples[-1], 20)
    rate = {side: median([s.iters_per_s for s in samples if s.side == side]) for side in dict.fromkeys(s.side for s in samples)}
    wall = {side: median([s.wall_s for s in samples if s.side == side]) for side in rate}
    ratios = {f"{load} caffetool/defaults": rate[f"{load} caffetool"] / rate[f"{load} defaults"] for load in ("busy", "quiet")}
    met = all(ratios[k] >= v for k, v in BUSY_GOAL.items())
    print(f"\nLeNet b64 on Fashion-MNIST, CPU, {args.iters} iterations, {args.rounds} rounds, {os.cpu_count()} cores, "
          f"{args.threads} threads; busy: one core kept busy by another process")
    print(f"{'side':<20} {'median it/s':>12} {'median wall s':>14}")
    for side in rate:
        print(f"{side:<20} {rate[side]:>12.1f} {wall[side]:>14.2f}")
    for key, value in ratios.items():
        print(f"{key:<26} {value:.3f} (goal >= {BUSY_GOAL[key]:g})")
    print(f"goal: {'met' if met else 'NOT met'}")
    return {"settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "placement": cpu_threads.placement(plain),
            "samples": [asdict(s) for s in samples], "median_iters_per_s": rate, "median_wall_s": wall,
            "ratios": ratios, "goal": BUSY_GOAL, "goal_met": met}


# ---- the run ----------------------------------------------------------------------------------

def summarise(samples: list[Sample], args: argparse.Namespace, notes: dict) -> dict:
    sides = list(dict.fromkeys(s.side for s in samples))  # in the order they ran
    other = next((side for side in sides if side.startswith("tuned+")), None)
    rate = {side: median([s.iters_per_s for s in samples if s.side == side]) for side in sides}
    wall = {side: median([s.wall_s for s in samples if s.side == side]) for side in sides}
    ratios = {"tuned/stock": rate["tuned"] / rate["stock"],
              "tuned/stock+kernels": rate["tuned"] / rate["stock+kernels"],
              "tuned/pytorch": rate["tuned"] / rate["pytorch"]}
    if other:
        ratios.update({f"{other}/tuned": rate[other] / rate["tuned"], f"{other}/pytorch": rate[other] / rate["pytorch"]})
    met = all(ratios[k] >= v for k, v in GOAL.items())
    drift = {side: loss_drift(samples, side) for side in sides if side.startswith("tuned")}
    print(f"\nLeNet b64 on Fashion-MNIST, CPU, {args.iters} iterations, {args.rounds} alternating rounds, "
          f"{os.cpu_count()} cores")
    print(f"threads: stock {notes['stock_threads']}; tuned engines and pytorch {args.threads}")
    print(f"{'side':<14} {'median it/s':>12} {'median wall s':>14}")
    for side in sides:
        print(f"{side:<14} {rate[side]:>12.1f} {wall[side]:>14.2f}")
    for key, value in ratios.items():
        goal = f" (goal >= {GOAL[key]:g})" if key in GOAL else ""
        print(f"{key:<20} {value:.3f}{goal}")
    print(f"goal (tuned >= pytorch and tuned >= {GOAL['tuned/stock']:g} x stock): {'met' if met else 'NOT met'}")
    if other:
        faster = notes["tuned_blas_name"] if rate["tuned"] >= rate[other] else other.split("+", 1)[1]
        print(f"faster BLAS here: {faster} (caffetool's default: {notes['tuned_blas_name']})")
    for side, d in drift.items():
        print(f"loss curves, largest |{side} - stock| at a display: {d['largest']:.4f} at iteration {d['at']}, "
              f"first display {d['first']:.5f}")
    return {"median_iters_per_s": rate, "median_wall_s": wall, "ratios": ratios, "goal": GOAL, "goal_met": met,
            "loss_drift": drift}


def loss_drift(samples: list[Sample], side: str) -> dict:
    """How far a tuned engine's displayed losses stray from the stock engine's (round 1, same seed)."""
    stock = dict(next(s.losses for s in samples if s.side == "stock"))
    tuned = dict(next(s.losses for s in samples if s.side == side))
    gaps = {i: abs(tuned[i] - stock[i]) for i in sorted(stock.keys() & tuned.keys())}
    at = max(gaps, key=gaps.get) if gaps else 0
    first = gaps[min(gaps)] if gaps else 0.0
    return {"largest": gaps.get(at, 0.0), "at": at, "first": first, "gaps": gaps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stock", default=str(DEFAULT_STOCK), help="prefix of the stock engine")
    parser.add_argument("--tuned", default=None, help="prefix of the tuned engine (default: caffetool's engine)")
    parser.add_argument("--other", default=None,
                        help="prefix of a tuned engine on the other BLAS (default: ~/.cache/caffetool/engine-NAME; "
                             "left out where none is installed)")
    parser.add_argument("--iters", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    parser.add_argument("--time-layers", action="store_true", help="also `caffe time` LeNet b64 and CaffeNet b32")
    parser.add_argument("--layer-iterations", type=int, default=LAYER_ITERATIONS)
    parser.add_argument("--busy", action="store_true", help="the busy-machine case instead (tuned engine only)")
    args = parser.parse_args()
    if args.iters <= FIRST_TIMED or args.rounds < 1 or args.threads < 1:
        parser.error(f"--iters must be above {FIRST_TIMED}, --rounds and --threads at least 1")
    try:
        figures = run_busy(args) if args.busy else run(args)
    except CaffetoolError as e:
        print(f"Error: {e}", file=sys.stderr)
        sys.exit(2)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
        print(f"figures -> {args.json}")


def run(args: argparse.Namespace) -> dict:
    engines = {"stock": locate(args.stock, probe=False), "stock+kernels": locate(args.stock, probe=False),
               "tuned": locate(args.tuned, probe=False)}
    other = next(name for name in BLAS if name != blas_name(engines["tuned"].manifest.get("options", {})))
    other_prefix = args.other or str(config.cache_home() / f"engine-{other}")
    try:
        engines[f"tuned+{other}"] = locate(other_prefix, probe=False)
    except EngineNotFound:
        print(f"no engine at {other_prefix}: the {other} side is left out (`caffetool engine.install --blas {other} "
              f"--prefix {other_prefix}` makes it)")
    envs = {"stock": engine_env(None, kernels=False), "stock+kernels": engine_env(None),
            "tuned": engine_env(args.threads), f"tuned+{other}": engine_env(args.threads)}
    notes = {"stock_threads": f"{'/'.join(THREAD_VARIABLES)} unset (BLAS default)", "cores": os.cpu_count()}
    for side, engine in engines.items():
        notes[f"{side}_prefix"], notes[f"{side}_blas"] = str(engine.prefix), blas_of(engine)
        if side != "stock+kernels":
            print(f"{side:<10} {engine.prefix} (BLAS: {notes[f'{side}_blas']})")
    tuned = engines["tuned"]
    notes["tuned_blas_name"] = blas_name(tuned.manifest.get("options", {}))
    python = torch_python()
    samples: list[Sample] = []
    extra: dict = {}
    with tempfile.TemporaryDirectory(prefix="caffetool-cpu-speed-") as tmp:
        folder = Path(tmp)
        files = fetch.obtain(FASHION_MNIST, None, DEFAULT_TIMEOUT, False, lambda _: None)
        solver_file = prepare_lenet(tuned, folder / "data", folder / "lenet", args.iters)
        for i in range(1, args.rounds + 1):
            print(f"\nround {i}\n{'side':<14} {'it/s':>8} {'wall s':>8} {'timed iters':>12} {'loss (iter)':>14}",
                  flush=True)
            for side, engine in engines.items():
                samples.append(run_caffe(side, i, engine, solver_file, envs[side]))
                _print(samples[-1])
            sample, extra["pytorch"] = run_torch(i, python, files["train-images"]["path"],
                                                 files["train-labels"]["path"], args.iters, args.threads)
            samples.append(sample)
            _print(samples[-1])
        figures = {"settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                   "notes": notes, "samples": [asdict(s) for s in samples],
                   "summary": summarise(samples, args, notes),
                   "pytorch": {k: extra["pytorch"][k] for k in ("torch", "threads")}}
        if args.time_layers:
            # per layer, both on caffetool's BLAS kernels (caffe_commands runs caffe under caffe_env()):
            # what the layers themselves gain
            timed = {side: (engine, envs["stock+kernels" if side == "stock" else side])
                     for side, engine in engines.items() if side != "stock+kernels"}
            figures["time_layers"] = time_layers(timed, folder, args.layer_iterations)
    return figures


def _print(s: Sample, width: int = 14) -> None:
    at, loss = s.losses[-1] if s.losses else (0, float("nan"))
    print(f"{s.side:<{width}} {s.iters_per_s:>8.1f} {s.wall_s:>8.2f} {s.timed_iters:>12} {f'{loss:.3f} ({at})':>14}",
          flush=True)


if __name__ == "__main__":
    main()
