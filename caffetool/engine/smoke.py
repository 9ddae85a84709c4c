"""A tiny real training run that proves an engine works end to end.

The net learns to put random Gaussian inputs in class 0: no data set is needed, yet the real
``caffe train`` binary parses prototxt, builds the net, runs SGD and reports a falling loss.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from caffetool.engine.locate import EngineInfo, caffe_env
from caffetool.errors import EngineError

NET = """name: "smoke"
layer { name: "data" type: "DummyData" top: "data" top: "label"
  dummy_data_param {
    shape { dim: 16 dim: 8 } shape { dim: 16 }
    data_filler { type: "gaussian" std: 1 } data_filler { type: "constant" value: 0 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param { num_output: 2 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""

SOLVER = """net: "{net}"
base_lr: 0.1
lr_policy: "fixed"
momentum: 0.9
display: 1
max_iter: {iterations}
snapshot_after_train: false
solver_mode: CPU
random_seed: 1
"""

LOSS = re.compile(r"Iteration (\d+).*?, loss = ([-+0-9.eEnaif]+)")


@dataclass
class SmokeResult:
    iterations: int
    seconds: float
    first_loss: float
    last_loss: float


def tiny_training(engine: EngineInfo, iterations: int = 50) -> SmokeResult:
    """Run ``caffe train`` on the tiny net; raise unless the loss fell."""
    with tempfile.TemporaryDirectory(prefix="caffetool-smoke-") as tmp:
        net, solver = Path(tmp) / "net.prototxt", Path(tmp) / "solver.prototxt"
        net.write_text(NET)
        solver.write_text(SOLVER.format(net=net, iterations=iterations))
        start = time.monotonic()
        done = subprocess.run(
            [str(engine.caffe), "train", f"-solver={solver}"],
            capture_output=True, text=True, cwd=tmp, env=caffe_env(),
        )
        seconds = time.monotonic() - start
    losses = [(int(i), float(v)) for i, v in LOSS.findall(done.stderr)]
    if done.returncode != 0 or len(losses) < 2:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise EngineError(f"`caffe train` on the smoke net failed (exit {done.returncode}):\n{tail}")
    if not losses[-1][1] < losses[0][1]:
        raise EngineError(f"the smoke net did not learn: loss {losses[0][1]} -> {losses[-1][1]}")
    return SmokeResult(losses[-1][0], seconds, losses[0][1], losses[-1][1])
