"""The GPU proof's figures, from the raw ``results.json`` records of one or more calls.

Memory estimates are recomputed here with this checkout's estimator (the nets rebuilt as the
payload built them), so a record measured once serves every later version of the estimator. With
cuDNN on, the workspace is sized by the algorithms the record's engine logged (cuDNN's heuristic
picks them at run time; ``memory.estimate`` models them when no log is given, and that figure is
shown beside), under the workspace limit that engine ran with.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpuproof import nets as proof_nets

MIB = 2**20
# Published: BVLC's LeNet solver on MNIST, Caffe 1.0-rc5, CUDA 8, cuDNN 5.1, 4 x Tesla M40 (Dell EMC
# PowerEdge C4130 walkthrough).
PUBLISHED_M40 = {"seconds": 32, "accuracy": 0.9909, "gpu_util": 84}
# CAFFE_CUDNN_WORKSPACE_MB's default in the engine a record ran, by the sha256 of its patch 0006
# (the record's install.patches): 256 MiB in the patch as committed in c0db3f5 and 72937fb.
WORKSPACE_DEFAULT_MB = {"3af6ad7b46ed6f932e5718ca17622fea91483b5bccebed4dda2cfbb2a408cf84": 256.0,
                        "fc2e703d931ec6aece0f5435f31b263631b435bc760b6bdb674b3a79e3423cc7": 256.0}


def load(paths: list[Path]) -> dict:
    """Every step of the records, later files adding the steps they ran (and replacing repeats)."""
    merged: dict = {}
    for path in paths:
        merged.update(json.loads(path.read_text()))
    return merged


def workspace_limit(r: dict) -> float | None:
    """The cuDNN workspace limit (MiB) the record's engine ran with; None: the limit in force here."""
    for patch in r.get("install", {}).get("patches", []):
        if patch.get("name", "").startswith("0006-"):
            return WORKSPACE_DEFAULT_MB.get(patch.get("sha256"))
    return None


def logged_needs(entry: dict) -> dict[tuple[str, str], int]:
    """(layer, cuDNN call) -> workspace bytes, from a memory step's logged choices (steps.cudnn_choices)."""
    needs: dict[tuple[str, str], int] = {}
    for choice in entry.get("cudnn", []):
        key = (choice["layer"], choice["direction"])
        needs[key] = max(needs.get(key, 0), choice["bytes"])
    return needs


def estimates(names: list[tuple[str, int]], r: dict) -> dict[str, dict[str, int]]:
    """``memory.estimate --mode gpu`` of each memory net as built for the payload: cuDNN off
    (``caffe``), cuDNN on with the workspace as the record logged it (``cudnn``) and as modelled
    without a log (``cudnn_model``)."""
    from caffetool.engine import import_caffe, locate
    from caffetool.memory import estimator

    caffe = import_caffe(locate(probe=False))
    limit = workspace_limit(r)
    out = {}
    for name, batch in names:
        net, shape, _ = proof_nets.train_net(caffe, name, batch)
        options = estimator.Options(mode="gpu", solver="SGD", input_shape=shape, cudnn_workspace_mb=limit)
        logged = logged_needs(r.get(f"memory_{name}_cudnn", {}))
        out[name] = {"cudnn": estimator.estimate(net, replace(options, cudnn=True, cudnn_choices=logged)).total,
                     "caffe": estimator.estimate(net, options).total,
                     "cudnn_model": estimator.estimate(net, replace(options, cudnn=True)).total}
    return out


def lines(r: dict, estimated: dict[str, dict[str, int]] | None) -> list[str]:
    out = []
    dq = r.get("device_query", {})
    install = r.get("install", {})
    out.append(f"device: {dq.get('nvidia_smi')}; bundle installed in {install.get('seconds')} s; "
               f"running with {install.get('running_with')}")
    if "changed" in r.get("install_baseline", {}):
        x = r["install_baseline"]
        out.append(f"baseline engine: {len(x['changed'])} files differ ({', '.join(x['changed'][:4])}), "
                   f"patches {x.get('patches')}")
    runs = ["lenet_cudnn", "lenet_cudnn_find", "lenet_caffe"] + [
        f"lenet_{engine}_{n}" for n in (1, 2) for engine in ("baseline", "nographs", "graphs")]
    for key in runs:
        x = r.get(key, {})
        if "seconds" in x:
            line = (f"{key}: {x['seconds']} s wall, {x['iterations']} iterations ({x['iter_per_s']} iter/s at the "
                    f"end), accuracy {x['final_accuracy']}, GPU utilisation {x['gpu_util_mean']}% mean, exit {x['exit']}")
            if "training_seconds" in x:
                line += (f"; training {x['training_seconds']} s for iterations 100-{100 + x['timed_iters']} "
                         f"({x['training_iter_per_s']} iter/s)")
            if x.get("cuda_graph_lines"):
                line += f"; {x['cuda_graph_lines'][0]}"
            out.append(line)
    for key in ("torch_eager", "torch_graphs"):
        x = r.get(key, {})
        if "timed_s" in x:
            out.append(f"{key}: PyTorch {x['torch']}, training {x['timed_s']:.3f} s for {x['timed_iters']} iterations "
                       f"({x['iters_per_s']:.1f} iter/s), test accuracy {x.get('test_accuracy')}, {x['seconds']} s wall")
    for key, x in sorted(r.items()):
        if key.startswith("allocations_") and "peak_live_bytes" in x:
            out.append(f"{key}: Caffe's own cudaMalloc peak {x['peak_live_bytes'] / MIB:,.1f} MiB live in "
                       f"{len(x['sizes_at_peak'])} blocks ({x['allocations']} calls), NVML over the idle card "
                       f"{x['used'] / MIB:,.1f} MiB")
    out.append(f"published 4 x Tesla M40: {PUBLISHED_M40['seconds']} s, accuracy {PUBLISHED_M40['accuracy']}")
    if "identical" in r.get("lenet_reproducible", {}):
        x = r["lenet_reproducible"]
        out.append(f"two seeded LeNet runs (2,000 iterations): weights identical {x['identical']} ({x['sha256']})")
    if r.get("nccl_one_gpu", {}).get("summary"):
        out.append(f"nccl_one_gpu: {r['nccl_one_gpu']['summary'][-1]} (exit {r['nccl_one_gpu']['exit']})")
    for key, x in sorted(r.items()):
        if key.startswith("time_") and isinstance(x, dict) and x.get("net_ms") is not None:
            out.append(f"{key}: {x['net_ms']} ms forward+backward without the data layer (batch {x['batch']})")
    if "used" in r.get("memory_baseline", {}):
        base = r["memory_baseline"]["used"]
        out.append(f"memory baseline (context, cuBLAS): {base / MIB:,.1f} MiB")
        for key, x in sorted(r.items()):
            if key.startswith("memory_") and key != "memory_baseline" and "used" in x:
                out.append(f"{key}: +{(x['used'] - base) / MIB:,.1f} MiB over the baseline, "
                           f"cuDNN workspace {x.get('workspace', 0) / MIB:,.1f} MiB")
        for name, figures in (estimated or {}).items():
            for variant in ("cudnn", "caffe"):
                x = r.get(f"memory_{name}_{variant}", {})
                if "used" in x:
                    measured = x["used"] - base
                    line = (f"memory {name} b{x['batch']} {variant}: estimate {figures[variant] / MIB:,.1f} MiB, "
                            f"measured {measured / MIB:,.1f} MiB, error {_error(figures[variant], measured)}")
                    if variant == "cudnn":
                        line += (f" (workspace as logged; modelled: {figures['cudnn_model'] / MIB:,.1f} MiB, "
                                 f"{_error(figures['cudnn_model'], measured)})")
                    out.append(line)
    suite = r.get("caffe_test_suite", {})
    if "tests_run" in suite:
        finished = (f"{suite['tests_ok']} of {suite['tests_run']} passed" if suite["tests_run"] else
                    f"{suite['tests_ok']} passed before the time limit, no shard finished")
        out.append(f"Caffe's test suite: {finished} in {suite['seconds']} s ({suite['shards']} shards"
                   f"{', MPS' if suite.get('mps') else ''}); failed {suite['failed']}; shards stopped in "
                   f"{suite.get('aborted')}")
        rerun = r.get("caffe_test_suite_rerun", {})
        if rerun:
            out.append(f"  alone again: {rerun.get('tests_ok')} passed, still failing {rerun.get('still_failed')}")
    for key, x in r.items():
        if isinstance(x, dict) and isinstance(x.get("error"), str):
            out.append(f"{key}: failed: {x['error'].strip().splitlines()[-1][:200]}")
        elif isinstance(x, dict) and "skipped" in x:
            out.append(f"{key}: skipped ({x['skipped']})")
    return out


def _error(estimate: int, measured: int) -> str:
    return f"{100 * (estimate - measured) / measured:+.1f}%"


def report(paths: list[Path], with_estimates: bool = True) -> None:
    r = load(paths)
    measured = [(name, batch) for name, batch in proof_nets.MEMORY_NETS if f"memory_{name}_cudnn" in r]
    estimated: Any = estimates(measured, r) if with_estimates and measured else None
    print("\n".join(lines(r, estimated)))
