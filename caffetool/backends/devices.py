"""Which devices a run uses: the ``-gpu`` flag, decided and refused up front.

``--gpu`` takes ``auto`` (GPUs when the engine has CUDA and some are visible, else the CPU),
``cpu``, ``all`` or a list of ids (``0,1``). Asking for GPUs from a CPU-only engine, or for several
GPUs from an engine without NCCL (Caffe would die with "Multi-GPU execution not available"), is
refused before anything runs, with the reason and the fix, and so is a GPU the engine carries no
kernels for (its compute capability against the engine's recorded device code). The visible GPUs are those
``locate(..., gpus=True)`` lists into ``EngineInfo.gpus``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from caffetool.engine import EngineInfo, cudaarch
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
    notes = runs_on_cards(engine, ids)
    flag = ["-gpu", "all" if request == "all" else ",".join(map(str, ids))]
    names = sorted({gpus[i].split(":", 1)[-1].split("(UUID")[0].strip() for i in ids})
    return Devices(flag, f"GPU {','.join(map(str, ids))} ({len(ids)} x {', '.join(names)})", True,
                   notice="; ".join(notes) or None)


def runs_on_cards(engine: EngineInfo, ids: list[int]) -> list[str]:
    """Refuse GPUs the engine has no kernels for (:func:`caffetool.engine.cudaarch.check_card`),
    naming the install that fixes it; notes for cards that run only through PTX compiled at start."""
    code = cudaarch.recorded(engine.prefix, engine.manifest)
    options = engine.manifest.get("options", {})
    flags = " ".join(["--cuda", *(["--cudnn"] if options.get("use_cudnn") else []),
                      *(["--nccl"] if options.get("use_nccl") else [])])
    listed = " ".join(code.cubins)
    fix = f'`caffetool engine.install {flags} --cuda-arch "{listed} {{arch}}" --force`'
    return cudaarch.check_card(code, ids, f"the engine at {engine.prefix}", fix)


@dataclass(frozen=True)
class PycaffeDevice:
    """Where a pycaffe net runs (``evaluate --gpu``, ``demo.serve --gpu``): the CPU or one GPU.

    pycaffe's mode and device belong to the calling thread (Caffe's context is thread-local), and a
    server answers from a pool of threads, so :meth:`activate` is called in the thread that runs
    the net, before it builds the net and before every pass; on a GPU it costs a few microseconds.
    """

    gpu: int | None
    label: str

    @property
    def flag(self) -> list[str]:
        """The same device for a ``caffe`` command (``caffe test`` beside ``evaluate``)."""
        return [] if self.gpu is None else ["-gpu", str(self.gpu)]

    def activate(self, caffe: Any) -> None:
        if self.gpu is None:
            caffe.set_mode_cpu()
        else:
            caffe.set_mode_gpu()
            caffe.set_device(self.gpu)


CPU = PycaffeDevice(None, "CPU")


def for_pycaffe(engine: EngineInfo, request: str | None = "cpu") -> PycaffeDevice:
    """``--gpu cpu`` (default), ``auto`` (GPU 0 when the engine has CUDA and one is visible) or one
    GPU id, refused up front where the engine or the machine cannot honour it."""
    request = (request or "cpu").strip().lower()
    if request == "cpu" or (request == "auto" and (engine.cpu_only or not engine.gpus)):
        return CPU
    if request == "auto":
        request = "0"
    if not request.isdigit():
        raise ConfigError(f"--gpu {request!r}: pycaffe runs a net on one device; use cpu, auto or one GPU id "
                          "such as 0")
    gpu = int(request)
    if engine.cpu_only:
        raise ConfigError(f"--gpu {gpu} asks for a GPU, but the engine at {engine.prefix} was built CPU-only; "
                          "rebuild it with `caffetool engine.install --cuda --force` on a machine with CUDA, "
                          "or use --gpu cpu")
    if gpu >= len(engine.gpus):
        raise ConfigError(f"--gpu {gpu}: {len(engine.gpus)} GPU(s) visible ({', '.join(engine.gpus) or 'none'})")
    runs_on_cards(engine, [gpu])
    name = engine.gpus[gpu].split(":", 1)[-1].split("(UUID")[0].strip()
    return PycaffeDevice(gpu, f"GPU {gpu} ({name})")
