"""The engine's compile time: the same recipe built the old way (one object per source, no
precompiled headers) and caffetool's way (patch 0008: the library's sources in unity batches with
precompiled headers), then a rebuild with nothing changed through ccache, all in one run.

Each build is a whole ``engine.install`` into a prefix of this benchmark's own (the same source,
patches and options as the default engine; nothing is linked into this Python), and its compile
time is the manifest's ``timings_s.compile`` (the build and its install step). The old way is the
same install with ``-DCAFFE_UNITY_BUILD=OFF -DCAFFE_PRECOMPILE_HEADERS=OFF`` on CMake's default
generator (Makefiles, ``make -jN``: ninja is hidden from the recipe for it); caffetool's way uses
Ninja where it is installed, as ``engine.install`` does; ccache is
kept out of both (``CCACHE_DISABLE``) and used only for the last two: one that fills a cache of
this benchmark's own, one that reuses it, timed as a whole (``engine.install --force`` after no
change). Then both engines train LeNet for ``--iters`` iterations with the same ``--random-seed`` and their
weights are compared byte for byte, from the same data folder into the same run folder, with MKL
in its default mode and in its conditional numerical reproducibility mode (``MKL_CBWR=COMPATIBLE``). Targets: compile <= 140 s on 2 cores (the old way took 274 s);
the rebuild <= 30 s; the weights identical.

    .venv/bin/python benchmarks/engine_build.py [--iters 300] [--skip-old]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

from caffetool.engine import cmake, install
from caffetool.engine.recipe import BuildOptions

OLD_WAY = ("-DCAFFE_UNITY_BUILD=OFF", "-DCAFFE_PRECOMPILE_HEADERS=OFF")
CAFFETOOL = Path(sys.executable).parent / "caffetool"


@contextlib.contextmanager
def makefiles() -> Iterator[None]:
    """The recipe as it was before Ninja: its lookup of ``ninja`` finds none, so CMake writes Makefiles."""
    which = shutil.which
    cmake.shutil = SimpleNamespace(which=lambda name, *a, **k: None if name == "ninja" else which(name, *a, **k))
    try:
        yield
    finally:
        cmake.shutil = shutil


def build(prefix: Path, extra: tuple[str, ...] = (), force: bool = False) -> tuple[float, dict]:
    """One engine install; its wall time and manifest."""
    start = time.perf_counter()
    install.install(prefix, BuildOptions(extra_cmake=extra), link=False, force=force, progress=False,
                    say=lambda _: None)
    seconds = time.perf_counter() - start
    return seconds, json.loads((prefix / "caffetool-engine.json").read_text())


def trained_weights(prefix: Path, work: Path, iterations: int, mkl_mode: str | None) -> str:
    """sha256 of the weights LeNet ends with after ``iterations`` on the engine at ``prefix``.

    Every engine trains from the same data folder into the same run folder: the same records under
    two folders of other names were seen to train, on one engine, to weights that differ in their
    last bits (losses equal to the six digits Caffe prints)."""
    env = {**os.environ, "CAFFE_ROOT": str(prefix), "INVOKE_TRACKING_URI": "off", "OMP_NUM_THREADS": "2"}
    env.pop("MKL_CBWR", None)
    if mkl_mode:
        env["MKL_CBWR"] = mkl_mode
    shutil.rmtree(work / "runs", ignore_errors=True)
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
        old = None
        if not args.skip_old:
            with makefiles():
                old = build(root / "old", OLD_WAY)
        new = build(root / "new")
        for name, result in (("old way (make)", old), ("caffetool's way", new)):
            if result:
                t = result[1]["timings_s"]
                print(f"{name:17} compile {t['compile']:6.1f} s (install {result[0]:.1f} s)", flush=True)
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
            for mode in ("COMPATIBLE", None):
                hashes = {name: trained_weights(root / name, root / "train", args.iters, mode)
                          for name in ("old", "new")}
                same = hashes["old"] == hashes["new"]
                print(f"LeNet {args.iters} iterations, --random-seed 1, MKL_CBWR={mode or '(unset)'}: weights "
                      f"{'byte-identical' if same else 'differ'} (old {hashes['old'][:16]}, new {hashes['new'][:16]})")


if __name__ == "__main__":
    main()
