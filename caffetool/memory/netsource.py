"""The net a memory command works on: a declared model's train/test net, a prototxt file, or the train
net of a solver (``--solver``: a user's own Caffe project, read as ``caffe train -solver`` reads it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from caffetool.choices import count
from caffetool.engine import EngineInfo, locate
from caffetool.errors import ConfigError
from caffetool.nets import builders, declaration, prototxt


@dataclass
class NetSource:
    net: object  # caffe_pb2.NetParameter
    text: str | None
    name: str
    input_shape: tuple[int, int, int] | None
    num_classes: int
    origin: str = "net"  # where errors point: the prototxt's path
    solver_type: str | None = None  # from a solver file: its type and iter_size, which flags override
    iter_size: int | None = None
    test_nets: tuple[Any, ...] | None = None  # from a solver file: its test nets with their states
    project: Any = None  # from a solver file: the caffetool.nets.project.Project it was read from


def load(caffe: Any, model: str | None, net_file: str | None, input_shape: str | None = None,
         models_dir: str | Path | None = None, batch: int | None = None, test_batch: int | None = None,
         solver_file: str | None = None, engine: EngineInfo | None = None) -> NetSource:
    """The net named by ``--model``, read from ``--net`` or trained by ``--solver`` (which needs the
    ``engine`` to upgrade old formats), with its input shape and class count."""
    if sum(map(bool, (model, net_file, solver_file))) != 1:
        raise ConfigError("give exactly one of --model NAME, --net FILE or --solver FILE")
    shape = _shape(input_shape)
    if solver_file:
        return _from_solver(caffe, engine, solver_file, shape, batch, test_batch)
    if model:
        m = declaration.get(model, models_dir)
        s = builders.shape_of(m)
        tb = test_batch or m.batch[1]
        net = builders.train_val(caffe, m, s, builders.DataSource("train_lmdb", "test_lmdb"), batch or m.batch[0], tb)
        return NetSource(net, None, m.name, shape or (s.channels, s.size, s.size), s.num_classes, f"model {m.name}")
    path = Path(net_file)
    net = prototxt.read(path, caffe.proto.caffe_pb2.NetParameter())
    return NetSource(net, path.read_text(), path.stem, shape, 0, str(path))


def _from_solver(caffe: Any, engine: EngineInfo | None, solver_file: str, shape: tuple[int, int, int] | None,
                 batch: int | None, test_batch: int | None) -> NetSource:
    """The train net of ``solver_file``, its paths resolved from here; the input shape is the first
    Data layer's record unless ``--input-shape`` gives it."""
    from caffetool.nets import project  # noqa: PLC0415 - only --solver reads a project

    pb2 = caffe.proto.caffe_pb2
    loaded = project.load(solver_file, engine or locate(probe=False), pb2)
    project.set_batches(loaded, batch, test_batch, pb2)
    s = loaded.solver
    tests = tuple(project.with_test_state(net, s, i, pb2) for i, net in enumerate(loaded.test_nets))
    return NetSource(loaded.train_net, None, loaded.source.stem, shape or project.data_shape(loaded.train_net, pb2), 0,
                     str(loaded.source), s.type or "SGD", s.iter_size, tests, loaded)


def _shape(text: str | None) -> tuple[int, int, int] | None:
    """``--input-shape`` "C,H,W" (or "CxHxW") as three counts."""
    if not text:
        return None
    parts = text.replace("x", ",").split(",")
    if len(parts) != 3:
        raise ConfigError(f"--input-shape {text!r}: write it as C,H,W (e.g. 3,227,227)")
    c, h, w = (count(part, "--input-shape") for part in parts)
    return c, h, w
