"""Which devices a run uses: the ``-gpu`` flag, decided and refused up front.

``--gpu`` takes ``auto`` (GPUs when the engine has CUDA and some are visible, else the CPU),
``cpu``, ``all`` or a list of ids (``0,1``). Asking for GPUs from a CPU-only engine, or for several
GPUs from an engine without NCCL (Caffe would die with "Multi-GPU execution not available"), is
refused before anything runs, with the reason and the fix. The visible GPUs are those
``locate(..., gpus=True)`` lists into ``EngineInfo.gpus``.
"""

from __future__ import annotations

from dataclasses import dataclass

from caffetool.engine import EngineInfo
from caffetool.errors import ConfigError


@dataclass(frozen=True)
class Devices:
    flag: list[str]  # extra caffe arguments: [] or ["-gpu", "all"]
    label: str  # for reports: "CPU" or "GPU 0,1 (2 x Tesla M40)"
    gpu: bool
    notice: str | None = None


def choose(engine: EngineInfo, request: str = "auto") -> Devices:
    request = (request or "auto").strip().lower()
    gpus = engine.gpus
    cuda = not engine.cpu_only
    nccl = bool(engine.manifest.get("options", {}).get("use_nccl"))
    if request == "cpu":
        return Devices([], "CPU", False)
    if request == "auto":
        if cuda and gpus:
            request = "all" if nccl or len(gpus) == 1 else "0"
        else:
            why = "the engine was built CPU-only" if not cuda else "no GPU is visible"
            return Devices([], "CPU", False, notice=f"training on the CPU: {why}")
    if request == "all":
        ids = list(range(len(gpus)))
    else:
        try:
            ids = [int(x) for x in request.split(",") if x.strip()]
        except ValueError:
            raise ConfigError(f"--gpu {request!r}: use auto, cpu, all or GPU ids like 0,1") from None
    if not cuda:
        raise ConfigError(f"--gpu {request} asks for GPUs, but the engine at {engine.prefix} was built "
                          "CPU-only; rebuild it with `caffetool engine.install --cuda --nccl --force` on a "
                          "machine with CUDA, or use --gpu cpu")
    if not gpus or any(i >= len(gpus) for i in ids) or not ids:
        raise ConfigError(f"--gpu {request}: {len(gpus)} GPU(s) visible ({', '.join(gpus) or 'none'})")
    if len(ids) > 1 and not nccl:
        raise ConfigError(f"--gpu {request} needs multi-GPU training, which this engine lacks (built "
                          "without NCCL; Caffe would stop with 'Multi-GPU execution not available'); "
                          "rebuild with `caffetool engine.install --cuda --nccl --force`, or pick one GPU")
    flag = ["-gpu", "all" if request == "all" else ",".join(map(str, ids))]
    names = sorted({gpus[i].split(":", 1)[-1].split("(UUID")[0].strip() for i in ids})
    return Devices(flag, f"GPU {','.join(map(str, ids))} ({len(ids)} x {', '.join(names)})", True)
