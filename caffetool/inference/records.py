"""A run's evaluation data: the database its TEST (or TRAIN) Data layer reads, in batches, transformed
as Caffe's ``DataTransformer`` transforms it in the TEST phase.

The arithmetic follows BVLC Caffe ``src/caffe/data_transformer.cpp`` (``Transform(const Datum&)`` and
``Transform(const cv::Mat&)``): the centre ``crop_size`` square (offsets ``(size - crop) / 2``), then
``(pixel - mean) * scale`` in float32, where the mean is the ``mean_file`` image cropped at the same
offsets or one ``mean_value`` per channel (a single value serving every channel). Encoded records are
decoded as ``DecodeDatumToCVMatNative`` does (the image's own channels), or in colour / grey with
``force_color`` / ``force_gray``. Doing the same float operations in the same order gives the same
inputs bit for bit, which is what lets top-1 equal ``caffe test``'s accuracy exactly.

Limits: only ``Data`` layers (LMDB, LevelDB) are read, not ``ImageData`` lists or HDF5; records of
``float_data`` are refused; ``mirror`` is a TRAIN-phase randomisation and is not applied, so the
TRAIN split is evaluated with the TEST transform.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import cv2
import numpy as np

from caffetool.data import datum, db
from caffetool.errors import DataError, RunError
from caffetool.nets import prototxt, state, testnets, transform
from caffetool.runs.folder import RunFolder

SPLITS = ("test", "train")


@dataclass(frozen=True)
class Source:
    """Where a split's records are and how Caffe transforms them (the Data layer's own
    ``TransformationParameter``, its relative ``mean_file`` read from ``root``)."""

    split: str
    path: Path
    layer: Any  # the Data LayerParameter
    batch_size: int
    test_net: testnets.TestNet | None  # the first test net (for ``caffe test``), for the test split
    root: Path  # the run's folder, where the net's relative paths lead

    @property
    def transform(self) -> Any:
        return self.layer.transform_param

    @property
    def mean_file(self) -> Path | None:
        name = self.transform.mean_file
        return (Path(name) if Path(name).is_absolute() else self.root / name) if name else None


@dataclass
class Batch:
    start: int  # the index of the batch's first record
    keys: list[str]
    labels: np.ndarray  # int64
    blob: np.ndarray  # float32, (n, C, H, W)


def source(run_dir: Path, split: str, caffe_pb2: ModuleType) -> Source:
    """The split's Data layer: the first test net's TEST-phase one (as Caffe builds that net from the
    solver, ``test_state`` included), or the train net's TRAIN-phase one."""
    solver_file = RunFolder(run_dir).solver
    if not solver_file.is_file():
        raise RunError(f"{run_dir} has no {solver_file.name}; is it a caffetool run?")
    if split == "test":
        nets = testnets.test_nets(solver_file, run_dir, caffe_pb2)
        if not nets:
            raise RunError(f"{solver_file} has no test net (no test_iter); evaluate the train split with --split train")
        net, test_net = nets[0].net, nets[0]
        phase, level, stages = state.TEST, net.state.level, frozenset(net.state.stage)
    else:
        net, test_net = _train_net(solver_file, run_dir, caffe_pb2)
        phase, level, stages = state.TRAIN, net.state.level, frozenset(net.state.stage)
    layers = [layer for layer in net.layer if layer.type in transform.DATA_TYPES
              and state.included(layer, phase, level, stages)]
    if not layers:
        raise RunError(f"the {split} net of {run_dir} has no data layer in the {split.upper()} phase")
    layer = layers[0]
    if layer.type != "Data":
        raise DataError(f"the {split} data of {run_dir} comes from a {layer.type} layer; evaluate reads the "
                        "LMDB or LevelDB of a Data layer")
    path = Path(layer.data_param.source)
    path = path if path.is_absolute() else run_dir / path
    if not path.exists():
        raise DataError(f"the {split} database {path} (layer {layer.name!r}) does not exist")
    db.detect_backend(path)
    return Source(split, path, layer, layer.data_param.batch_size or 1, test_net, run_dir)


def _train_net(solver_file: Path, run_dir: Path, caffe_pb2: ModuleType) -> tuple[Any, None]:
    """The net the solver trains, in its ``train_state`` (``Solver::InitTrainNet``'s order of fields)."""
    solver = prototxt.read(solver_file, caffe_pb2.SolverParameter())
    if solver.HasField("train_net_param"):
        net = solver.train_net_param
    elif solver.train_net:
        net = prototxt.read(run_dir / solver.train_net, caffe_pb2.NetParameter())
    elif solver.HasField("net_param"):
        net = solver.net_param
    else:
        net = prototxt.read(run_dir / solver.net, caffe_pb2.NetParameter())
    merged = caffe_pb2.NetState(phase=caffe_pb2.TRAIN)
    merged.MergeFrom(net.state)
    merged.MergeFrom(solver.train_state)
    net.state.CopyFrom(merged)
    return net, None


def planes(record: bytes, caffe_pb2: ModuleType, tp: Any) -> tuple[np.ndarray, int]:
    """A record's pixels as (C, H, W) uint8, decoded as Caffe's DataTransformer decodes it (an encoded
    image in colour or grey as the ``TransformationParameter``'s ``force_color``/``force_gray`` say),
    and its label."""
    message = datum.parse(record, caffe_pb2)
    flag = cv2.IMREAD_COLOR if tp.force_color else cv2.IMREAD_GRAYSCALE if tp.force_gray else cv2.IMREAD_UNCHANGED
    return datum.planes(message, flag), message.label


def crop(image: np.ndarray, size: int) -> np.ndarray:
    """The centre ``size`` square of a (C, H, W) array, at Caffe's TEST offsets."""
    if not size:
        return image
    height, width = image.shape[1:]
    if size > height or size > width:
        raise DataError(f"crop_size {size} is larger than the {height}x{width} image")
    top, left = (height - size) // 2, (width - size) // 2
    return image[:, top : top + size, left : left + size]


class Transformer:
    """The float32 input Caffe makes of each record; the mean image is read at the first record."""

    def __init__(self, src: Source, caffe_pb2: ModuleType) -> None:
        self.caffe_pb2, self.mean_file = caffe_pb2, src.mean_file
        self.mean_values, self.crop = tuple(src.transform.mean_value), src.transform.crop_size
        self.scale = np.float32(src.transform.scale)
        self.mean: np.ndarray | None = None

    def __call__(self, image: np.ndarray) -> np.ndarray:
        x = image.astype(np.float32)
        mean = self._mean(image.shape)
        if mean is not None:
            x = crop(x - mean, self.crop) if mean.ndim == 3 else crop(x, self.crop) - mean
        else:
            x = crop(x, self.crop)
        return x if self.scale == 1 else x * self.scale

    def _mean(self, shape: tuple[int, ...]) -> np.ndarray | None:
        channels, height, width = shape
        if self.mean is None and self.mean_file is not None:
            mean = transform.read_mean(self.caffe_pb2, self.mean_file, channels, height, width)
            if mean.shape != shape:  # Caffe's DataTransformer checks the mean image's size the same way
                raise DataError(f"mean {self.mean_file} is not a {channels}x{height}x{width} image like the records")
            self.mean = mean
        elif self.mean is None and self.mean_values:
            values = self.mean_values * (channels if len(self.mean_values) == 1 else 1)
            if len(values) != channels:
                raise DataError(f"{len(values)} mean_value entries for {channels}-channel records")
            self.mean = np.array(values, np.float32).reshape(-1, 1, 1)
        return self.mean


def batches(src: Source, caffe_pb2: ModuleType, size: int, shape: tuple[int, int, int]) -> Iterator[Batch]:
    """The records of ``src`` in key order, ``size`` at a time, as the net's (C, H, W) inputs."""
    transformer = Transformer(src, caffe_pb2)
    keys: list[str] = []
    labels: list[int] = []
    blob = np.empty((size, *shape), np.float32)
    start = 0
    for key, value in db.read(src.path):
        name = key.decode(errors="replace")
        try:
            image, label = planes(value, caffe_pb2, src.transform)
            x = transformer(image)
        except DataError as e:
            raise DataError(f"{src.path}: record {name}: {e}") from None
        if x.shape != shape:
            raise DataError(f"{src.path}: record {name} is {'x'.join(map(str, x.shape))} after the transform; "
                            f"the deploy net takes {'x'.join(map(str, shape))}")
        blob[len(keys)] = x
        keys.append(name)
        labels.append(label)
        if len(keys) == size:
            yield Batch(start, keys, np.array(labels, np.int64), blob)
            start += len(keys)
            keys, labels, blob = [], [], np.empty((size, *shape), np.float32)
    if keys:
        yield Batch(start, keys, np.array(labels, np.int64), blob[: len(keys)])


def images_at(src: Source, caffe_pb2: ModuleType, indices: list[int]) -> dict[int, np.ndarray]:
    """The cropped pixels (H, W, C uint8, no mean or scale) of the records at ``indices``, for showing."""
    wanted, found = set(indices), {}
    for i, (_, value) in enumerate(db.read(src.path)):
        if i in wanted:
            found[i] = crop(planes(value, caffe_pb2, src.transform)[0], src.transform.crop_size).transpose(1, 2, 0).copy()
            if len(found) == len(wanted):
                break
    return found
