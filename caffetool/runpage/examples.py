"""Example images for the demo page: records of the run's test database, served as PNG.

The database is the one Caffe tested the run on: the ``source`` of the first Data layer of the
run's net that is in the TEST phase (a relative path resolves from the run directory, where caffe
runs). Records are read with :mod:`caffetool.data.db`, decoded from their ``Datum`` and encoded as
PNG in memory; nothing is written to disk.

Limits: LMDB and LevelDB number no records, so record ``i`` is found by walking the keys in order
up to it — about a millisecond per thousand MNIST records, slow for a database of large images.
Only 8-bit images of 1 or 3 channels are shown (Caffe stores colour as BGR planes, which is what
OpenCV encodes).
"""

from __future__ import annotations

import threading
from contextlib import closing
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from types import ModuleType

import cv2
import numpy as np

from caffetool.data import datum, db
from caffetool.errors import DataError, NetError, RunError
from caffetool.nets import state, transform

MAX_COUNT = 100  # records one listing may name


class NoExamples(RunError):
    """The demo serves no run, or the run's net names no test database that can be read."""


class NoSuchExample(DataError):
    """A record number outside the test database."""


@dataclass
class ExampleSet:
    """The run's test database, read one request at a time."""

    path: Path
    caffe_pb2: ModuleType
    total: int
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def listing(self, offset: int, count: int) -> list[tuple[int, int]]:
        """(index, label) of up to ``count`` records from ``offset``."""
        with self._lock, closing(db.read(self.path, limit=offset + count)) as records:
            return [(offset + i, _label(value, self.caffe_pb2))
                    for i, (_, value) in enumerate(islice(records, offset, None))]

    def png(self, index: int) -> bytes:
        """Record ``index`` as a PNG image."""
        if not 0 <= index < self.total:
            raise NoSuchExample(f"no example {index}: the test set holds records 0 to {self.total - 1}")
        with self._lock, closing(db.read(self.path, limit=index + 1)) as records:
            key, value = next(islice(records, index, None))
        try:
            channels, height, width, pixels, _ = datum.decode_any(value, self.caffe_pb2)
        except DataError as e:
            raise DataError(f"{self.path}: record {key.decode(errors='replace')}: {e}") from None
        if channels not in (1, 3):
            raise DataError(f"{self.path} holds {channels}-channel images; examples are shown for 1 or 3 channels")
        image = np.frombuffer(pixels, np.uint8).reshape(channels, height, width).transpose(1, 2, 0)
        return cv2.imencode(".png", image)[1].tobytes()


def for_run(run_dir: Path, caffe_pb2: ModuleType) -> ExampleSet:
    """The run's test database, counted; NoExamples when the run's net names none that can be read."""
    try:
        path = database(run_dir, caffe_pb2)
    except NetError as e:
        raise NoExamples(f"the net of run {run_dir} cannot be read: {e}") from None
    if path is None:
        raise NoExamples(f"the net of run {run_dir} has no TEST-phase Data layer: no test images to show")
    try:
        total = db.count(path)
    except (DataError, OSError) as e:
        raise NoExamples(f"the test database of run {run_dir} cannot be read: {e}") from None
    if total == 0:
        raise NoExamples(f"the test database {path} of run {run_dir} holds no records")
    return ExampleSet(path, caffe_pb2, total)


def database(run_dir: Path, caffe_pb2: ModuleType) -> Path | None:
    """The ``data_param.source`` of the run's first TEST-phase Data layer, resolved as caffe does."""
    net = transform.run_net(run_dir, caffe_pb2)
    if net is None:
        return None
    layer = next((layer for layer in net.layer if layer.type == "Data" and state.included(layer, state.TEST)), None)
    if layer is None or not layer.data_param.source:
        return None
    return run_dir / layer.data_param.source  # an absolute source stays itself


def _label(record: bytes, caffe_pb2: ModuleType) -> int:
    return int(datum.parse(record, caffe_pb2).label)
