"""A run's snapshots: which exist, for which iteration, and which can be trusted.

Caffe writes a snapshot as two files under the solver's ``snapshot_prefix``
(``snapshots/<model>_iter_<N>.caffemodel``, then ``<model>_iter_<N>.solverstate`` naming the
former), each with a plain write that is not atomic: a kill or a full disk in the middle leaves
part of a file that looks like a snapshot, and an empty ``.solverstate`` parses as a state with no
history at all (Caffe then stops with "Incorrect length of history blobs"). So a snapshot is
*complete* only when both files parse as the messages they claim to be, the state is for the
iteration its name says and names these weights, and it holds a history blob of the right shape
for each learnable parameter (two per parameter for Adam and AdaDelta) — the checks Caffe makes
when it resumes, made before it is started.

Checking costs a read and parse of both files: milliseconds for LeNet, seconds for a 500 MB
VGG-16. Without the engine's ``caffe_pb2`` (:func:`newest_weights` for the demo), a
``.caffemodel`` counts as complete when its ``.solverstate`` exists, since Caffe writes the state
only after the weights. Limits: HDF5 snapshots (``snapshot_format: HDF5``, ``*.h5``) are not
listed; caffetool's solvers never ask for them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from google.protobuf.message import DecodeError

from caffetool.runs.folder import NAMES

FOLDER = NAMES["snapshots"]

WEIGHTS = ".caffemodel"
STATE = ".solverstate"
ITERATION = re.compile(r"_iter_(\d+)$")
# Solvers that keep a second history blob per parameter (AdamPreSolve, AdaDeltaPreSolve).
HISTORY_PER_PARAM = {"Adam": 2, "AdaDelta": 2}


@dataclass(frozen=True)
class Snapshot:
    """The files Caffe wrote for one iteration; either may be missing."""

    iteration: int
    weights: Path | None = None
    state: Path | None = None

    @property
    def name(self) -> str:
        """The snapshot as a user sees it: the state's file name, else the weights'."""
        return (self.state or self.weights or Path(f"iteration {self.iteration}")).name


def iteration_of(path: str | Path) -> int | None:
    """The iteration in a snapshot file's name (``lenet_iter_200.caffemodel`` → 200), else ``None``."""
    name = Path(path)
    if name.suffix not in (WEIGHTS, STATE):
        return None
    match = ITERATION.search(name.stem)
    return int(match.group(1)) if match else None


def listing(run_dir: Path) -> list[Snapshot]:
    """Every snapshot of ``run_dir``, oldest first, whether complete or not."""
    found: dict[int, dict[str, Path]] = {}
    folder = Path(run_dir) / FOLDER
    for path in folder.iterdir() if folder.is_dir() else ():
        if (iteration := iteration_of(path)) is not None and path.is_file():
            found.setdefault(iteration, {})[path.suffix] = path
    return [Snapshot(i, files.get(WEIGHTS), files.get(STATE)) for i, files in sorted(found.items())]


def newest_weights(run_dir: Path, caffe_pb2: ModuleType | None = None) -> Path | None:
    """The newest ``.caffemodel`` that is complete (see the module's description), or ``None``."""
    for snapshot in reversed(listing(run_dir)):
        if snapshot.weights is None:
            continue
        if caffe_pb2 is None:
            if snapshot.state is not None:
                return snapshot.weights
        elif _parsed(snapshot.weights, caffe_pb2.NetParameter()) is not None:
            return snapshot.weights
    return None


def newest_complete(run_dir: Path, caffe_pb2: ModuleType, solver_type: str = "SGD",
                    skipped: Callable[[Snapshot, str], None] | None = None) -> Snapshot | None:
    """The newest snapshot Caffe can resume from; ``skipped(snapshot, why)`` hears of newer ones that are not."""
    for snapshot in reversed(listing(run_dir)):
        why = problem(run_dir, snapshot, caffe_pb2, solver_type)
        if why is None:
            return snapshot
        if skipped is not None:
            skipped(snapshot, why)
    return None


def problem(run_dir: Path, snapshot: Snapshot, caffe_pb2: ModuleType, solver_type: str = "SGD") -> str | None:
    """Why Caffe could not resume from ``snapshot``, or ``None`` when it is complete."""
    if snapshot.state is None:
        return f"it has no {STATE}"
    state = _parsed(snapshot.state, caffe_pb2.SolverState())
    if state is None:
        return f"{snapshot.state.name} is cut short or damaged"
    if state.iter != snapshot.iteration:
        return f"{snapshot.state.name} is for iteration {state.iter}"
    weights = Path(run_dir) / state.learned_net if state.learned_net else None
    if weights is None or snapshot.weights is None or not weights.is_file() or \
            weights.resolve() != snapshot.weights.resolve():
        return f"its weights {state.learned_net or snapshot.iteration} are missing"
    net = _parsed(weights, caffe_pb2.NetParameter())
    if net is None:
        return f"{weights.name} is cut short or damaged"
    params = learnable_shapes(net)
    expected = params * HISTORY_PER_PARAM.get(solver_type, 1)
    history = [_shape(blob) for blob in state.history]
    if history != expected:
        return (f"{snapshot.state.name} holds {len(history)} history blobs where {solver_type} keeps "
                f"{len(expected)} for this net: it is cut short")
    return None


def learnable_shapes(net: Any) -> list[list[int]]:
    """Shapes of a ``NetParameter``'s learnable parameters in Caffe's order; a shared one counts once."""
    shared: set[str] = set()
    shapes = []
    for layer in net.layer:
        for index, blob in enumerate(layer.blobs):
            name = layer.param[index].name if index < len(layer.param) else ""
            if name:
                if name in shared:
                    continue
                shared.add(name)
            shapes.append(_shape(blob))
    return shapes


def _shape(blob: Any) -> list[int]:
    """A ``BlobProto``'s shape, from ``shape`` or the legacy four dimensions."""
    if blob.HasField("shape"):
        return list(blob.shape.dim)
    return [blob.num, blob.channels, blob.height, blob.width]


def _parsed(path: Path, message: Any) -> Any | None:
    """``message`` filled from the binary protobuf at ``path``; ``None`` if unreadable or cut short."""
    try:
        message.ParseFromString(Path(path).read_bytes())
    except (OSError, DecodeError):
        return None
    return message
