"""Device memory the real engine uses on a GPU: NVML read while ``caffe train`` takes two steps.

The figure is NVML's memory in use on the card (``nvmlDeviceGetMemoryInfo``), sampled every
2 ms while the ``caffe`` binary builds the solver, runs the TEST net once and takes two training
steps (:data:`STEPS`: the second holds what the first update allocates), at its peak, less the same peak for a one-layer net run the same way. The difference drops
what every Caffe process pays whatever its net (the CUDA context, cuBLAS and cuRAND handles:
about 600 MiB on an H100 with CUDA 13) and keeps what the net costs — blobs, parameters, solver
history, cuDNN workspaces and handles. This is how ``benchmarks/gpu_proof.py`` measured the
figures in ``benchmarks/RESULTS.md`` (the records of 2026-11-27 and before took one step, which
can miss the solver's history: see ``benchmarks/RESULTS.md``).

Limits: memory is read for the whole card, so another process allocating on the same GPU during
the run disturbs the figure (the card must be otherwise idle; one that is not is refused); a
peak shorter than the sampling period can be missed, which only makes the figure smaller.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from caffetool.errors import ConfigError, RunError, SystemDependencyError
from caffetool.proc import exit_status, last_lines

PERIOD_S = 0.002
# Training steps a measurement takes on the GPU: the solver's history blobs are allocated lazily by
# the first update (``SGDSolver::ComputeUpdateValue`` is their first use), about a millisecond before
# a one-step run frees everything and exits, shorter than NVML's sampling period; a second step holds
# them through a whole forward and backward pass.
STEPS = 2
BASELINE_NET = (
    'layer { name: "d" type: "DummyData" top: "d" top: "l" dummy_data_param { shape { dim: 1 dim: 2 } '
    'shape { dim: 1 } } } layer { name: "ip" type: "InnerProduct" bottom: "d" top: "ip" '
    'inner_product_param { num_output: 2 } } layer { name: "loss" type: "SoftmaxWithLoss" '
    'bottom: "ip" bottom: "l" top: "loss" }')
BASELINE_SOLVER = (f'net: "net.prototxt" base_lr: 0.001 lr_policy: "fixed" momentum: 0.9 max_iter: {STEPS} '
                   'snapshot_after_train: false solver_mode: GPU')


def nvml() -> ModuleType:
    """NVML's Python binding (``nvidia-ml-py``), initialised; a clear error where no driver is."""
    try:
        import pynvml  # noqa: PLC0415  (only GPU measurements need it)
    except ImportError:
        raise SystemDependencyError("memory.measure --mode gpu needs NVML's binding: pip install nvidia-ml-py") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        raise SystemDependencyError(f"memory.measure --mode gpu needs an NVIDIA GPU and its driver; NVML says: {e}") from None
    return pynvml


class MemorySampler(threading.Thread):
    """Memory in use on one GPU, sampled every ``period`` seconds until :meth:`finish`."""

    def __init__(self, binding: ModuleType, gpu: int, period: float = PERIOD_S) -> None:
        super().__init__(daemon=True)
        self.nvml, self.period = binding, period
        try:
            self.handle = binding.nvmlDeviceGetHandleByIndex(gpu)
        except binding.NVMLError as e:
            raise ConfigError(f"--gpu {gpu}: NVML cannot open that GPU ({e})") from None
        self.samples: list[int] = []
        self._done = threading.Event()

    def used(self) -> int:
        return int(self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used)

    def busy_pids(self) -> list[int]:
        """Processes computing on this GPU now (other users would disturb the figure)."""
        return [p.pid for p in self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)]

    def run(self) -> None:
        while not self._done.is_set():
            self.samples.append(self.used())
            self._done.wait(self.period)

    def finish(self) -> int:
        """Stop sampling; the peak seen."""
        self._done.set()
        self.join()
        return max(self.samples, default=0)


@contextmanager
def sampling(binding: ModuleType, gpu: int) -> Iterator[MemorySampler]:
    """A running :class:`MemorySampler` on an idle ``gpu``, always stopped on the way out."""
    sampler = MemorySampler(binding, gpu)
    busy = sampler.busy_pids()
    if busy:
        raise RunError(f"GPU {gpu} is in use by process(es) {', '.join(map(str, busy))}; "
                       "measure on an idle GPU or pick another with --gpu")
    sampler.start()
    try:
        yield sampler
    finally:
        sampler.finish()


def peak_of_one_step(caffe: Path, folder: Path, gpu: int, binding: ModuleType, env: dict[str, str]) -> int:
    """Bytes above the idle card at the peak of ``caffe train`` on ``folder/solver.prototxt``."""
    log = folder / "caffe.log"
    with sampling(binding, gpu) as sampler:
        idle = sampler.used()
        with open(log, "wb") as out:
            done = subprocess.run([str(caffe), "train", "-solver", "solver.prototxt", "-gpu", str(gpu)],
                                  cwd=folder, stdout=subprocess.DEVNULL, stderr=out, env=env)
    if done.returncode != 0:
        why = last_lines(log.read_text(errors="replace"), 1)
        raise RunError(f"caffe train on GPU {gpu} ended ({exit_status(done.returncode)}): {why}")
    return max(sampler.samples, default=idle) - idle


def baseline_of(caffe: Path, folder: Path, gpu: int, binding: ModuleType, env: dict[str, str]) -> int:
    """What every Caffe process pays on ``gpu`` before its net: the peak of the one-layer net."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "net.prototxt").write_text(BASELINE_NET)
    (folder / "solver.prototxt").write_text(BASELINE_SOLVER)
    return peak_of_one_step(caffe, folder, gpu, binding, env)


def measure(caffe: Path, folder: Path, gpu: int = 0) -> dict[str, int]:
    """Device memory for the solver in ``folder`` (``solver.prototxt`` naming its net, GPU mode).

    Returns the peak over the idle card for the net and for the one-layer baseline, and their
    difference as ``allocated``, the figure set against the estimate.
    """
    binding = nvml()
    env = {**os.environ, "GLOG_logtostderr": "1"}
    try:
        baseline = baseline_of(caffe, folder / "baseline", gpu, binding, env)
        peak = peak_of_one_step(caffe, folder, gpu, binding, env)
    finally:
        binding.nvmlShutdown()
    return {"baseline": baseline, "peak": peak, "allocated": peak - baseline}
