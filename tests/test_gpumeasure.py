"""GPU memory measurement: what can be run without a GPU, with NVML's GPU side stood in for.

``StandInNvml`` replaces the NVIDIA driver, which cannot exist on these machines: it is the only
mock here, and it stands for the GPU alone (the ``caffe`` binary and NVML's Python binding are real).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from caffetool.errors import ConfigError, RunError, SystemDependencyError
from caffetool.memory import gpumeasure

HAS_DRIVER = Path("/dev/nvidiactl").exists()


class StandInNvml:
    """A GPU whose memory in use follows ``levels`` (one value a read), stood in for NVML."""

    class NVMLError(Exception):
        pass

    def __init__(self, levels: list[int], busy: list[int] | None = None) -> None:
        self.levels, self.busy, self.reads = levels, busy or [], 0

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802  (NVML's names)
        if index != 0:
            raise self.NVMLError("Invalid Argument")
        return index

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:  # noqa: N802
        level = self.levels[min(self.reads, len(self.levels) - 1)]
        self.reads += 1
        return SimpleNamespace(used=level)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[SimpleNamespace]:  # noqa: N802
        return [SimpleNamespace(pid=p) for p in self.busy]


@pytest.mark.skipif(HAS_DRIVER, reason="this machine has an NVIDIA driver")
def test_without_a_driver_the_error_says_what_is_missing():
    with pytest.raises(SystemDependencyError, match="needs an NVIDIA GPU and its driver; NVML says: NVML Shared Library Not Found"):
        gpumeasure.nvml()


def test_sampler_keeps_the_peak():
    gpu = StandInNvml([100, 300, 900, 400, 200])
    sampler = gpumeasure.MemorySampler(gpu, 0, period=0.001)
    sampler.start()
    while gpu.reads < 5:
        time.sleep(0.001)
    assert sampler.finish() == 900


def test_a_busy_gpu_is_refused():
    with pytest.raises(RunError, match=r"GPU 0 is in use by process\(es\) 4242, 77; measure on an idle GPU"):
        with gpumeasure.sampling(StandInNvml([0], busy=[4242, 77]), 0):
            pass


def test_a_gpu_nvml_cannot_open_is_named():
    with pytest.raises(ConfigError, match=r"--gpu 3: NVML cannot open that GPU \(Invalid Argument\)"):
        gpumeasure.MemorySampler(StandInNvml([0]), 3)


def test_caffe_failing_on_the_gpu_gives_its_fatal_line(engine, tmp_path):
    """The real CPU-only caffe refuses ``-gpu``; the error carries how it ended and Caffe's own reason."""
    (tmp_path / "net.prototxt").write_text(gpumeasure.BASELINE_NET)
    (tmp_path / "solver.prototxt").write_text(gpumeasure.BASELINE_SOLVER)
    with pytest.raises(RunError, match=r"caffe train on GPU 0 ended \((exit|killed by) .*\): .*Cannot use GPU in CPU-only Caffe"):
        gpumeasure.peak_of_one_step(engine.caffe, tmp_path, 0, StandInNvml([5, 5]), {"GLOG_logtostderr": "1"})


@pytest.mark.skipif(HAS_DRIVER, reason="this machine has an NVIDIA driver")
def test_the_task_says_no_gpu_here_and_exits_1(engine, tmp_path):
    done = subprocess.run([str(Path(sys.executable).parent / "invoke"), "memory.measure", "--model", "lenet",
                           "--batch-size", "8", "--mode", "gpu"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1], env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 1
    assert done.stderr.strip() == ("Error: memory.measure --mode gpu needs an NVIDIA GPU and its driver; "
                                   "NVML says: NVML Shared Library Not Found")
    assert "Traceback" not in done.stdout + done.stderr
