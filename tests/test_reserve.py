"""What a GPU run keeps free: the device's measured baseline, measured once and cached.

No GPU exists on these machines: ``StandInGpu`` stands in for NVML's device (its name, the driver)
and ``baseline_of`` for the measurement that would run ``caffe train`` on it — the only mocks here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from caffetool.memory import gpumeasure, reserve

from .test_gpumeasure import HAS_DRIVER, StandInNvml


class StandInGpu(StandInNvml):
    def __init__(self) -> None:
        super().__init__([0])
        self.shut = 0

    def nvmlDeviceGetName(self, handle: int) -> str:  # noqa: N802  (NVML's names)
        return "NVIDIA H100 80GB HBM3"

    def nvmlSystemGetDriverVersion(self) -> bytes:  # noqa: N802
        return b"580.159.04"

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shut += 1


@pytest.mark.skipif(HAS_DRIVER, reason="this machine has an NVIDIA driver")
def test_without_nvml_the_rule_of_thumb_stands_and_says_so(engine):
    said: list[str] = []
    assert reserve.reserve(engine, 0, said.append) == reserve.FALLBACK == 400 * 2**20
    assert said == ["memory check: memory.measure --mode gpu needs an NVIDIA GPU and its driver; NVML says: "
                    "NVML Shared Library Not Found; keeping 400 MiB free for Caffe's context"]


def test_the_baseline_is_measured_once_per_card_driver_and_engine(engine, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    gpu = StandInGpu()
    monkeypatch.setattr(gpumeasure, "nvml", lambda: gpu)
    measured: list[Path] = []

    def baseline_of(caffe: Path, folder: Path, index: int, binding, env) -> int:
        measured.append(caffe)
        assert (index, binding, env["GLOG_logtostderr"]) == (0, gpu, "1")
        return 632_094_720

    monkeypatch.setattr(gpumeasure, "baseline_of", baseline_of)
    said: list[str] = []
    assert reserve.reserve(engine, 0, said.append) == 632_094_720
    assert reserve.reserve(engine, 0, said.append) == 632_094_720  # from the cache
    assert measured == [engine.prefix / "bin" / "caffe"] and gpu.shut == 2
    assert said == [f"memory check: Caffe's context and libraries take 603 MiB on GPU 0 (measured once, kept in "
                    f"{reserve.cache_file()})"]
    key = f"NVIDIA H100 80GB HBM3|580.159.04|{engine.prefix}|{engine.manifest['built_at']}"
    assert json.loads(reserve.cache_file().read_text()) == {key: 632_094_720}


def test_a_failed_measurement_keeps_the_rule_of_thumb(engine, tmp_path, monkeypatch):
    from caffetool.errors import RunError

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(gpumeasure, "nvml", StandInGpu)

    def busy(*args) -> int:
        raise RunError("GPU 0 is in use by process(es) 4242; measure on an idle GPU or pick another with --gpu")

    monkeypatch.setattr(gpumeasure, "baseline_of", busy)
    said: list[str] = []
    assert reserve.reserve(engine, 0, said.append) == reserve.FALLBACK
    assert said == ["memory check: GPU 0's baseline could not be measured (GPU 0 is in use by process(es) 4242; "
                    "measure on an idle GPU or pick another with --gpu); keeping 400 MiB free"]
    assert not reserve.cache_file().exists()
