"""The final figure of a run: every test net of its solver measured at the last iteration.

Caffe tests only at iterations that are multiples of ``test_interval``, so a run whose last
iteration is not one would report a figure from an earlier iteration (iteration 0 when
``max_iter`` is below ``test_interval``). A finished run therefore ends with ``caffe test`` on
each test net that Caffe's ``Solver::InitTestNets`` builds from the solver, in its order
(``test_net_param``, ``test_net`` files, then ``net_param`` or ``net`` for the remaining
``test_iter`` entries), each in the TEST phase merged with its ``test_state``, for its own
``test_iter`` batches, on the weights Caffe snapshotted at the last iteration. A test net that
Caffe itself tested at the last iteration keeps Caffe's figures and is not tested again.

Limits: ``caffe test`` reads the test data from its first record, while the solver's test nets
carry on where their previous test stopped, so the two agree exactly only when ``test_iter``
batches cover the test set. Without weights at the last iteration (``snapshot_after_train:
false``, HDF5 snapshots) the final figure is not measured, and the record says why. These rows
are not in ``caffe.log``: they are in the metrics files and the manifest, and ``caffe test``'s own
output is kept in ``caffe_test.log`` beside it.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from caffetool.engine import EngineInfo
from caffetool.errors import NetError, RunError
from caffetool.nets import prototxt
from caffetool.nets.testnets import TestNet, test_nets
from caffetool.runs import snapshots
from caffetool.runs.final_figures import BY_TEST, BY_TRAIN
from caffetool.runs.folder import RunFolder
from caffetool.runs.logparse import Metrics
from caffetool.train import caffe_commands


@dataclass
class Final:
    """What the end of a run measured, as the manifest records it."""

    iteration: int
    measured_by: dict[str, str] = field(default_factory=dict)  # "test0": "caffe test"
    not_measured: str | None = None
    seconds: float = 0.0

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"measured_by": self.measured_by}
        if self.not_measured:
            out["not_measured"] = self.not_measured
        return out


def final_weights(run_dir: Path, metrics: Metrics) -> Path | None:
    """The ``.caffemodel`` Caffe snapshotted at the run's last iteration, if it did."""
    for name in reversed(metrics.snapshots):
        if name.endswith(snapshots.WEIGHTS) and snapshots.iteration_of(name) == metrics.iteration:
            path = run_dir / name
            return path if path.is_file() else None
    return None


def measure(engine: EngineInfo, run_dir: Path, solver_file: Path, metrics: Metrics, gpu_flag: list[str],
            caffe_pb2: ModuleType, say: Callable[[str], None] = print) -> Final:
    """Each test net's figure at the last iteration, added to ``metrics`` where Caffe did not log one."""
    start = time.monotonic()
    final = Final(metrics.iteration)
    try:
        nets = test_nets(solver_file, run_dir, caffe_pb2)
    except NetError as e:
        final.not_measured = str(e)
        return final
    tested = {t.index for t in nets if _tested_at(metrics, t.index, final.iteration)}
    final.measured_by = {f"test{i}": BY_TRAIN for i in sorted(tested)}
    untested = [t for t in nets if t.index not in tested]
    if not untested:
        return final
    weights = final_weights(run_dir, metrics)
    if weights is None:
        final.not_measured = f"no weights were saved at iteration {final.iteration}"
        return final
    say(f"testing the weights of iteration {final.iteration}: "
        + ", ".join(f"test net #{t.index} ({t.batches} batches)" for t in untested))
    for t in untested:
        try:
            result = caffe_test_net(engine, run_dir, t, weights.absolute(), gpu_flag)
        except RunError as e:
            final.not_measured = f"test net #{t.index} ({t.source}): {e}"
            say(f"the final figure of test net #{t.index} is not measured: {e}")
            continue
        except KeyboardInterrupt:
            final.not_measured = "interrupted"
            break
        keep_log(run_dir, f"the final test of test net #{t.index} at iteration {final.iteration}", result.log)
        metrics.add_test(t.index, {"NumIters": final.iteration, "Seconds": last_seconds(metrics),
                                   "LearningRate": metrics.latest("LearningRate", -1), **result.outputs})
        final.measured_by[f"test{t.index}"] = BY_TEST
    final.seconds = round(time.monotonic() - start, 3)
    return final


def caffe_test_net(engine: EngineInfo, run_dir: Path, t: TestNet, weights: Path, gpu_flag: list[str],
                   batches: int | None = None) -> caffe_commands.TestResult:
    """``caffe test`` on one test net for ``batches`` (default: its ``test_iter``), written out with its
    state (``caffe test`` has no flag for a test net's place in a solver), from the run directory its
    relative paths resolve against."""
    try:
        with tempfile.TemporaryDirectory(prefix="caffetool-test-net-") as tmp:
            model = Path(tmp) / f"test_net{t.index}.prototxt"
            model.write_text(prototxt.to_text(t.net))
            return caffe_commands.caffe_test(engine, run_dir, weights, batches or t.batches, gpu_flag, model=model,
                                             level=t.net.state.level)
    except OSError as e:
        raise RunError(f"cannot write test net #{t.index} into {tempfile.gettempdir()}: {e.strerror}") from None


def keep_log(run_dir: Path, title: str, log: str) -> None:
    """Append a ``caffe test`` log to the run's test log, under ``title``: the evidence for
    figures that ``caffe.log`` does not hold. A log that cannot be written costs only the log."""
    try:
        with open(RunFolder(run_dir).test_log, "a") as f:
            f.write(f"==> {title} <==\n{log}\n")
    except OSError:
        pass


def last_seconds(metrics: Metrics) -> float:
    """How far into the run (``Seconds``) the log goes."""
    rows = metrics.train + [r for rows in metrics.test.values() for r in rows]
    return max((r["Seconds"] for r in rows if r.get("Seconds") is not None), default=0.0)


def _tested_at(metrics: Metrics, net: int, iteration: int) -> bool:
    return any(r["NumIters"] == iteration for r in metrics.test.get(net, []))
