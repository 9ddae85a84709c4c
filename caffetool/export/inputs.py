"""The inputs an export is verified on: a run's own test images, else images drawn at random.

Each batch is a pair of feeds, one for pycaffe and one for onnxruntime. From a run's test database
Caffe gets what its TEST-phase ``DataTransformer`` makes of each record (:mod:`caffetool.inference.records`,
bit for bit); drawn images (uniform in [0, 1], H x W x C, seeded; in [0, 255] for a detection net,
whose steps take pixel values) reach Caffe through pycaffe's own ``caffe.io.Transformer``. The model
gets the same blob, or, when its graph holds the preprocessing, the image itself (a record's pixels
/ 255, in ``load_image``'s channel order; its pixels as they are for a detection net).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from caffetool.data import db
from caffetool.errors import DataError
from caffetool.export.preprocessing import IMAGE_INPUT, Preprocessing
from caffetool.inference import records

Feeds = tuple[dict[str, np.ndarray], dict[str, np.ndarray]]  # (pycaffe's, onnxruntime's)
SEED = 0


def run_images(run_dir: Path, caffe_pb2: Any, shape: tuple[int, ...], count: int) -> Iterator[tuple[np.ndarray,
                                                                                                   np.ndarray]]:
    """(pixels C x H x W uint8 after the centre crop, Caffe's transformed input) of the run's first
    ``count`` test records."""
    src = records.source(run_dir, "test", caffe_pb2)
    transformer = records.Transformer(src, caffe_pb2)
    for k, (_, value) in enumerate(db.read(src.path)):
        if k == count:
            return
        image, _ = records.planes(value, caffe_pb2, src.transform)
        blob = transformer(image)
        if blob.shape != tuple(shape):
            raise DataError(f"{src.path}: a record is {'x'.join(map(str, blob.shape))} after the "
                                    f"transform; the deploy net takes {'x'.join(map(str, shape))}")
        yield records.crop(image, src.transform.crop_size), blob


def test_count(run_dir: Path, caffe_pb2: Any) -> int:
    """How many records the run's test database holds."""
    return db.count(records.source(run_dir, "test", caffe_pb2).path)


def drawn_images(p: Preprocessing, count: int, seed: int = SEED) -> Iterator[np.ndarray]:
    rng = np.random.default_rng(seed)
    for _ in range(count):
        image = rng.random((p.height, p.width, p.channels), dtype=np.float32)
        yield image * np.float32(p.pixel_max) if p.pixel_max != 1 else image


def as_loaded(pixels: np.ndarray, p: Preprocessing) -> np.ndarray:
    """A record's C x H x W pixels as ``load_image`` would give the image: H x W x C in [0, 1] (0-255
    for a detection net's steps), the channels in the order the swap turns into the record's."""
    chw = pixels.astype(np.float32) if p.stretch else pixels.astype(np.float32) / np.float32(255)
    if p.channel_swap:
        chw = chw[np.argsort(p.channel_swap)]
    return chw.transpose(1, 2, 0)


def batched(items: Iterator[tuple[np.ndarray | None, np.ndarray]], size: int, caffe_input: str,
            onnx_input: str, p: Preprocessing, transformer: Any) -> Iterator[Feeds]:
    """Feeds of ``size`` items: each item is (image H x W x C in [0, 1] or None, Caffe's blob or None)."""
    chunk: list[tuple[np.ndarray | None, np.ndarray | None]] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield _feeds(chunk, caffe_input, onnx_input, transformer)
            chunk = []
    if chunk:
        yield _feeds(chunk, caffe_input, onnx_input, transformer)


def _feeds(chunk: list, caffe_input: str, onnx_input: str, transformer: Any) -> Feeds:
    blobs = np.stack([blob if blob is not None else transformer.preprocess(caffe_input, image)
                      for image, blob in chunk]).astype(np.float32)
    if onnx_input == IMAGE_INPUT:
        return {caffe_input: blobs}, {onnx_input: np.stack([image for image, _ in chunk]).astype(np.float32)}
    return {caffe_input: blobs}, {onnx_input: blobs}


def other_inputs(shape: tuple[int, ...], n: int, rng: np.random.Generator, index_range: int | None) -> np.ndarray:
    """An input that is not an image: indices below ``index_range`` for an Embed layer, else N(0, 1)."""
    if index_range is not None:
        return rng.integers(0, index_range, (n, *shape)).astype(np.float32)
    return rng.standard_normal((n, *shape), dtype=np.float32)
