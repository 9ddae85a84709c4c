"""IDX → LMDB conversion speed and memory: caffetool against Caffe's own convert_mnist_data.

Both convert the same 60,000 Fashion-MNIST training images (raw IDX, as Caffe's tool needs) as
separate processes, alternating, several rounds; the medians are compared. Targets: our wall
time ≤ 1.0× Caffe's, our peak RSS ≤ 2× the uncompressed IDX size.

    .venv/bin/python benchmarks/convert_mnist.py [--rounds 7] [--images F --labels F]
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
import tempfile
from pathlib import Path

from _common import median, timed

from caffetool.data.registry import FASHION_MNIST
from caffetool.engine import locate


def raw_idx(folder: Path, tmp: Path) -> tuple[Path, Path]:
    out = []
    for role in ("train-images", "train-labels"):
        name = FASHION_MNIST.file(role).name
        target = tmp / name.removesuffix(".gz")
        with gzip.open(folder / name) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
        out.append(target)
    return out[0], out[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--source", type=Path, default=FASHION_MNIST.local_dirs[0])
    args = parser.parse_args()
    engine = locate(probe=False)
    with tempfile.TemporaryDirectory(prefix="caffetool-bench-") as tmp_name:
        tmp = Path(tmp_name)
        images, labels = raw_idx(args.source, tmp)
        idx_mb = (images.stat().st_size + labels.stat().st_size) / 2**20
        theirs, ours = [], []
        for i in range(args.rounds):
            theirs.append(timed([str(engine.tool("convert_mnist_data")), str(images), str(labels),
                                 str(tmp / f"caffe{i}"), "--backend=lmdb"]))
            ours.append(timed([sys.executable, "-m", "caffetool.data.convert", str(images),
                               str(labels), str(tmp / f"ours{i}")]))
            shutil.rmtree(tmp / f"caffe{i}")
            shutil.rmtree(tmp / f"ours{i}")
    t_caffe = median([r.seconds for r in theirs])
    t_ours = median([r.seconds for r in ours])
    rss_ours = max(r.peak_rss_mb for r in ours)
    print(f"images: 60,000 (uncompressed IDX {idx_mb:.1f} MiB), {args.rounds} alternating rounds")
    print(f"convert_mnist_data  median {t_caffe:.3f} s   peak RSS {max(r.peak_rss_mb for r in theirs):.1f} MiB")
    print(f"caffetool           median {t_ours:.3f} s   peak RSS {rss_ours:.1f} MiB")
    print(f"time ratio ours/caffe {t_ours / t_caffe:.2f} (target <= 1.00); "
          f"RSS / IDX size {rss_ours / idx_mb:.2f} (target <= 2.00)")


if __name__ == "__main__":
    main()
