"""What a GPU run keeps free besides its net: the device's own baseline, measured once per device.

Every Caffe process on a GPU pays for the CUDA context, the loaded kernels and cuBLAS before its
net does anything: 602.8 MiB on an H100 with CUDA 13 (benchmarks/RESULTS.md), more than the 400 MiB
of T. Dettmers' 2014 rule of thumb that the pre-flight kept. It depends on the card, the driver and
the engine, so it is measured (:func:`caffetool.memory.gpumeasure.baseline_of`, a one-layer net's
peak over the idle card) the first time a run checks a GPU, and kept in the cache keyed by the
card's name, the driver and the engine's build. Where it cannot be measured (no NVML, the card busy
with another process, the engine failing) the rule of thumb stands, and the message says so.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from caffetool import config, fsio
from caffetool.engine import EngineInfo
from caffetool.errors import CaffetoolError
from caffetool.memory import gpumeasure

FALLBACK = 400 * 2**20  # T. Dettmers, "Deep learning with GPUs" (2014): the context and fragmentation


def cache_file() -> Path:
    return config.cache_home() / "gpu-baselines.json"


def reserve(engine: EngineInfo, gpu: int = 0, say: Callable[[str], None] = print) -> int:
    """Bytes to keep free on ``gpu`` for ``engine``: its measured baseline, else :data:`FALLBACK`."""
    try:
        binding = gpumeasure.nvml()
    except CaffetoolError as e:
        say(f"memory check: {e}; keeping {FALLBACK // 2**20} MiB free for Caffe's context")
        return FALLBACK
    try:
        handle = binding.nvmlDeviceGetHandleByIndex(gpu)
        key = "|".join((_text(binding.nvmlDeviceGetName(handle)), _text(binding.nvmlSystemGetDriverVersion()),
                        str(engine.prefix), str(engine.manifest.get("built_at"))))
        known = _read()
        if key in known:
            return int(known[key])
        with tempfile.TemporaryDirectory(prefix="caffetool-baseline-") as tmp:
            env = {**os.environ, "GLOG_logtostderr": "1"}
            used = gpumeasure.baseline_of(engine.prefix / "bin" / "caffe", Path(tmp), gpu, binding, env)
        cache_file().parent.mkdir(parents=True, exist_ok=True)
        fsio.write_atomic(cache_file(), json.dumps({**known, key: used}, indent=1) + "\n")
        say(f"memory check: Caffe's context and libraries take {used / 2**20:.0f} MiB on GPU {gpu} "
            f"(measured once, kept in {cache_file()})")
        return used
    except (CaffetoolError, binding.NVMLError, OSError) as e:
        say(f"memory check: GPU {gpu}'s baseline could not be measured ({e}); keeping {FALLBACK // 2**20} MiB free")
        return FALLBACK
    finally:
        binding.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _read() -> dict[str, int]:
    try:
        return json.loads(cache_file().read_text())
    except (OSError, ValueError):
        return {}
