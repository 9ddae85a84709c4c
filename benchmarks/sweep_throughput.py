"""Sweep throughput: 4 LeNet trials one after another, 2 at once without Ray, and as a Ray Tune sweep.

The same 4 trials run one after another (2 threads each), 2 at once without Ray (1 thread each), and
as a sweep on Ray Tune (2 trials at once, 1 thread each), on the CPU, with Ray started for the sweep
and with a Ray already running.

Sequential is four `caffetool train` commands with ``OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=2``, one
after the other. Pairs is the same four commands with 1 thread each, 2 at once (a pool of two
processes, no Ray): the sweep's work done without Ray, each run paying what any caffetool run pays
(its imports, MLflow, its plots). Each sweep is one `caffetool sweep --param base_lr=...` command
with ``--cpus-per-trial 1`` (FIFO: no trial stopped early, so all do the same work), once with
``--address auto`` on the Ray that `caffetool ray.start` left running (its start is timed apart:
paid once, not per sweep) and, unless ``--attached-only``, once on a Ray of its own (started and
stopped by the sweep). All train the LeNet recipe on Fashion-MNIST for ``--iterations`` each, with
its tests, tracked in MLflow as `train` and `sweep` track by default. The kinds alternate within a
round, so the machine's drift reaches all of them alike.

Ray's overhead is given three ways. Against the trials' own time: the sweep's wall time minus the
trials' own (each trial's run records its own wall time, set-up to final test; with 2 at once, their
sum over 2), which also counts each run's own start and end (imports, MLflow, plots) and the last
trial running alone, split into Ray's start (or attaching), its shutdown (or detaching), what is
left inside Tune and the command's own. Beyond the pairs: that figure minus the same figure of the
pairs, which pay every run's own start and end and the last one alone without Ray: what Ray and
Tune add. Against pairs: the sweep's wall time minus the pairs' in the same round (the median of
those differences), the figure a user sees, but one that moves with the machine's speed from run
to run (the trials' own times vary by 15% here), where the other two are each taken within one run.
Target: overhead under 5% of the sweep's wall time for 1,000-iteration trials with a running Ray.

    .venv/bin/python benchmarks/sweep_throughput.py [--iterations 1000] [--rounds 1] [--attached-only]
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
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from _common import median

from caffetool.data import fetch
from caffetool.data.registry import FASHION_MNIST

CAFFETOOL = Path(sys.executable).parent / "caffetool"
RATES = ("0.001", "0.005", "0.01", "0.02")
CONCURRENT = 2


def trainings(runs: Path, data_dir: Path, iterations: int, tag: str, threads: int,
              at_once: int) -> tuple[float, list[float]]:
    """The 4 trials as `caffetool train` commands of ``threads`` threads each, ``at_once`` at a time
    (one after another: sequential; 2 at once with 1 thread: pairs, the sweep's work without Ray)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": str(threads)}

    def one(i: int) -> None:
        subprocess.run([str(CAFFETOOL), "train", "--max-iter", str(iterations), "--base-lr", RATES[i], "--name",
                        f"{tag}-{i}", "--gpu", "cpu", "--runs-dir", str(runs), "--data-dir", str(data_dir)],
                       env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    start = time.perf_counter()
    with ThreadPoolExecutor(at_once) as pool:
        list(pool.map(one, range(len(RATES))))
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
    parser.add_argument("--attached-only", action="store_true",
                        help="leave out the sequential runs and the sweep on a Ray of its own")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="caffetool-sweep-bench-") as tmp:
        tmp_path = Path(tmp)
        runs_dir, data_dir = tmp_path / "runs", tmp_path / "data"
        fetch.fetch(FASHION_MNIST, data_dir, progress=False, say=lambda _: None)
        seq_walls: list[float] = []
        pair_walls: list[float] = []
        pair_outside: list[float] = []  # each run's own start and end, the last one alone: no Ray in it
        kinds: dict[str, list[tuple[float, float, dict]]] = {"running Ray": []}
        if not args.attached_only:
            kinds["own Ray"] = []
        with resident_ray(Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))) as (ray_start, env):
            print(f"caffetool ray.start: {ray_start:.1f} s, once", flush=True)
            for r in range(args.rounds):
                if not args.attached_only:
                    s_wall, s_own = trainings(runs_dir, data_dir, args.iterations, f"seq{r}", threads=2, at_once=1)
                    seq_walls.append(s_wall)
                    print(f"round {r + 1}: sequential {s_wall:.1f} s (trials {_list(s_own)})", flush=True)
                p_wall, p_own = trainings(runs_dir, data_dir, args.iterations, f"pairs{r}", threads=1,
                                           at_once=CONCURRENT)
                pair_walls.append(p_wall)
                pair_outside.append(p_wall - sum(p_own) / CONCURRENT)
                print(f"round {r + 1}: pairs, no Ray {p_wall:.1f} s (trials {_list(p_own)}); outside the trials' own "
                      f"{pair_outside[-1]:.1f} s", flush=True)
                for kind in kinds:
                    sweep_env = env if kind == "running Ray" else None
                    tag = f"sweep{r}-{'attached' if sweep_env else 'own'}"
                    w_wall, w_own, timings = sweep(runs_dir, data_dir, args.iterations, tag, sweep_env)
                    overhead = w_wall - sum(w_own) / CONCURRENT
                    kinds[kind].append((w_wall, overhead, timings))
                    print(f"round {r + 1}, sweep on {kind}: {w_wall:.1f} s (trials {_list(w_own)}; Ray start "
                          f"{timings['ray_start']:.1f} s, Tune {timings['tune']:.1f} s, Ray stop "
                          f"{timings['ray_stop']:.1f} s); against pairs {w_wall - p_wall:+.1f} s "
                          f"({(w_wall - p_wall) / w_wall:+.1%}); against the trials' own {overhead:.1f} s "
                          f"({overhead / w_wall:.1%})", flush=True)
        p = median(pair_walls)
        print(f"pairs, no Ray: median of {args.rounds}: {p:.1f} s = {len(RATES) * 3600 / p:.0f} trials/h")
        if seq_walls:
            s = median(seq_walls)
            print(f"sequential (2 threads each): median of {args.rounds}: {s:.1f} s = {len(RATES) * 3600 / s:.0f} "
                  "trials/h")
        for kind, runs in kinds.items():
            w, o = median([x[0] for x in runs]), median([x[1] for x in runs])
            added = [x[0] - q for x, q in zip(runs, pair_walls)]
            shares = [a / x[0] for a, x in zip(added, runs)]
            # The trials' own time, as the sweep would take it with nothing around them, is wall - overhead.
            inside = median([t["tune"] - (w_i - o_i) for w_i, o_i, t in runs])
            start, stop = median([t["ray_start"] for _, _, t in runs]), median([t["ray_stop"] for _, _, t in runs])
            print(f"{kind}: {len(RATES)} LeNet trials of {args.iterations} iterations, median of {args.rounds}: sweep "
                  f"({CONCURRENT} at once, 1 thread each) {w:.1f} s = {len(RATES) * 3600 / w:.0f} trials/h")
            print(f"{kind}: Ray's overhead against pairs without Ray, median of the rounds' differences: "
                  f"{median(added):+.1f} s = {median(shares):+.1%} of the sweep's wall time (rounds: "
                  f"{', '.join(f'{x:+.1%}' for x in shares)})")
            beyond = median([x[1] for x in runs]) - median(pair_outside)
            print(f"{kind}: Ray's overhead beyond what the same runs spend outside their own time without Ray "
                  f"(medians: the sweep's {o:.1f} s, the pairs' {median(pair_outside):.1f} s): {beyond:.1f} s = "
                  f"{beyond / w:.1%} of the sweep's wall time")
            print(f"{kind}: overhead against the trials' own time, median: {o:.1f} s = "
                  f"{median([x[1] / x[0] for x in runs]):.1%}: Ray start {start:.1f} s, inside Tune (starting "
                  f"actors, placing trials, reporting, the runs' own start and end, the last trial alone) "
                  f"{inside:.1f} s, Ray stop {stop:.1f} s, the command's own (imports, checks, report, plots) "
                  f"{o - start - inside - stop:.1f} s")


def _list(values: list[float]) -> str:
    return ", ".join(f"{x:.1f}" for x in values)


if __name__ == "__main__":
    main()
