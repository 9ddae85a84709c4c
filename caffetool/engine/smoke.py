"""A tiny real training run that proves an engine works end to end.

The net learns to put random Gaussian inputs in class 0: no data set is needed, yet the real
``caffe train`` binary parses prototxt, builds the net, runs SGD and reports a falling loss.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from caffetool import glog
from caffetool.engine.locate import EngineInfo, caffe_env
from caffetool.errors import EngineError
from caffetool.proc import last_lines, run_checked

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
        done = run_checked([engine.caffe, "train", f"-solver={solver}"], what="`caffe train` on the smoke net",
                           error=EngineError, cwd=tmp, env=caffe_env(), lines=5)
        seconds = time.monotonic() - start
    losses = glog.losses(done.stderr)
    if len(losses) < 2:
        raise EngineError(f"`caffe train` on the smoke net logged fewer than two losses:\n{last_lines(done.stderr, 5)}")
    if not losses[-1][1] < losses[0][1]:
        raise EngineError(f"the smoke net did not learn: loss {losses[0][1]} -> {losses[-1][1]}")
    return SmokeResult(losses[-1][0], seconds, losses[0][1], losses[-1][1])
