"""Sweep throughput: the same 4 LeNet trials run one after another (2 threads each) and as a sweep
on Ray Tune (2 trials at once, 1 thread each), on the CPU.

Sequential is four `caffetool train` commands with ``OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=2``, one
after the other; the sweep is one `caffetool sweep --param base_lr=...` command with
``--cpus-per-trial 1`` (FIFO: no trial stopped early, so both do the same work). Both train the LeNet
recipe on Fashion-MNIST for ``--iterations`` each, with its tests. Reported: trials per hour of each,
and Ray's overhead, the sweep's wall time minus the trials' own (each trial's run records its own
wall time, set-up to final test; with 2 at once, their sum over 2 is what the sweep would take with
nothing around them), split into Ray's start, its shutdown, and what is left inside Tune (placing
trials, starting actors, reporting). Target: overhead under 5% of the sweep's wall time for
1,000-iteration trials.

    .venv/bin/python benchmarks/sweep_throughput.py [--iterations 1000] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import median

from caffetool.data import fetch
from caffetool.data.registry import FASHION_MNIST

CAFFETOOL = Path(sys.executable).parent / "caffetool"
RATES = ("0.001", "0.005", "0.01", "0.02")
CONCURRENT = 2


def sequential(runs: Path, data_dir: Path, iterations: int, tag: str) -> tuple[float, list[float]]:
    env = {**os.environ, "OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2"}
    start = time.perf_counter()
    for i, rate in enumerate(RATES):
        subprocess.run([str(CAFFETOOL), "train", "--max-iter", str(iterations), "--base-lr", rate, "--name",
                        f"{tag}-{i}", "--gpu", "cpu", "--runs-dir", str(runs), "--data-dir", str(data_dir)],
                       env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    return wall, [_own(runs / f"{tag}-{i}") for i in range(len(RATES))]


def sweep(runs: Path, data_dir: Path, iterations: int, tag: str) -> tuple[float, list[float], dict]:
    start = time.perf_counter()
    subprocess.run([str(CAFFETOOL), "sweep", "--name", tag, "--param", f"base_lr={','.join(RATES)}", "--max-iter",
                    str(iterations), "--cpus-per-trial", "1", "--max-concurrent", str(CONCURRENT), "--runs-dir",
                    str(runs), "--data-dir", str(data_dir)], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    record = json.loads((runs / tag / "sweep.json").read_text())
    own = [_own(runs / tag / row["trial"]) for row in record["results"]]
    assert all(row["status"] == "finished" for row in record["results"]), record["results"]
    return wall, own, record["timings_s"]


def _own(run_dir: Path) -> float:
    return float(json.loads((run_dir / "manifest.json").read_text())["timings_s"]["total"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="caffetool-sweep-bench-") as tmp:
        tmp_path = Path(tmp)
        data_dir = tmp_path / "data"
        fetch.fetch(FASHION_MNIST, data_dir, progress=False, say=lambda _: None)
        seq_walls, sweep_walls, overheads, shares, parts = [], [], [], [], []
        for r in range(args.rounds):
            s_wall, s_own = sequential(tmp_path / "runs", data_dir, args.iterations, f"seq{r}")
            w_wall, w_own, timings = sweep(tmp_path / "runs", data_dir, args.iterations, f"sweep{r}")
            overhead = w_wall - sum(w_own) / CONCURRENT
            seq_walls.append(s_wall)
            sweep_walls.append(w_wall)
            overheads.append(overhead)
            shares.append(overhead / w_wall)
            parts.append(timings)
            print(f"round {r + 1}: sequential {s_wall:.1f} s (trials {', '.join(f'{x:.1f}' for x in s_own)}); "
                  f"sweep {w_wall:.1f} s (trials {', '.join(f'{x:.1f}' for x in w_own)}; Ray start "
                  f"{timings['ray_start']:.1f} s, Tune {timings['tune']:.1f} s, Ray stop {timings['ray_stop']:.1f} s); "
                  f"overhead {overhead:.1f} s ({overhead / w_wall:.1%})", flush=True)
        s, w, o = median(seq_walls), median(sweep_walls), median(overheads)
        # The trials' own time, as the sweep would take it with nothing around them, is w - o.
        inside = median([p["tune"] - (w_i - o_i) for p, w_i, o_i in zip(parts, sweep_walls, overheads)])
        start, stop = median([p["ray_start"] for p in parts]), median([p["ray_stop"] for p in parts])
        print(f"overhead, median: Ray start {start:.1f} s, inside Tune (starting actors, placing trials, "
              f"reporting) {inside:.1f} s, Ray stop {stop:.1f} s, the command's own (imports, checks, "
              f"report and plots) {o - start - inside - stop:.1f} s")
        print(f"{len(RATES)} LeNet trials of {args.iterations} iterations, median of {args.rounds}: "
              f"sequential (2 threads each) {s:.1f} s = {len(RATES) * 3600 / s:.0f} trials/h; "
              f"sweep ({CONCURRENT} at once, 1 thread each) {w:.1f} s = {len(RATES) * 3600 / w:.0f} trials/h "
              f"({s / w:.2f}x); Ray's overhead {o:.1f} s = {median(shares):.1%} of the sweep's wall time")


if __name__ == "__main__":
    main()
