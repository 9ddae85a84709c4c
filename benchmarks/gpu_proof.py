"""The GPU engine proven on a GPU, in one prepared payload and a few calls of at most ten minutes.

``prepare`` (here, with the caffetool venv): bundles the CUDA engine under test (``--prefix``) and
writes the payload (:mod:`gpuproof.payload`): ``common/`` (bundle, nets, the C++ tools, the
``cudaMalloc`` logger, wheels), ``data/`` (Fashion-MNIST), ``baseline/`` (with ``--baseline``: a
second engine, today's, as the files in which it differs from the first), ``gtest/`` (Caffe's
test suite of the same build, which compile-check kept) and ``pycaffe/`` (this Python 3.11 with
NumPy and protobuf, for pycaffe). It prints each folder's size and refuses
a payload that one call could not carry (64 MiB with the checkout's own files).

``run`` (on the GPU machine, its own Python and the payload's wheels): installs the engines with
caffetool's bundle installer and runs the groups named (:mod:`gpuproof.steps`), writing
``results.json`` and ``logs.tar.gz`` into ``--out`` (and, for ``gtest``, ``gtest_done.txt`` and
``gtest_failed.txt``: the next call's ``--done``).

``gtest-done``: the tests finished in earlier records (their shard logs), as a ``--done`` file.

``report``: the figures for ``benchmarks/RESULTS.md`` from one or more ``results.json`` files, the
memory estimates recomputed with this checkout's estimator (:mod:`gpuproof.report`).

Here, the two engines (the same source; the baseline without the engine patches under test):

    .venv/bin/caffetool engine.compile-check --cuda-arch 90 --cmake-arg=-DUSE_OPENCV=OFF --test-suite
    .venv/bin/python benchmarks/gpu_proof.py prepare --prefix ~/.cache/caffetool/engine-cuda-check \
        --baseline PREFIX_OF_THE_BASELINE_ENGINE
    .venv/bin/python benchmarks/gpu_proof.py gtest-done benchmarks/gpu/h200-*/ --out build/gpu-proof/gtest/done.txt

Call 1 (timeout_s 600): both engines (LeNet's training, VGG-16's ``caffe time``), PyTorch and the
memory record, carrying ``build/gpu-proof/common``, ``build/gpu-proof/data`` and
``build/gpu-proof/baseline``:

    bash benchmarks/gpu_proof_call.sh training,torch,memory 540

Call 2 (timeout_s 600): pycaffe on the GPU in the Python the payload carries, then the test suite,
continued, carrying ``build/gpu-proof/common``, ``build/gpu-proof/gtest`` and
``build/gpu-proof/pycaffe`` (the next call's ``--done`` is the ``gtest_done.txt`` this one returns):

    bash benchmarks/gpu_proof_call.sh pycaffe,gtest 540 build/gpu-proof/gtest/done.txt

Then, here:

    .venv/bin/python benchmarks/gpu_proof.py report benchmarks/gpu/h200-*/results.json
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
    from gpuproof.payload import LEVEL

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--prefix", type=Path, required=True, help="the CUDA engine under test (engine.compile-check's prefix)")
    p.add_argument("--baseline", type=Path, help="a second CUDA engine to measure beside it (carried as the files "
                   "that differ)")
    p.add_argument("--level", type=int, default=LEVEL, help=f"zstd level of the bundle (default {LEVEL})")
    p.add_argument("--out", type=Path, default=PROJECT / "build" / "gpu-proof")
    p.add_argument("--fashion", type=Path, default=Path("/usr/share/datasets/fashion-mnist"))
    p.add_argument("--gtest", type=Path, help="Caffe's test suite kept by `caffetool engine.compile-check "
                   "--test-suite` (default: its folder, when there)")
    r = sub.add_parser("run")
    r.add_argument("--payload", type=Path, required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--groups", default="training,torch,memory",
                   help="comma-separated: training, torch, time, memory, pycaffe, gtest, compare, host")
    r.add_argument("--budget", type=float, default=540, help="seconds; steps that would overrun are skipped")
    r.add_argument("--shards", type=int, default=min(12, os.cpu_count() or 1), help="test-suite processes")
    r.add_argument("--done", type=Path, help="gtest: a file of test names finished in earlier calls (one a line); "
                   "only the others run")
    d = sub.add_parser("gtest-done")
    d.add_argument("records", type=Path, nargs="+", help="record folders (logs.tar.gz, gtest_done.txt)")
    d.add_argument("--out", type=Path, required=True)
    t = sub.add_parser("report")
    t.add_argument("results", type=Path, nargs="+")
    args = parser.parse_args()
    if args.step == "prepare":
        from caffetool.engine.compile_check import suite_folder
        from gpuproof import payload

        kept = args.gtest or (suite_folder() if suite_folder().is_dir() else None)
        try:
            payload.prepare(args.prefix, args.out, args.fashion, kept, args.baseline, args.level)
        except (payload.PayloadTooLarge, payload.ForeignLibrary) as e:
            parser.exit(1, f"Error: {e}\n")
    elif args.step == "run":
        from gpuproof import steps

        groups = [g for g in args.groups.split(",") if g]
        unknown = sorted(set(groups) - set(steps.GROUPS))
        if unknown:
            parser.error(f"unknown groups {unknown}; known: {', '.join(steps.GROUPS)}")
        results = steps.run(args.payload, args.out, groups, args.budget, args.shards, args.done)
        print(json.dumps(steps.summary(results), indent=1))
    elif args.step == "gtest-done":
        from gpuproof import gtestlist

        names = gtestlist.done_in_records(args.records)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        gtestlist.write_names(args.out, names)
        print(f"{len(names)} finished tests in {len(args.records)} records -> {args.out}")
    else:
        from gpuproof import report

        report.report(args.results)


if __name__ == "__main__":
    main()
