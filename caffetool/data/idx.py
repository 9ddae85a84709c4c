"""IDX files (MNIST's format), read with every check Caffe's converter skips.

Layout: two zero bytes, a type byte (0x08 = unsigned byte), a dimension count, then one
big-endian uint32 per dimension, then the data. Images are magic 2051 (3 dimensions: count,
rows, columns); labels are magic 2049 (1 dimension). Files may be gzip-compressed or raw.
Every failure names the file, what was expected, what was found and the byte offset.
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from caffetool.errors import CaffetoolError

IMAGES_MAGIC = 2051
LABELS_MAGIC = 2049
GZIP_MAGIC = b"\x1f\x8b"


class IdxError(CaffetoolError, ValueError):
    """An IDX file is malformed."""


@dataclass(frozen=True)
class IdxHeader:
    path: Path
    magic: int
    dims: tuple[int, ...]

    @property
    def count(self) -> int:
        return self.dims[0]

    @property
    def item_shape(self) -> tuple[int, ...]:
        return self.dims[1:]

    @property
    def item_bytes(self) -> int:
        size = 1
        for d in self.item_shape:
            size *= d
        return size

    @property
    def offset(self) -> int:
        return 4 + 4 * len(self.dims)


def open_idx(path: Path) -> BinaryIO:
    """Open raw or gzip-compressed IDX transparently (gzip is recognised by its magic bytes)."""
    with open(path, "rb") as probe:
        compressed = probe.read(2) == GZIP_MAGIC
    return gzip.open(path, "rb") if compressed else open(path, "rb")


def read_header(f: BinaryIO, path: Path, magic: int) -> IdxHeader:
    head = f.read(4)
    if len(head) < 4:
        raise IdxError(f"{path}: expected a 4-byte IDX magic number at byte offset 0, "
                       f"found only {len(head)} bytes")
    found = struct.unpack(">I", head)[0]
    if found != magic:
        kind = "images" if magic == IMAGES_MAGIC else "labels"
        raise IdxError(f"{path}: expected magic number {magic} ({kind}) at byte offset 0, found {found}")
    ndim = head[3]  # the magic number's last byte: 3 for images, 1 for labels
    raw = f.read(4 * ndim)
    if len(raw) < 4 * ndim:
        raise IdxError(f"{path}: expected {ndim} dimension sizes at byte offset 4, "
                       f"found only {len(raw)} of {4 * ndim} bytes")
    dims = struct.unpack(f">{ndim}I", raw)
    for i, d in enumerate(dims[1:], start=1):
        if d == 0:
            raise IdxError(f"{path}: expected a non-zero size for dimension {i} at byte offset "
                           f"{4 + 4 * i}, found 0")
    return IdxHeader(path, magic, dims)


def _check_end(f: BinaryIO, header: IdxHeader) -> None:
    """Raise if bytes follow the declared data (a concatenated or corrupt file)."""
    extra = len(f.read(1 << 16))
    if extra:
        end = header.offset + header.count * header.item_bytes
        raise IdxError(f"{header.path}: expected the file to end at byte offset {end} "
                       f"({header.count} items declared), found trailing data there")


def _short(header: IdxHeader, got_items: int, got_bytes: int) -> IdxError:
    end = header.offset + got_items * header.item_bytes + got_bytes
    return IdxError(
        f"{header.path}: truncated: {header.count} items of {header.item_bytes} bytes declared "
        f"({header.offset + header.count * header.item_bytes} bytes in all), data ends at byte offset {end}"
    )


def read_labels(path: Path, num_classes: int | None = None) -> bytes:
    """All labels of a labels file (one byte each), validated against count and classes."""
    with open_idx(path) as f:
        header = read_header(f, path, LABELS_MAGIC)
        data = f.read(header.count)
        if len(data) < header.count:
            raise _short(header, len(data), 0)
        _check_end(f, header)
    if num_classes is not None and data and max(data) >= num_classes:
        i = next(i for i, label in enumerate(data) if label >= num_classes)
        raise IdxError(f"{path}: expected labels 0..{num_classes - 1}, found {data[i]} "
                       f"(item {i}, byte offset {header.offset + i})")
    return data


def image_header(path: Path) -> IdxHeader:
    with open_idx(path) as f:
        return read_header(f, path, IMAGES_MAGIC)


def iter_images(path: Path, chunk: int = 4096) -> Iterator[tuple[memoryview, int]]:
    """Yield (pixels, n): the next ``n`` images' bytes, row-major, in chunks.

    One buffer is reused (memory stays bounded), so a chunk is valid only until the next one.
    Plain bytes rather than numpy keep the command-line converter's start-up short.
    """
    with open_idx(path) as f:
        header = read_header(f, path, IMAGES_MAGIC)
        size = header.item_bytes
        buffer = bytearray(min(chunk, max(header.count, 1)) * size)
        done = 0
        while done < header.count:
            n = min(len(buffer) // size, header.count - done)
            view = memoryview(buffer)[: n * size]
            got = f.readinto(view)
            while got < n * size:  # gzip streams may return short reads
                more = f.readinto(view[got:])
                if not more:
                    raise _short(header, done + got // size, got % size)
                got += more
            yield view, n
            done += n
        _check_end(f, header)
