"""What MLflow tracking costs a training: the same LeNet run by `caffetool train` with tracking on and off.

Both train Caffe's LeNet recipe on Fashion-MNIST for N iterations (default 10,000; tests every
500) on the CPU, alternating on and off (and which goes first), several rounds, in one session.
On logs to a SQLite store in the runs folder, as `caffetool train` does by default; the store is
made before the first timed run (the tables of a new database cost a one-off few seconds, printed
apart). The wall time is the whole command's, the end's wait for the store included. Target: median
on / median off - 1 < 1%. On a machine whose two cores Caffe keeps busy, run-to-run noise in wall time
is larger than that (up to 15% here), so the CPU time of the caffetool process itself (Caffe's own
excluded: the parsing, the records and, with tracking on, MLflow) is reported too: what tracking
adds there is what it takes from the training, whatever the noise.

    .venv/bin/python benchmarks/tracking_cost.py [--iters 10000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from _common import median

from caffetool import track
from caffetool.data import fetch
from caffetool.data.registry import FASHION_MNIST
from caffetool.track.store import Store

CAFFETOOL = Path(sys.executable).parent / "caffetool"


def train(runs: Path, data_dir: Path, name: str, iterations: int, tracking: str) -> tuple[float, float]:
    """Wall seconds of one `caffetool train` with ``--tracking-uri tracking``, and the CPU seconds of
    the caffetool process itself (its children's, Caffe's, left out), read until it exits."""
    argv = [str(CAFFETOOL), "train", "--max-iter", str(iterations), "--name", name, "--runs-dir", str(runs),
            "--data-dir", str(data_dir), "--tracking-uri", tracking]
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVOKE_")}
    start = time.perf_counter()
    child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    watched, cpu = psutil.Process(child.pid), 0.0
    while child.poll() is None:
        try:
            times = watched.cpu_times()
            cpu = times.user + times.system
        except psutil.Error:
            pass
        time.sleep(0.05)
    if child.returncode:
        raise SystemExit(f"{' '.join(argv)} failed ({child.returncode})")
    return time.perf_counter() - start, cpu


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
        walls: dict[str, list[float]] = {"on": [], "off": []}
        cpus: dict[str, list[float]] = {"on": [], "off": []}
        for i in range(args.rounds):
            for mode in (("off", "on") if i % 2 == 0 else ("on", "off")):
                seconds, cpu = train(runs, data_dir, f"{mode}{i}", args.iters, store if mode == "on" else track.OFF)
                walls[mode].append(seconds)
                cpus[mode].append(cpu)
                print(f"round {i + 1}: tracking {mode:<3} {seconds:7.2f} s (caffetool's own CPU {cpu:.2f} s)", flush=True)
        a, b = median(walls["on"]), median(walls["off"])
        extra = median(cpus["on"]) - median(cpus["off"])
        cores = os.cpu_count() or 1
        print(f"LeNet, {args.iters} iterations, {args.rounds} alternating rounds, {cores} cores")
        print(f"tracking off  median {b:.2f} s, caffetool's own CPU {median(cpus['off']):.2f} s")
        print(f"tracking on   median {a:.2f} s, caffetool's own CPU {median(cpus['on']):.2f} s")
        print(f"cost in wall time {100 * (a / b - 1):+.2f}% ({a - b:+.2f} s; target < 1%)")
        print(f"cost in CPU: {extra:+.2f} s, {100 * extra / (b * cores):+.2f}% of the {cores} cores over the run")


if __name__ == "__main__":
    main()
