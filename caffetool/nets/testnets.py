"""A solver's test nets as Caffe builds them: which nets, in what order, in which state, for how
many batches.

``Solver::InitTestNets`` takes ``test_net_param`` entries first, then ``test_net`` files, then
``net_param`` or ``net`` for the ``test_iter`` entries that remain, each in the TEST phase merged with
its ``test_state``. The final test of a run, ``train.test``, ``evaluate`` and tracking's batch sizes
all need the same list.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from caffetool.nets import project, prototxt


@dataclass(frozen=True)
class TestNet:
    index: int
    net: Any  # a NetParameter whose state is the one Caffe gives this test net
    batches: int
    source: str  # where the solver defines it, for messages


def test_nets(solver_file: Path, cwd: Path, caffe_pb2: ModuleType) -> list[TestNet]:
    """The test nets of ``solver_file`` as Caffe builds them; relative net files resolve against ``cwd``."""
    solver = prototxt.read(solver_file, caffe_pb2.SolverParameter())
    nets = [(f"test_net_param #{i}", net) for i, net in enumerate(solver.test_net_param)]
    nets += [(f"test_net {f}", prototxt.read(cwd / f, caffe_pb2.NetParameter())) for f in solver.test_net]
    if solver.HasField("net_param"):
        nets += [("net_param", solver.net_param)] * (len(solver.test_iter) - len(nets))
    elif solver.net:
        generic = prototxt.read(cwd / solver.net, caffe_pb2.NetParameter())
        nets += [(f"net {solver.net}", generic)] * (len(solver.test_iter) - len(nets))
    return [TestNet(i, project.with_test_state(net, solver, i, caffe_pb2), batches, source)
            for i, ((source, net), batches) in enumerate(zip(nets, solver.test_iter))]
