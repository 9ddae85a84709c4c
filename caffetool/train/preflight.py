"""A GPU run's memory check before Caffe starts: the estimator against each GPU's memory.

Caffe discovers an out-of-memory GPU only after set-up, with a bare CUDA error; checking the
estimate first turns that into a refusal that names the largest batch that fits.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from caffetool.errors import ConfigError
from caffetool.memory import estimator, fitting

RESERVE = 400 * 2**20  # T. Dettmers' 2014 GPU advice; a run keeps its GPU's measured baseline (memory.reserve)


def gpu_memory() -> list[int]:
    """Total memory of each visible GPU in bytes (empty without nvidia-smi)."""
    if not shutil.which("nvidia-smi"):
        return []
    done = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True)
    return [int(float(x)) * 2**20 for x in done.stdout.split()] if done.returncode == 0 else []


def check(net: Any, options: estimator.Options, capacities: list[int], reserve: int = RESERVE,
          say: Callable[[str], None] = print) -> int | None:
    """Bytes the run needs per GPU; raises when the smallest of ``capacities`` cannot hold it. Layers
    the estimator does not model make the figure a lower bound, which is said."""
    if not capacities:
        return None
    options = replace(options, mode="gpu")
    estimate = estimator.estimate(net, options)
    need = estimate.total
    if estimate.lower_bound:
        layers = ", ".join(f"{name} ({kind})" for name, kind, _ in estimate.unmodelled) or "its data files"
        say(f"memory check: at least {need / 2**30:.2f} GiB per GPU; not counted: {layers}")
    budget = min(capacities) - reserve
    if need > budget:
        best = fitting.largest_batch(net, options, budget)
        fix = (f"the largest batch that fits is {best} — use --batch-size {best} with --iter-size to keep the "
               "effective batch, or see `caffetool memory.fit`" if best >= 1 else
               "not even a batch of 1 fits; use a GPU with more memory, or --gpu cpu")
        raise ConfigError(
            f"this run needs {'at least' if estimate.lower_bound else 'about'} {need / 2**30:.2f} GiB per GPU, more than the {max(budget, 0) / 2**30:.2f} GiB "
            f"available ({min(capacities) / 2**30:.1f} GiB less {reserve / 2**20:.0f} MiB kept free); {fix}")
    return need
