"""The mean image of a database, written as a Caffe ``BlobProto`` (``.binaryproto``).

Equal, byte for byte, to what Caffe's ``compute_image_mean`` writes: it sums pixels into a
float blob one image at a time and divides by the count in float, so this does the same in
float32, in the same order (exact sums for MNIST-sized sets, identical rounding otherwise).
Any database works, raw or encoded: an encoded image is decoded with its own channels, as
``compute_image_mean``'s ``DecodeDatumNative`` does; all images must share one shape.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from caffetool.data import datum
from caffetool.engine import EngineInfo, import_caffe
from caffetool.errors import DataError
from caffetool.fsio import write_atomic


def mean_image(path: Path, engine: EngineInfo) -> tuple[np.ndarray, int]:
    """(mean as float32 array (channels, height, width), number of images)."""
    total: np.ndarray | None = None
    count = 0
    shape = None
    for channels, height, width, data, _ in datum.read(path, import_caffe(engine).proto.caffe_pb2, encoded=True):
        if total is None:
            shape = (channels, height, width)
            total = np.zeros(channels * height * width, dtype=np.float32)
        pixels = np.frombuffer(data, dtype=np.uint8)
        if pixels.size != total.size:
            raise DataError(f"{path}: record {count} has {pixels.size} values, the first had {total.size}")
        total += pixels  # float32 += uint8, as Caffe's float blob does
        count += 1
    if total is None or shape is None:
        raise DataError(f"{path} is empty: no mean to compute")
    return (total / np.float32(count)).astype(np.float32).reshape(shape), count


def write_binaryproto(mean: np.ndarray, out: Path, engine: EngineInfo) -> Path:
    """Serialise with the engine's own ``caffe_pb2`` so the bytes are Caffe's."""
    caffe = import_caffe(engine)
    blob = caffe.proto.caffe_pb2.BlobProto()
    blob.num = 1
    blob.channels, blob.height, blob.width = mean.shape
    blob.data.extend(mean.ravel().tolist())
    write_atomic(out, blob.SerializeToString(), DataError)
    return out
