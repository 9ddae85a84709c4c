"""The CPU image's size against its training speed, for each engine it can carry: the default (MKL)
and OpenBLAS, built and trained side by side in one run.

``caffetool docker.build --variant cpu --prefix ENGINE`` bundles an installed engine into the image;
the image's size is most of all its engine, and the two BLAS libraries differ by hundreds of MB
installed. Each image is built on a private Docker daemon (``private_docker.py``), its parts
measured (``du`` of ``/opt/venv``, ``/opt/caffe``, ``/usr`` inside it), then ``caffetool
docker.train`` trains LeNet on Fashion-MNIST in it (the host's data and runs folders mounted, no
network), each image in turn, ``--rounds`` times; the speed is the run's own (iterations over its
training seconds, from the manifest), the median of the rounds. The first engine is the reference
of the ratios.

    .venv/bin/caffetool engine.install --blas openblas --prefix ~/.cache/caffetool/engine-openblas
    sudo .venv/bin/python benchmarks/image_size.py --engine mkl=~/.local/share/caffetool/engine \\
        --engine openblas=~/.cache/caffetool/engine-openblas
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import private_docker

from caffetool import dockerimg

ROOT = Path(__file__).resolve().parent.parent
CAFFETOOL = Path(sys.executable).with_name("caffetool")
PARTS = ("/opt/venv", "/opt/caffe", "/usr")


def caffetool(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([str(CAFFETOOL), *args], cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"caffetool {' '.join(args)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done.stdout


def docker(env: dict[str, str], *args: str) -> str:
    return subprocess.run(["docker", *args], env=env, capture_output=True, text=True, check=True).stdout


def build(env: dict[str, str], label: str, prefix: Path) -> dict:
    """The image carrying ``prefix``: its size and the size of its parts."""
    tag = tag_of(label)
    caffetool(env, "docker.build", "--variant", "cpu", "--prefix", str(prefix), "--tag", tag, "--network", "host")
    size = int(docker(env, "image", "inspect", "--format", "{{.Size}}", tag))
    parts = docker(env, "run", "--rm", "--network", "none", "--entrypoint", "du", tag, "-sm", *PARTS).split()
    return {"engine": label, "prefix": str(prefix), "image_mb": round(size / 1e6),
            "parts_mb": dict(zip(parts[1::2], map(int, parts[0::2]))), "rounds": []}


def train(env: dict[str, str], label: str, data: Path, runs: Path, iters: int, round_: int) -> dict:
    """One training in the image: its speed (iterations over the run's training seconds) and accuracy."""
    name = f"size-{label}-{round_}"
    caffetool(env, "docker.train", "--variant", "cpu", "--tag", tag_of(label), "--network", "none", "--data-dir",
              str(data), "--runs-dir", str(runs), "--args", f"--dataset fashion-mnist --gpu cpu --name {name} "
              f"--max-iter {iters} --test-interval {iters}")
    manifest = json.loads((runs / name / "manifest.json").read_text())
    training = manifest["timings_s"]["training"]
    return {"training_s": training, "it_per_s": round(iters / training, 1),
            "test_accuracy": manifest["final"]["test0"]["accuracy"]}


def tag_of(label: str) -> str:
    return f"caffetool-size:{label}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", action="append", required=True, metavar="LABEL=PREFIX",
                        help="an installed engine to carry (the first is the reference)")
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3, help="trainings of each image, alternating")
    parser.add_argument("--json", type=Path, help="write the record here")
    args = parser.parse_args()
    engines = [(label, Path(prefix).expanduser()) for label, _, prefix in (e.partition("=") for e in args.engine)]
    scratch = Path(tempfile.mkdtemp(prefix="image-size-"))
    try:
        data, runs = scratch / "data", scratch / "runs"
        caffetool(dict(os.environ), "data.fetch", "--dataset", "fashion-mnist", "--data-dir", str(data))
        with private_docker.daemon(scratch / "dockerd") as env:
            private_docker.debian_image(env, dockerimg.CPU_IMAGES[0], scratch)
            rows = [build(env, label, prefix) for label, prefix in engines]
            for round_ in range(args.rounds):
                for row in rows:
                    row["rounds"].append(train(env, row["engine"], data, runs, args.iters, round_))
                    print(row["engine"], json.dumps(row["rounds"][-1]), flush=True)
            for row in rows:
                row["it_per_s"] = statistics.median(r["it_per_s"] for r in row["rounds"])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    first = rows[0]
    print(f"\n{'engine':10} {'image MB':>9} {'/opt/caffe':>10} {'/opt/venv':>9} {'median it/s':>11} {'size ratio':>10} "
          f"{'speed ratio':>11}")
    for r in rows:
        print(f"{r['engine']:10} {r['image_mb']:9} {r['parts_mb']['/opt/caffe']:10} {r['parts_mb']['/opt/venv']:9} "
              f"{r['it_per_s']:11} {r['image_mb'] / first['image_mb']:10.2f} {r['it_per_s'] / first['it_per_s']:11.2f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
