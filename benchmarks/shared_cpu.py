"""Training on a CPU that other programs share: caffetool's default against one thread and PyTorch.

On this machine's cores, under each condition in turn (each set up, measured and torn down in
this one run, the subjects alternating in each round):

* ``quiet``: nothing else runs;
* ``busy1`` / ``busy2``: one or two busy loops (``while :; do :; done``) at nice 0;
* ``nice19``: one busy loop at nice 19;
* ``quota1``: the training in a cgroup whose CPU quota is one core (cgroup v1 ``cpu.cfs_quota_us``
  equal to its period, or v2 ``cpu.max``), as ``docker run --cpus 1`` makes one;
* ``pair``: two trainings started together (both default, or both one thread);
* ``evaluate``: ``caffetool evaluate`` of another trained run, over and over (pycaffe on the
  engine's default threads, as evaluate runs it);
* ``serve``: ``caffetool demo.serve`` of that run, answering two clients that send it the test
  set's images one request after another, as fast as the answers come;
* ``sweep``: ``caffetool sweep`` on its own local Ray, four LeNet trials on one CPU each (two at a
  time on two cores), started 40 s before the training.

Subjects: ``caffetool`` (``caffetool train`` with nothing set: its thread plan, which follows the
CPU the run gets), ``one thread`` (``--threads 1``) and ``pytorch`` (benchmarks/torch_lenet.py, the
same LeNet recipe, torch's own default thread count; its venv is cpu_speed.py's). Each trains
BVLC's LeNet recipe on Fashion-MNIST for ``--iters`` iterations without tests; the figure is the
run's training seconds (caffetool's summary: Caffe's process less its tests), PyTorch's the same
iterations at its timed speed. Targets (issue "Training that shares the machine well"): busy1,
busy2 and quota1: caffetool ≤ 1.1 × one thread; pair: each ≤ 1.25 × one thread alone (quiet);
quiet: caffetool ≤ 0.75 × one thread; every condition: caffetool at least PyTorch's speed.

Needs root for the quota (a cgroup is made and removed here).

    .venv/bin/python benchmarks/shared_cpu.py [--iters 400] [--rounds 2] [--conditions quiet,busy1,...]
        [--json benchmarks/cpu/shared-DATE.json]
        [--subjects caffetool,one thread,pytorch,fixed]
    .venv/bin/python benchmarks/shared_cpu.py --from-record benchmarks/cpu/shared-DATE.json
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

from _common import median

from caffetool.data.registry import FASHION_MNIST

HERE = Path(__file__).resolve().parent
CAFFETOOL = Path(sys.executable).with_name("caffetool")
LOOP = ["bash", "-c", "while :; do :; done"]
FASHION = Path("/usr/share/datasets/fashion-mnist")  # Debian's dataset-fashion-mnist: PyTorch reads the IDX files
CONDITIONS = ("quiet", "busy1", "busy2", "nice19", "quota1", "pair", "evaluate", "serve", "sweep")
OTHER = "other"  # the run that the evaluate and serve conditions use
# caffetool's subjects and their --threads: its default, one thread, and every core fixed (the
# default before threads followed the CPU: bound one to a core).
THREADS = {"caffetool": None, "one thread": 1, "fixed": len(os.sched_getaffinity(0))}
SUBJECTS = ("caffetool", "one thread", "pytorch")
TARGETS = {"busy1": 1.1, "busy2": 1.1, "quota1": 1.1, "pair": 1.25, "quiet": 0.75, "evaluate": 1.1, "serve": 1.1, "sweep": 1.1}


@contextlib.contextmanager
def loops(count: int, nice: int = 0) -> Iterator[None]:
    """``count`` busy loops at ``nice``, stopped on the way out."""
    hogs = [subprocess.Popen(["nice", "-n", str(nice), *LOOP]) for _ in range(count)]
    try:
        time.sleep(0.5)
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


@contextlib.contextmanager
def quota_cgroup(cores: float) -> Iterator[list[str]]:
    """A cgroup with a CPU quota of ``cores``; yields the command prefix that runs a program in it."""
    name = f"caffetool-bench-{os.getpid()}"
    v1 = Path("/sys/fs/cgroup/cpu")
    if (v1 / "cpu.cfs_period_us").is_file():
        folder = v1 / name
        folder.mkdir()
        period = int((v1 / "cpu.cfs_period_us").read_text())
        (folder / "cpu.cfs_period_us").write_text(str(period))
        (folder / "cpu.cfs_quota_us").write_text(str(int(cores * period)))
    else:
        folder = Path("/sys/fs/cgroup") / name
        folder.mkdir()
        (folder / "cpu.max").write_text(f"{int(cores * 100000)} 100000")
    try:
        yield ["sh", "-c", f'echo $$ > {folder / "cgroup.procs"} && exec "$@"', "sh"]
    finally:
        for _ in range(50):
            try:
                folder.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def end_group(leader: subprocess.Popen, signum: int, grace: float = 120) -> None:
    """Send ``signum`` to the process group ``leader`` started (``start_new_session``), give it
    ``grace`` seconds to end, then SIGKILL the group; reaped either way."""
    os.killpg(leader.pid, signum)
    try:
        leader.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()


@contextlib.contextmanager
def evaluating(others: Path) -> Iterator[None]:
    """``caffetool evaluate`` of the run ``OTHER`` in ``others``, again and again until the block ends."""
    loop = subprocess.Popen(["bash", "-c", f'while :; do "{CAFFETOOL}" evaluate {OTHER} --runs-dir "{others}" '
                             "--no-caffe-test >/dev/null 2>&1; done"], start_new_session=True)
    try:
        time.sleep(2)
        yield
    finally:
        end_group(loop, signal.SIGKILL)


@contextlib.contextmanager
def serving(others: Path, images: Path) -> Iterator[None]:
    """``caffetool demo.serve`` of the run ``OTHER``, kept busy by two clients that post the test
    set's images (PNG) one after another until the block ends."""
    import cv2  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([str(CAFFETOOL), "demo.serve", "--run", OTHER, "--runs-dir", str(others), "--port",
                               str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    pixels = np.frombuffer(gzip.open(images).read()[16:16 + 64 * 784], np.uint8).reshape(64, 28, 28)
    bodies = [cv2.imencode(".png", image)[1].tobytes() for image in pixels]
    stop = threading.Event()
    answered = []

    def client() -> None:
        i = 0
        while not stop.is_set():
            request = urllib.request.Request(f"http://127.0.0.1:{port}/api/classify", data=bodies[i % len(bodies)],
                                             headers={"Content-Type": "image/png"})
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    answer.read()
                answered.append(1)
            except OSError:
                time.sleep(0.2)
            i += 1

    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
                    break
            except OSError:
                time.sleep(0.5)
        clients = [threading.Thread(target=client, daemon=True) for _ in range(2)]
        for c in clients:
            c.start()
        time.sleep(1)
        yield
    finally:
        stop.set()
        end_group(server, signal.SIGTERM)
    if not answered:
        raise SystemExit("the demo server answered no request")


@contextlib.contextmanager
def sweeping(data: Path, runs: Path) -> Iterator[None]:
    """A ``caffetool sweep`` of four trials on its own Ray, stopped (Ctrl-C, as a user stops one) when
    the block ends."""
    sweep = subprocess.Popen([str(CAFFETOOL), "sweep", "--dataset", FASHION_MNIST.name, "--data-dir", str(data),
                              "--runs-dir", str(runs), "--param", "base_lr=0.02,0.01,0.005,0.001", "--max-iter",
                              "3000", "--test-interval", "3000", "--tracking-uri", "off", "--scheduler", "fifo"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        time.sleep(40)
        if sweep.poll() is not None:
            raise SystemExit(f"the sweep ended early ({sweep.returncode})")
        yield
    finally:
        end_group(sweep, signal.SIGINT)  # as a user stops a sweep: Ctrl-C


def caffetool_train(data: Path, runs: Path, name: str, iters: int, threads: int | None,
                    prefix: list[str] = ()) -> subprocess.Popen:
    argv = [*prefix, str(CAFFETOOL), "train", "--model", "lenet", "--dataset", FASHION_MNIST.name,
            "--data-dir", str(data), "--runs-dir", str(runs), "--name", name, "--max-iter", str(iters),
            "--test-interval", str(iters * 10), "--snapshot", str(iters * 10)]
    if threads:
        argv += ["--threads", str(threads)]
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                              "MKL_NUM_THREADS", "CAFFE_ADAPT_THREADS")}
    env["INVOKE_TRACKING_URI"] = "off"
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def training_seconds(process: subprocess.Popen, run: Path) -> tuple[float, list]:
    _, err = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"caffetool train failed: {err[-1500:]}")
    manifest = json.loads((run / "manifest.json").read_text())
    return manifest["timings_s"]["training"], manifest.get("threads", {}).get("resized", [])


def torch_seconds(images: Path, labels: Path, iters: int, prefix: list[str] = ()) -> float:
    import cpu_speed  # noqa: PLC0415 - its venv and script

    python = cpu_speed.torch_python()
    done = subprocess.run([*prefix, str(python), str(cpu_speed.TORCH_SCRIPT), "--images", str(images), "--labels",
                           str(labels), "--iters", str(iters), "--threads", str(os.cpu_count())],
                          capture_output=True, text=True, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return iters / result["iters_per_s"]


def condition(name: str, scratch: Path) -> contextlib.AbstractContextManager:
    others = scratch / "others"
    return {"busy1": lambda: loops(1), "busy2": lambda: loops(2), "nice19": lambda: loops(1, 19),
            "quota1": lambda: quota_cgroup(1.0), "evaluate": lambda: evaluating(others),
            "serve": lambda: serving(others, FASHION / "t10k-images-idx3-ubyte.gz"),
            "sweep": lambda: sweeping(scratch / "data", scratch / "sweeps")}.get(name, contextlib.nullcontext)()


def measure(name: str, data: Path, images: Path, labels: Path, iters: int, subjects: list[str], scratch: Path,
            round_: int, say: Callable[[str], None]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    subjects = list(subjects)
    if round_ % 2:
        subjects.reverse()
    with condition(name, scratch) as prefix:
        prefix = prefix if isinstance(prefix, list) else []
        for subject in subjects:
            runs = scratch / f"{name}-{round_}-{subject.replace(' ', '-')}"
            if subject == "pytorch":
                if name == "pair":
                    continue
                out[subject] = [torch_seconds(images, labels, iters, prefix)]
            elif name == "pair":
                started = [caffetool_train(data, runs, f"r{i}", iters, THREADS[subject]) for i in range(2)]
                results = [training_seconds(p, runs / f"r{i}") for i, p in enumerate(started)]
                out[subject] = [r[0] for r in results]
                out[f"{subject} resized"] = [r[1] for r in results]
            else:
                seconds, resized = training_seconds(
                    caffetool_train(data, runs, "r", iters, THREADS[subject], prefix), runs / "r")
                out[subject], out[f"{subject} resized"] = [seconds], [resized]
            say(f"  {name} round {round_} {subject}: {', '.join(f'{s:.2f}' for s in out[subject])} s")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--conditions", default=",".join(CONDITIONS))
    parser.add_argument("--subjects", default=",".join(SUBJECTS),
                        help=f"of {', '.join([*THREADS, 'pytorch'])}; 'fixed' is the default before")
    parser.add_argument("--json", type=Path, default=HERE / "cpu" / f"shared-{dt.date.today().isoformat()}.json")
    parser.add_argument("--from-record", type=Path, help="summarise a record's samples again (no training)")
    args = parser.parse_args()
    if args.from_record:
        record = json.loads(args.from_record.read_text())
        record["summary"] = summarise({name: row["samples"] for name, row in record["summary"].items()})
        write(args.from_record, record)
        return
    names = [n for n in args.conditions.split(",") if n]
    subjects = [n for n in args.subjects.split(",") if n]
    with tempfile.TemporaryDirectory(prefix="caffetool-shared-cpu-") as tmp:
        scratch = Path(tmp)
        data = scratch / "data"
        subprocess.run([str(CAFFETOOL), "data.fetch", "--dataset", FASHION_MNIST.name, "--data-dir", str(data)],
                       check=True, stdout=subprocess.DEVNULL)
        images, labels = (FASHION / f for f in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"))
        if {"evaluate", "serve"} & set(names):  # the run they evaluate and serve
            training_seconds(caffetool_train(data, scratch / "others", OTHER, args.iters, None), scratch / "others" / OTHER)
        rows: dict[str, dict[str, list]] = {n: {} for n in names}
        for round_ in range(args.rounds):
            for name in names:
                for key, values in measure(name, data, images, labels, args.iters, subjects, scratch,
                                           round_, print).items():
                    rows[name].setdefault(key, []).extend(values)
    write(args.json, {"iters": args.iters, "rounds": args.rounds, "cores": len(os.sched_getaffinity(0)),
                      "cpu": next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                                   if line.startswith("model name")), None),
                      "summary": summarise(rows)})


def summarise(rows: dict[str, dict[str, list]]) -> dict[str, dict]:
    """Each condition's medians and, for caffetool's default and the fixed team (whichever ran), the
    ratio to one thread against the target. A pair's figure is the median over rounds of the slower
    of its two trainings, against one thread alone (quiet)."""
    alone = median(rows["quiet"]["one thread"]) if rows.get("quiet", {}).get("one thread") else None
    summary = {}
    for name, r in rows.items():
        row: dict = {f"{subject.replace(' ', '_')}_s": median(r[subject]) if r.get(subject) else None
                     for subject in (*THREADS, "pytorch")}
        row["target"] = TARGETS.get(name)
        for subject in ("caffetool", "fixed"):
            if not r.get(subject) or not r.get("one thread"):
                continue
            if name == "pair":
                worst = [max(r[subject][i:i + 2]) for i in range(0, len(r[subject]), 2)]
                ratio = median(worst) / alone if alone else None
            else:
                ratio = median(r[subject]) / median(r["one thread"])
            key = "ratio" if subject == "caffetool" else "fixed_ratio"
            row[key] = ratio
            if subject == "caffetool":
                row["met"] = None if row["target"] is None or ratio is None else ratio <= row["target"]
                row["at_least_pytorch"] = None if not r.get("pytorch") else row["caffetool_s"] <= row["pytorch_s"]
        row["basis"] = ("median over rounds of the slower of the two / one thread alone (quiet)" if name == "pair"
                        else "median / one thread's median")
        row["samples"] = r
        summary[name] = row
    return summary


def write(path: Path, record: dict) -> None:
    """Print the record's table and write it to ``path``."""
    def cell(value: float | None, unit: str) -> str:
        return f"{value:.2f}{unit}" if value else "—"

    print(f"\n{'condition':<9} {'caffetool':>10} {'fixed':>8} {'one thread':>11} {'pytorch':>9}   ratio  fixed   target")
    for name, row in record["summary"].items():
        met = row.get("met")
        print(f"{name:<9} {cell(row.get('caffetool_s'), 's'):>10} {cell(row.get('fixed_s'), 's'):>8} "
              f"{cell(row.get('one_thread_s'), 's'):>11} {cell(row.get('pytorch_s'), 's'):>9}   "
              f"{cell(row.get('ratio'), 'x'):>6} {cell(row.get('fixed_ratio'), 'x'):>6}   {row['target'] or '—'} "
              f"{'met' if met else '' if met is None else 'MISSED'}"
              f"{' (slower than PyTorch)' if row.get('at_least_pytorch') is False else ''}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, default=str) + "\n")
    print(f"record: {path}")

if __name__ == "__main__":
    main()
