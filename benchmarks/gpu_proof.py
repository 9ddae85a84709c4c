"""The GPU engine proven on a GPU, in one prepared payload and a few calls of at most ten minutes.

``prepare`` (here, with the caffetool venv): bundles the CUDA engine that ``caffetool
engine.compile-check --test-suite`` built, and writes the payload (:mod:`gpuproof.payload`):
``common/`` (bundle, nets, the NCCL check, wheels), ``data/`` (Fashion-MNIST) and ``gtest/``
(Caffe's test suite of the same build, which compile-check kept).

``run`` (on the GPU machine, its own Python and the payload's wheels): installs the bundle with
caffetool's bundle installer and runs the groups named (:mod:`gpuproof.steps`), writing
``results.json`` and ``logs.tar.gz`` into ``--out``.

``report``: the figures for ``benchmarks/RESULTS.md`` from one or more ``results.json`` files, the
memory estimates recomputed with this checkout's estimator (:mod:`gpuproof.report`).

    .venv/bin/caffetool engine.compile-check --cuda-arch 90 --cmake-arg=-DUSE_OPENCV=OFF --test-suite
    .venv/bin/python benchmarks/gpu_proof.py prepare --prefix ~/.cache/caffetool/engine-cuda-check
    python3 benchmarks/gpu_proof.py run --payload build/gpu-proof --out "$OUT" --groups training,time,memory
    .venv/bin/python benchmarks/gpu_proof.py report benchmarks/gpu/h100-*.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "benchmarks"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--prefix", type=Path, required=True, help="the CUDA engine to bundle (engine.compile-check's prefix)")
    p.add_argument("--out", type=Path, default=PROJECT / "build" / "gpu-proof")
    p.add_argument("--fashion", type=Path, default=Path("/usr/share/datasets/fashion-mnist"))
    p.add_argument("--gtest", type=Path, help="Caffe's test suite kept by `caffetool engine.compile-check "
                   "--test-suite` (default: its folder, when there)")
    r = sub.add_parser("run")
    r.add_argument("--payload", type=Path, required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--groups", default="training,time,memory", help="comma-separated: training, time, memory, gtest")
    r.add_argument("--budget", type=float, default=540, help="seconds; steps that would overrun are skipped")
    r.add_argument("--shards", type=int, default=min(12, os.cpu_count() or 1), help="test-suite processes")
    t = sub.add_parser("report")
    t.add_argument("results", type=Path, nargs="+")
    args = parser.parse_args()
    if args.step == "prepare":
        from caffetool.engine.compile_check import suite_folder
        from gpuproof import payload

        kept = args.gtest or (suite_folder() if suite_folder().is_dir() else None)
        payload.prepare(args.prefix, args.out, args.fashion, kept)
    elif args.step == "run":
        from gpuproof import steps

        groups = [g for g in args.groups.split(",") if g]
        unknown = sorted(set(groups) - set(steps.GROUPS))
        if unknown:
            parser.error(f"unknown groups {unknown}; known: {', '.join(steps.GROUPS)}")
        results = steps.run(args.payload, args.out, groups, args.budget, args.shards)
        print(json.dumps(steps.summary(results), indent=1))
    else:
        from gpuproof import report

        report.report(args.results)


if __name__ == "__main__":
    main()
