"""``caffe test`` and ``caffe time`` on a run or a model, with their output parsed."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from caffetool.engine import EngineInfo
from caffetool.engine.locate import caffe_env
from caffetool.errors import CaffetoolError
from caffetool.nets.check import FATAL

# caffe test ends with the mean of each output over the batches: "accuracy = 0.8917".
TEST_RESULT = re.compile(r"\] (\S+) = ([-+.\deE]+|nan|inf)(?: \(\* [-+.\deE]+ = [-+.\deE]+ loss\))?\s*$")
LOSS_LINE = re.compile(r"\] Loss: ([-+.\deE]+)")
LAYER_TIME = re.compile(r"\]\s+(\S+)\s+(forward|backward): ([\d.]+) ms\.")
AVERAGE = re.compile(r"\] Average (Forward|Backward|Forward-Backward)(?: pass)?: ([\d.]+) ms\.")


@dataclass
class TestResult:
    outputs: dict[str, float]
    batches: int
    log: str


def caffe_test(engine: EngineInfo, run_dir: Path, weights: Path, iterations: int, gpu_flag: list[str]) -> TestResult:
    argv = [str(engine.caffe), "test", "-model=train_val.prototxt", f"-weights={weights}",
            f"-iterations={iterations}"]
    if gpu_flag:
        argv.append(f"{gpu_flag[0]}={gpu_flag[1]}")
    done = subprocess.run(argv, cwd=run_dir, capture_output=True, text=True, env=caffe_env())
    _raise_on_failure(done, "caffe test")
    lines = done.stderr.splitlines()
    at = next((i for i, line in enumerate(lines) if LOSS_LINE.search(line)), len(lines))
    outputs = {}
    for line in lines[at + 1:]:
        if m := TEST_RESULT.search(line):
            outputs[m.group(1)] = float(m.group(2))
    if m := LOSS_LINE.search(lines[at] if at < len(lines) else ""):
        outputs.setdefault("loss", float(m.group(1)))
    return TestResult(outputs, iterations, done.stderr)


@dataclass
class LayerTime:
    layer: str
    forward_ms: float
    backward_ms: float

    @property
    def total_ms(self) -> float:
        return self.forward_ms + self.backward_ms


def caffe_time(engine: EngineInfo, model_file: Path, iterations: int, gpu_flag: list[str]) -> tuple[list[LayerTime], dict]:
    argv = [str(engine.caffe), "time", f"-model={model_file.name}", f"-iterations={iterations}"]
    if gpu_flag:
        argv.append(f"{gpu_flag[0]}={gpu_flag[1]}")
    done = subprocess.run(argv, cwd=model_file.parent, capture_output=True, text=True, env=caffe_env())
    _raise_on_failure(done, "caffe time")
    layers: dict[str, LayerTime] = {}
    averages = {}
    for line in done.stderr.splitlines():
        if m := LAYER_TIME.search(line):
            entry = layers.setdefault(m.group(1), LayerTime(m.group(1), 0.0, 0.0))
            setattr(entry, f"{m.group(2)}_ms", float(m.group(3)))
        elif m := AVERAGE.search(line):
            averages[m.group(1).lower()] = float(m.group(2))
    return sorted(layers.values(), key=lambda t: t.total_ms, reverse=True), averages


def _raise_on_failure(done: subprocess.CompletedProcess, what: str) -> None:
    if done.returncode == 0:
        return
    fatal = FATAL.findall(done.stderr)
    detail = f"{fatal[-1][0]}: {fatal[-1][1]}" if fatal else "\n".join(done.stderr.strip().splitlines()[-4:])
    raise CaffetoolError(f"{what} failed (exit {done.returncode}): {detail}")
