"""Sweep throughput: the same 4 LeNet trials run one after another (2 threads each) and as a sweep
on Ray Tune (2 trials at once, 1 thread each), on the CPU, with Ray started for the sweep and with a
Ray already running.

Sequential is four `caffetool train` commands with ``OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=2``, one
after the other; each sweep is one `caffetool sweep --param base_lr=...` command with
``--cpus-per-trial 1`` (FIFO: no trial stopped early, so all do the same work), once on a Ray of its
own (started and stopped by the sweep) and once with ``--address auto`` on the Ray that
`caffetool ray.start` left running (its start is timed apart: paid once, not per sweep). All train
the LeNet recipe on Fashion-MNIST for ``--iterations`` each, with its tests, tracked in MLflow as
`train` and `sweep` track by default. Reported: trials per hour of each, and Ray's overhead, the
sweep's wall time minus the trials' own (each trial's run records its own wall time, set-up to
final test; with 2 at once, their sum over 2 is what the sweep would take with nothing around
them), split into Ray's start (or attaching), its shutdown (or detaching), what is left inside
Tune (starting actors, placing trials, reporting) and the command's own (imports, checks, the
report, plots and HParams). Target: overhead under 5% of the sweep's wall time for 1,000-iteration
trials with a running Ray.

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
from collections.abc import Iterator
from contextlib import contextmanager
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


def sweep(runs: Path, data_dir: Path, iterations: int, tag: str, env: dict | None) -> tuple[float, list[float], dict]:
    """One sweep: attached to the running Ray (``env`` names its folder) or, without ``env``, on its own."""
    start = time.perf_counter()
    subprocess.run([str(CAFFETOOL), "sweep", "--name", tag, "--param", f"base_lr={','.join(RATES)}", "--max-iter",
                    str(iterations), "--cpus-per-trial", "1", "--max-concurrent", str(CONCURRENT), "--runs-dir",
                    str(runs), "--data-dir", str(data_dir), *(["--address", "auto"] if env else [])],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wall = time.perf_counter() - start
    record = json.loads((runs / tag / "sweep.json").read_text())
    own = [_own(runs / tag / row["trial"]) for row in record["results"]]
    assert all(row["status"] == "finished" for row in record["results"]), record["results"]
    return wall, own, record["timings_s"]


@contextmanager
def resident_ray(temp: Path) -> Iterator[tuple[float, dict]]:
    """`caffetool ray.start` in a Ray folder of this benchmark's own (RAY_TMPDIR): its start time, and
    the environment that finds it."""
    env = {**os.environ, "RAY_TMPDIR": str(temp)}
    start = time.perf_counter()
    subprocess.run([str(CAFFETOOL), "ray.start"], check=True, stdout=subprocess.DEVNULL, env=env)
    try:
        yield time.perf_counter() - start, env
    finally:
        subprocess.run([str(CAFFETOOL), "ray.stop"], check=True, stdout=subprocess.DEVNULL, env=env)


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
        seq_walls: list[float] = []
        kinds: dict[str, list[tuple[float, float, dict]]] = {"own Ray": [], "running Ray": []}
        with resident_ray(Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))) as (ray_start, env):
            print(f"caffetool ray.start: {ray_start:.1f} s, once", flush=True)
            for r in range(args.rounds):
                s_wall, s_own = sequential(tmp_path / "runs", data_dir, args.iterations, f"seq{r}")
                seq_walls.append(s_wall)
                print(f"round {r + 1}: sequential {s_wall:.1f} s (trials {', '.join(f'{x:.1f}' for x in s_own)})",
                      flush=True)
                for kind, sweep_env in (("running Ray", env), ("own Ray", None)):
                    tag = f"sweep{r}-{'attached' if sweep_env else 'own'}"
                    w_wall, w_own, timings = sweep(tmp_path / "runs", data_dir, args.iterations, tag, sweep_env)
                    overhead = w_wall - sum(w_own) / CONCURRENT
                    kinds[kind].append((w_wall, overhead, timings))
                    print(f"round {r + 1}, sweep on {kind}: {w_wall:.1f} s (trials "
                          f"{', '.join(f'{x:.1f}' for x in w_own)}; Ray start {timings['ray_start']:.1f} s, Tune "
                          f"{timings['tune']:.1f} s, Ray stop {timings['ray_stop']:.1f} s); overhead {overhead:.1f} s "
                          f"({overhead / w_wall:.1%})", flush=True)
        s = median(seq_walls)
        for kind, runs in kinds.items():
            w, o = median([x[0] for x in runs]), median([x[1] for x in runs])
            # The trials' own time, as the sweep would take it with nothing around them, is wall - overhead.
            inside = median([t["tune"] - (w_i - o_i) for w_i, o_i, t in runs])
            start, stop = median([t["ray_start"] for _, _, t in runs]), median([t["ray_stop"] for _, _, t in runs])
            print(f"{kind}: overhead, median: Ray start {start:.1f} s, inside Tune (starting actors, placing trials, "
                  f"reporting) {inside:.1f} s, Ray stop {stop:.1f} s, the command's own (imports, checks, report, "
                  f"plots) {o - start - inside - stop:.1f} s")
            print(f"{kind}: {len(RATES)} LeNet trials of {args.iterations} iterations, median of {args.rounds}: "
                  f"sequential (2 threads each) {s:.1f} s = {len(RATES) * 3600 / s:.0f} trials/h; sweep ({CONCURRENT} "
                  f"at once, 1 thread each) {w:.1f} s = {len(RATES) * 3600 / w:.0f} trials/h ({s / w:.2f}x); "
                  f"Ray's overhead {o:.1f} s = {median([x[1] / x[0] for x in runs]):.1%} of the sweep's wall time")


if __name__ == "__main__":
    main()
