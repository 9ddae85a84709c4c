"""caffetool's training overhead: the same LeNet solver run by bare `caffe train` and by `invoke train`.

Both train Caffe's LeNet recipe on Fashion-MNIST for 2,000 iterations (tests every 500) on the
CPU, alternating, several rounds, in one session. Bare is what a user types after generating the
files: `caffe train -solver solver.prototxt 2> log`. Ours is the whole `invoke train` command:
set-up, validation, live parsing and progress, sampling, metrics, plots and manifest. Target:
median ours / median bare ≤ 1.03.

    .venv/bin/python benchmarks/train_overhead.py [--rounds 3] [--iterations 2000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import median

from caffetool.data import fetch
from caffetool.data.registry import FASHION_MNIST
from caffetool.engine import locate
from caffetool.engine.locate import caffe_env
from caffetool.nets import declaration, generate, solvers

PROJECT = Path(__file__).resolve().parents[1]


def bare(engine, folder: Path) -> float:
    start = time.perf_counter()
    with open(folder / "caffe.log", "w") as log:
        subprocess.run([str(engine.caffe), "train", "-solver=solver.prototxt"], cwd=folder, stderr=log,
                       stdout=subprocess.DEVNULL, env=caffe_env(), check=True)
    return time.perf_counter() - start


def ours(runs: Path, data_dir: Path, name: str, iterations: int) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "invoke", "train", "--max-iter", str(iterations), "--name", name,
                    "--runs-dir", str(runs), "--data-dir", str(data_dir)], cwd=PROJECT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=2000)
    args = parser.parse_args()
    engine = locate(probe=False)
    with tempfile.TemporaryDirectory(prefix="caffetool-overhead-") as tmp:
        tmp_path = Path(tmp)
        data_dir = tmp_path / "data"
        dataset = fetch.fetch(FASHION_MNIST, data_dir, progress=False, say=lambda _: None).dataset
        t_bare, t_ours = [], []
        for i in range(args.rounds):
            folder = tmp_path / f"bare{i}"
            generate.generate(engine, declaration.get("lenet"), dataset, folder,
                              solvers.SolverOptions(max_iter=args.iterations))
            t_bare.append(bare(engine, folder))
            t_ours.append(ours(tmp_path / "runs", data_dir, f"r{i}", args.iterations))
            print(f"round {i + 1}: bare {t_bare[-1]:.2f} s, invoke train {t_ours[-1]:.2f} s", flush=True)
            shutil.rmtree(folder)
    b, o = median(t_bare), median(t_ours)
    print(f"LeNet, {args.iterations} iterations, {args.rounds} alternating rounds, {os.cpu_count()} cores")
    print(f"bare caffe train  median {b:.2f} s")
    print(f"invoke train      median {o:.2f} s")
    print(f"overhead {100 * (o / b - 1):+.1f}% (ratio {o / b:.3f}; target <= 1.03)")


if __name__ == "__main__":
    main()
