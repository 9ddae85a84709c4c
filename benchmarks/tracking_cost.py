"""What MLflow tracking costs a training: the same LeNet run by `caffetool train` with tracking on and off.

Both train Caffe's LeNet recipe on Fashion-MNIST for N iterations (default 10,000; tests every
500) on the CPU, alternating on and off (and which goes first), several rounds, in one session.
On logs to a SQLite store in the runs folder, as `caffetool train` does by default; the store is
made before the first timed run (the tables of a new database cost a one-off few seconds, printed
apart). The wall time is the whole command's, the end's wait for the store included. Target: median
on / median off - 1 < 1%.

    .venv/bin/python benchmarks/tracking_cost.py [--iters 10000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from _common import median, timed

from caffetool import track
from caffetool.data import fetch
from caffetool.data.registry import FASHION_MNIST
from caffetool.track.store import Store

CAFFETOOL = Path(sys.executable).parent / "caffetool"


def train(runs: Path, data_dir: Path, name: str, iterations: int, tracking: str) -> float:
    """Wall seconds of one `caffetool train` with ``--tracking-uri tracking``."""
    argv = [str(CAFFETOOL), "train", "--max-iter", str(iterations), "--name", name, "--runs-dir", str(runs),
            "--data-dir", str(data_dir), "--tracking-uri", tracking]
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVOKE_")}
    return timed(argv, env).seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=10_000, help="training iterations per run (default 10,000)")
    parser.add_argument("--rounds", type=int, default=3, help="pairs of runs, on and off (default 3)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="caffetool-tracking-") as tmp:
        tmp_path = Path(tmp)
        data_dir = tmp_path / "data"
        fetch.fetch(FASHION_MNIST, data_dir, progress=False, say=lambda _: None)
        runs = tmp_path / "runs"
        store = track.default_uri(runs)
        start = time.perf_counter()
        Store(track.TrackingTarget(store))  # the tables of the new database, made once
        print(f"new store {store}: {time.perf_counter() - start:.2f} s to create (once per runs folder)", flush=True)
        on, off = [], []
        for i in range(args.rounds):
            for mode in (("off", "on") if i % 2 == 0 else ("on", "off")):
                seconds = train(runs, data_dir, f"{mode}{i}", args.iters, store if mode == "on" else track.OFF)
                (on if mode == "on" else off).append(seconds)
                print(f"round {i + 1}: tracking {mode:<3} {seconds:7.2f} s", flush=True)
        a, b = median(on), median(off)
        print(f"LeNet, {args.iters} iterations, {args.rounds} alternating rounds, {os.cpu_count()} cores")
        print(f"tracking off  median {b:.2f} s")
        print(f"tracking on   median {a:.2f} s")
        print(f"cost {100 * (a / b - 1):+.2f}% ({a - b:+.2f} s; target < 1%)")


if __name__ == "__main__":
    main()
