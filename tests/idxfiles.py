"""Build IDX files (raw or gzip) for tests."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np


def images_bytes(images: np.ndarray, magic: int = 2051) -> bytes:
    n, rows, cols = images.shape
    return struct.pack(">IIII", magic, n, rows, cols) + images.astype(np.uint8).tobytes()


def labels_bytes(labels: np.ndarray, magic: int = 2049) -> bytes:
    return struct.pack(">II", magic, len(labels)) + np.asarray(labels, dtype=np.uint8).tobytes()


def write(path: Path, data: bytes, compress: bool = False) -> Path:
    path.write_bytes(gzip.compress(data, mtime=0) if compress else data)
    return path


def random_set(n: int, rows: int, cols: int, classes: int = 10, seed: int = 0):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n, rows, cols), dtype=np.uint8)
    labels = rng.integers(0, classes, size=n, dtype=np.uint8)
    return images, labels


def write_pair(folder: Path, images: np.ndarray, labels: np.ndarray, compress: bool = False,
               names: tuple[str, str] = ("images-idx3-ubyte", "labels-idx1-ubyte")) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return (write(folder / names[0], images_bytes(images), compress),
            write(folder / names[1], labels_bytes(labels), compress))
