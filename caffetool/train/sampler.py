"""Resource samples taken every second while Caffe trains.

On the CPU: the process's CPU percentage and resident memory (psutil). With NVIDIA GPUs and
``nvidia-ml-py`` installed: utilisation and memory of each GPU (NVML). Summaries are kept for the
manifest; each reading also goes to ``on_sample`` (the run's TensorBoard events), from this thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class UsageSampler(threading.Thread):
    def __init__(self, pid: int, interval: float = 1.0,
                 on_sample: Callable[[dict[str, float]], None] | None = None) -> None:
        import psutil  # noqa: PLC0415 - 30 ms at every command's start otherwise

        super().__init__(daemon=True)
        self.psutil = psutil
        self.interval = interval
        self.on_sample = on_sample
        self.stopped = threading.Event()
        self.cpu: list[float] = []
        self.rss: list[int] = []
        self.gpu: dict[int, dict[str, list[float]]] = {}
        self._nvml = _nvml_handles()
        try:
            self.process = psutil.Process(pid)
            self.process.cpu_percent(None)  # prime: the first call always returns 0
        except psutil.Error:  # Caffe already ended (a refusal at start): a run without samples
            self.stopped.set()

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            try:
                self.cpu.append(self.process.cpu_percent(None))
                self.rss.append(self.process.memory_info().rss)
            except self.psutil.Error:
                return
            reading = {"cpu_percent": self.cpu[-1], "rss_mb": self.rss[-1] / 2**20}
            for index, handle in self._nvml:
                util, mem = _nvml_sample(handle)
                entry = self.gpu.setdefault(index, {"util": [], "mem": []})
                entry["util"].append(util)
                entry["mem"].append(mem)
                reading |= {f"gpu{index}_util_percent": util, f"gpu{index}_memory_mb": mem / 2**20}
            if self.on_sample is not None:
                self.on_sample(reading)

    def stop(self) -> dict:
        self.stopped.set()
        self.join(5)
        summary: dict = {"samples": len(self.cpu), "interval_s": self.interval}
        if self.cpu:
            summary["cpu_percent_mean"] = round(sum(self.cpu) / len(self.cpu), 1)
            summary["cpu_percent_max"] = round(max(self.cpu), 1)
            summary["rss_peak_mb"] = round(max(self.rss) / 2**20, 1)
        summary["gpus"] = {
            str(i): {"util_percent_mean": round(sum(g["util"]) / len(g["util"]), 1),
                     "memory_peak_mb": round(max(g["mem"]) / 2**20, 1)}
            for i, g in self.gpu.items() if g["util"]
        }
        return summary


def _nvml_handles() -> list:
    try:
        import pynvml  # noqa: PLC0415 - optional: nvidia-ml-py, only useful with NVIDIA GPUs

        pynvml.nvmlInit()
        return [(i, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception:  # no package, no driver, no GPU: CPU sampling only
        return []


def _nvml_sample(handle: Any) -> tuple[float, float]:
    import pynvml  # noqa: PLC0415

    return (float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu),
            float(pynvml.nvmlDeviceGetMemoryInfo(handle).used))
