"""The engine's compile time: the same recipe built the old way (one object per source, no
precompiled headers) and caffetool's way (patch 0008: the library's sources in unity batches with
precompiled headers), then a rebuild with nothing changed through ccache, all in one run.

Each build is a whole ``engine.install`` into a prefix of this benchmark's own (the same source,
patches, options and ``make -jN`` as the default engine; nothing is linked into this Python), and
its compile time is the manifest's ``timings_s.compile`` (``make`` and ``make install``). The old
way is the same install with ``-DCAFFE_UNITY_BUILD=OFF -DCAFFE_PRECOMPILE_HEADERS=OFF``; ccache is
kept out of both (``CCACHE_DISABLE``) and used only for the last two: one that fills a cache of
this benchmark's own, one that reuses it, timed as a whole (``engine.install --force`` after no
change). Then both engines train LeNet for ``--iters`` iterations with the same seed and their
weights are compared byte for byte. Targets: compile <= 140 s on 2 cores (the old way took 274 s);
the rebuild <= 30 s; the weights identical.

    .venv/bin/python benchmarks/engine_build.py [--iters 300] [--skip-old]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from caffetool.engine import install
from caffetool.engine.recipe import BuildOptions

OLD_WAY = ("-DCAFFE_UNITY_BUILD=OFF", "-DCAFFE_PRECOMPILE_HEADERS=OFF")
CAFFETOOL = Path(sys.executable).parent / "caffetool"


def build(prefix: Path, extra: tuple[str, ...] = (), force: bool = False) -> tuple[float, dict]:
    """One engine install; its wall time and manifest."""
    start = time.perf_counter()
    install.install(prefix, BuildOptions(extra_cmake=extra), link=False, force=force, progress=False,
                    say=lambda _: None)
    seconds = time.perf_counter() - start
    return seconds, json.loads((prefix / "caffetool-engine.json").read_text())


def trained_weights(prefix: Path, work: Path, iterations: int) -> str:
    """sha256 of the weights LeNet ends with after ``iterations`` on the engine at ``prefix``."""
    env = {**os.environ, "CAFFE_ROOT": str(prefix), "INVOKE_TRACKING_URI": "off", "OMP_NUM_THREADS": "2"}
    subprocess.run([str(CAFFETOOL), "train", "--max-iter", str(iterations), "--random-seed", "1", "--name", "r",
                    "--runs-dir", str(work / "runs"), "--data-dir", str(work / "data")], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    weights = sorted((work / "runs" / "r" / "snapshots").glob("*.caffemodel"))[-1]
    return hashlib.sha256(weights.read_bytes()).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=300, help="training iterations for the weights check")
    parser.add_argument("--skip-old", action="store_true", help="build only caffetool's way (no comparison)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="caffetool-build-") as tmp:
        root = Path(tmp)
        os.environ["CCACHE_DISABLE"] = "1"
        old = None if args.skip_old else build(root / "old", OLD_WAY)
        new = build(root / "new")
        for name, result in (("old way", old), ("caffetool's way", new)):
            if result:
                t = result[1]["timings_s"]
                print(f"{name:16} compile {t['compile']:6.1f} s (install {result[0]:.1f} s)", flush=True)
        if old:
            print(f"compile ratio old/new {old[1]['timings_s']['compile'] / new[1]['timings_s']['compile']:.2f}x "
                  "(target: <= 140 s)")
        if shutil.which("ccache"):
            del os.environ["CCACHE_DISABLE"]
            os.environ["CCACHE_DIR"] = str(root / "ccache")
            filled = build(root / "cached")
            again = build(root / "cached", force=True)
            print(f"through ccache: first {filled[0]:.1f} s (compile {filled[1]['timings_s']['compile']:.1f} s, "
                  f"{filled[1]['ccache']}), again with nothing changed {again[0]:.1f} s (compile "
                  f"{again[1]['timings_s']['compile']:.1f} s, {again[1]['ccache']}; target <= 30 s)")
        else:
            print("ccache not installed: the rebuild is not measured (apt install ccache)")
        if old:
            hashes = {name: trained_weights(root / name, root / f"train-{name}", args.iters) for name in ("old", "new")}
            same = hashes["old"] == hashes["new"]
            print(f"LeNet {args.iters} iterations, --random-seed 1: weights {'byte-identical' if same else 'DIFFER'} "
                  f"({hashes['new'][:16]})")


if __name__ == "__main__":
    main()
