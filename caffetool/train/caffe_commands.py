"""``caffe test`` and ``caffe time`` on a run or a model, with their output parsed.

Both tools report only through glog lines on stderr; the patterns below match the messages of
those lines (:mod:`caffetool.glog` strips the prefix). A tool that fails raises
:class:`~caffetool.errors.RunError` with Caffe's ``F`` line, or its last lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from caffetool import glog
from caffetool.engine import EngineInfo
from caffetool.engine.locate import caffe_env
from caffetool.proc import run_checked
from caffetool.runs.folder import NAMES

# caffe test ends with the mean of each output over the batches: "accuracy = 0.8917".
TEST_RESULT = re.compile(r"^(\S+) = ([-+.\deE]+|nan|inf)(?: \(\* [-+.\deE]+ = [-+.\deE]+ loss\))?$")
LOSS_LINE = re.compile(r"^Loss: ([-+.\deE]+)")
LAYER_TIME = re.compile(r"^\s*(\S+)\s+(forward|backward): ([\d.]+) ms\.")
AVERAGE = re.compile(r"^Average (Forward|Backward|Forward-Backward)(?: pass)?: ([\d.]+) ms\.")


@dataclass
class TestResult:
    outputs: dict[str, float]  # the mean of each net output, as Caffe names it
    batches: int
    log: str
    loss: float | None = None  # Caffe's "Loss:": the weighted sum of the loss outputs


def caffe_test(engine: EngineInfo, run_dir: Path, weights: Path, iterations: int, gpu_flag: list[str],
               model: str | Path = NAMES["train_val"], level: int = 0) -> TestResult:
    """``caffe test`` on ``model`` (by default the run's train_val net) in the TEST phase at ``level``:
    the mean of each output over ``iterations`` batches. Relative paths in the net (data sources,
    mean files) resolve against ``run_dir``, as they do for the ``caffe train`` run there."""
    argv = [str(engine.caffe), "test", f"-model={model}", f"-weights={weights}",
            f"-iterations={iterations}", f"-level={level}", *_device(gpu_flag)]
    done = run_checked(argv, what="caffe test", cwd=run_dir, env=caffe_env(engine.prefix))
    messages = [line.message for line in glog.lines(done.stderr)]
    # Per-batch outputs come first; the means follow the "Loss:" line.
    at = next((i for i, message in enumerate(messages) if LOSS_LINE.match(message)), len(messages))
    outputs = {}
    for message in messages[at + 1:]:
        if m := TEST_RESULT.match(message):
            outputs[m.group(1)] = float(m.group(2))
    loss = float(m.group(1)) if (m := LOSS_LINE.match(messages[at] if at < len(messages) else "")) else None
    return TestResult(outputs, iterations, done.stderr, loss)


@dataclass
class LayerTime:
    layer: str
    forward_ms: float
    backward_ms: float

    @property
    def total_ms(self) -> float:
        return self.forward_ms + self.backward_ms


def caffe_time(engine: EngineInfo, model_file: Path, iterations: int,
               gpu_flag: list[str]) -> tuple[list[LayerTime], dict[str, float]]:
    """``caffe time`` on a net: per-layer times, costliest first, and the average passes in ms."""
    argv = [str(engine.caffe), "time", f"-model={model_file.name}", f"-iterations={iterations}",
            *_device(gpu_flag)]
    done = run_checked(argv, what="caffe time", cwd=model_file.parent, env=caffe_env())
    layers: dict[str, LayerTime] = {}
    averages = {}
    for line in glog.lines(done.stderr):
        if m := LAYER_TIME.match(line.message):
            entry = layers.setdefault(m.group(1), LayerTime(m.group(1), 0.0, 0.0))
            setattr(entry, f"{m.group(2)}_ms", float(m.group(3)))
        elif m := AVERAGE.match(line.message):
            averages[m.group(1).lower()] = float(m.group(2))
    return sorted(layers.values(), key=lambda t: t.total_ms, reverse=True), averages


def _device(gpu_flag: list[str]) -> list[str]:
    """``["-gpu=0,1"]`` from a chosen device's ``["-gpu", "0,1"]``; nothing for the CPU."""
    return [f"{gpu_flag[0]}={gpu_flag[1]}"] if gpu_flag else []
