"""LeNet's training time on one GPU, engine against engine in one call, with PyTorch as the anchor.

The ``training`` group opens with six runs of BVLC's LeNet recipe (10,000 iterations on
Fashion-MNIST, ``caffe train -gpu all``): the payload's baseline engine, the engine under test with
its CUDA graphs turned off, and with them on (its default), twice each and interleaved (A B C A B
C), so that a drift of the machine over the call touches every engine alike. The ``torch`` group
trains the same net on the same data with ``benchmarks/torch_lenet.py``, eager and replayed as a
CUDA graph. The ``training`` group also times VGG-16 (batch 64, cuDNN, default settings) with
``caffe time`` on the baseline and on the engine under test, interleaved the same way, for the
target that its forward and backward passes are no slower than today's. Runs on the GPU machine.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from gpuproof import waits
from gpuproof.nets import TIME_NETS
from gpuproof.payload import WAITS, WORK
from gpuproof.proof import Proof, caffe_time, fashion_data, train

SOLVER = "lenet_cudnn_solver.prototxt"
NO_GRAPHS = ("--no-cuda-graphs",)  # the engine's switch back to one launch per kernel
# (step name, which engine, flags): one round; the group runs ROUNDS of them.
ENGINES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("lenet_baseline", "baseline", ()),
    ("lenet_nographs", "tested", NO_GRAPHS),
    ("lenet_graphs", "tested", ()),
)
ROUNDS = 2
TORCH_LENET = Path(__file__).resolve().parents[1] / "torch_lenet.py"
ITERATIONS = 10000


def engines(proof: Proof) -> None:
    """The six LeNet runs; the baseline's are skipped (and say so) when the payload has no baseline."""
    fashion_data(proof)
    for round_ in range(1, ROUNDS + 1):
        for name, engine, flags in ENGINES:
            key = f"{name}_{round_}"
            if engine == "baseline" and not proof.baseline.exists():
                proof.results[key] = {"skipped": "no baseline engine in the payload (prepare --baseline)"}
                continue
            train(proof, key, SOLVER, {}, 40, caffe=proof.baseline if engine == "baseline" else None, flags=flags)


WAITS_SOLVER = "lenet_all_cudnn_solver.prototxt"  # 2,000 iterations, no tests, a display every 100
WAITS_ITERATIONS = 2000


def host_waits(proof: Proof) -> None:
    """LeNet without tests on each engine under ``hostwaits.c``: the host's waits per iteration."""
    library = proof.payload / WAITS
    for name, engine, flags in ENGINES:
        key = f"waits_{name.removeprefix('lenet_')}"
        if engine == "baseline" and not proof.baseline.exists():
            proof.results[key] = {"skipped": "no baseline engine in the payload (prepare --baseline)"}
            continue
        counts = proof.log(f"{key}_counts")
        entry = train(proof, key, WAITS_SOLVER, {"LD_PRELOAD": str(library), waits.VARIABLE: str(counts)}, 20,
                      caffe=proof.baseline if engine == "baseline" else None, flags=flags)
        if counts.exists():
            entry.update(waits.read(counts.read_text(), WAITS_ITERATIONS))
            (proof.out / "results.json").write_text(json.dumps(proof.results, indent=1))


PASSES = ("Average Forward pass", "Average Backward pass", "Average Forward-Backward")


def vgg16_time(proof: Proof) -> None:
    """``caffe time`` of the ``time`` group's VGG-16 on cuDNN with the default settings (its
    ``time_vgg16_cudnn``), on the baseline and on the engine under test in turn, twice each; then
    ``vgg16_versus``: each pass's median on each engine and the ratio tested/baseline (at most 1
    meets the target). Skipped, and says so, when the payload has no baseline."""
    if not proof.baseline.exists():
        proof.results["vgg16_versus"] = {"skipped": "no baseline engine in the payload (prepare --baseline)"}
        return
    batch = dict(TIME_NETS)["vgg16"]
    keys: dict[str, list[str]] = {"baseline": [], "tested": []}
    for round_ in range(1, ROUNDS + 1):
        for engine in keys:  # interleaved: a drift of the card touches both engines alike
            key = f"vgg16_time_{engine}_{round_}"
            keys[engine].append(key)

            def fill(entry: dict, key: str = key, engine: str = engine) -> None:
                entry.update(batch=batch, **caffe_time(proof, key, "vgg16", "cudnn", {},
                                                       caffe=proof.baseline if engine == "baseline" else None))
            proof.do(key, fill, 20)  # about 8 s on an H200 (the time group's time_vgg16_cudnn)
    proof.do("vgg16_versus", lambda entry: entry.update(
        medians_ratio({engine: [proof.results[key].get("ms", {}) for key in names] for engine, names in keys.items()})))


def medians_ratio(runs: dict[str, list[dict[str, float]]]) -> dict:
    """Per pass, the median milliseconds per iteration of each engine's runs (``time_figures``'
    ``ms``) and tested/baseline; a pass some run did not report is left out."""
    medians: dict[str, dict[str, float]] = {}
    for engine, figures in runs.items():
        medians[engine] = {label: statistics.median(f[label] for f in figures)
                           for label in PASSES if figures and all(label in f for f in figures)}
    ratio = {label: round(medians["tested"][label] / medians["baseline"][label], 4)
             for label in PASSES if label in medians["tested"] and medians["baseline"].get(label)}
    return {"median_ms": medians, "ratio_tested_to_baseline": ratio}


def torch_anchor(proof: Proof) -> None:
    """``torch_lenet.py --device cuda``, eager and with ``--cuda-graphs``, on the IDX files the data
    step unpacked (the ones the Caffe runs' LMDBs were made from), with this Python's PyTorch."""
    fashion_data(proof)
    for name, flags in (("torch_eager", []), ("torch_graphs", ["--cuda-graphs"])):
        def fill(entry: dict, name: str = name, flags: list[str] = flags) -> None:
            entry.update(torch_run(proof, name, flags))
        proof.do(name, fill, 60)


def torch_run(proof: Proof, name: str, flags: list[str]) -> dict:
    args = [sys.executable, str(TORCH_LENET), "--device", "cuda", "--iters", str(ITERATIONS),
            "--images", str(WORK / "train-images-idx3-ubyte"), "--labels", str(WORK / "train-labels-idx1-ubyte"),
            "--test-images", str(WORK / "t10k-images-idx3-ubyte"), "--test-labels", str(WORK / "t10k-labels-idx1-ubyte"),
            *flags]
    start = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True, env=proof.env, timeout=max(10.0, proof.left() - 5))
    wall = round(time.perf_counter() - start, 2)
    proof.log(name).write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        return {"exit": done.returncode, "seconds": wall, "tail": done.stderr.splitlines()[-12:]}
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    figures.pop("losses", None)
    return {"exit": 0, "seconds": wall, **figures}
