"""The net a memory command works on: a declared model's train/test net, or a prototxt file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from caffetool.choices import count
from caffetool.errors import ConfigError
from caffetool.nets import build, model as models, prototxt


@dataclass
class NetSource:
    net: object  # caffe_pb2.NetParameter
    text: str | None
    name: str
    input_shape: tuple[int, int, int] | None
    num_classes: int
    origin: str = "net"  # where errors point: the prototxt's path


def load(caffe: Any, model: str | None, net_file: str | None, input_shape: str | None = None,
         models_dir: str | Path | None = None, batch: int | None = None, test_batch: int | None = None) -> NetSource:
    """The net named by ``--model`` or read from ``--net``, with its input shape and class count."""
    if bool(model) == bool(net_file):
        raise ConfigError("give exactly one of --model NAME or --net FILE")
    shape = _shape(input_shape)
    if model:
        m = models.get(model, models_dir)
        s = build.shape_of(m)
        tb = test_batch or m.batch[1]
        net = build.train_val(caffe, m, s, build.DataSource("train_lmdb", "test_lmdb"), batch or m.batch[0], tb)
        return NetSource(net, None, m.name, shape or (s.channels, s.size, s.size), s.num_classes, f"model {m.name}")
    path = Path(net_file)
    net = prototxt.read(path, caffe.proto.caffe_pb2.NetParameter())
    return NetSource(net, path.read_text(), path.stem, shape, 0, str(path))


def _shape(text: str | None) -> tuple[int, int, int] | None:
    """``--input-shape`` "C,H,W" (or "CxHxW") as three counts."""
    if not text:
        return None
    parts = text.replace("x", ",").split(",")
    if len(parts) != 3:
        raise ConfigError(f"--input-shape {text!r}: write it as C,H,W (e.g. 3,227,227)")
    c, h, w = (count(part, "--input-shape") for part in parts)
    return c, h, w
