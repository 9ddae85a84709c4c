"""IDX files (MNIST's format), read with every check Caffe's converter skips.

Layout: two zero bytes, a type byte (0x08 = unsigned byte), a dimension count, then one
big-endian uint32 per dimension, then the data. Images are magic 2051 (3 dimensions: count,
rows, columns); labels are magic 2049 (1 dimension). Files may be gzip-compressed or raw.
Every failure names the file, what was expected, what was found and the byte offset; a file
that is missing, a folder, or a gzip stream that cannot be decompressed is named the same way.

Limits: memory stays bounded whatever a header declares. A raw file shorter than its header
says is refused before anything is read; images are read in chunks of at most
:data:`BUFFER_BYTES` (one image at a time when images are larger), labels in chunks as well; an
image larger than a Caffe ``Datum`` can hold (protobuf's 2 GiB message limit) is refused from the
header alone. A gzip file's length is only known by decompressing it, so a lying gzip header can
still cost one image's worth of memory (at most 2 GiB) before the truncation is found.
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from caffetool.errors import DataError

IMAGES_MAGIC = 2051
LABELS_MAGIC = 2049
GZIP_MAGIC = b"\x1f\x8b"
BUFFER_BYTES = 64 << 20
DATUM_LIMIT = 2**31 - 1  # protobuf refuses messages of 2 GiB and more


class IdxError(DataError):
    """An IDX file is missing, unreadable or malformed."""


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
    try:
        with open(path, "rb") as probe:
            compressed = probe.read(2) == GZIP_MAGIC
    except OSError as e:
        raise IdxError(f"{path}: {(e.strerror or str(e)).lower()}; expected an IDX file") from e
    return gzip.open(path, "rb") if compressed else open(path, "rb")


GZIP_ERRORS = (gzip.BadGzipFile, zlib.error, EOFError)


@contextmanager
def _reading(path: Path) -> Iterator[BinaryIO]:
    """``path`` opened with :func:`open_idx`; a corrupt gzip stream or a read error becomes IdxError."""
    with open_idx(path) as f:
        try:
            yield f
        except (*GZIP_ERRORS, OSError) as e:
            raise IdxError(f"{path}: {unreadable(e)}") from e


def unreadable(error: BaseException) -> str:
    """Why a file could not be read, in words: ``corrupt gzip: ...`` for a damaged gzip stream."""
    if isinstance(error, EOFError):
        return "corrupt gzip: the compressed stream ends early"
    if isinstance(error, GZIP_ERRORS):
        return f"corrupt gzip: {error}"
    return f"cannot be read ({error})"


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
    header = IdxHeader(path, magic, dims)
    if header.item_bytes > DATUM_LIMIT:
        raise IdxError(f"{path}: expected items of at most {DATUM_LIMIT} bytes (a Caffe Datum's limit), "
                       f"found {'x'.join(map(str, dims[1:]))} = {header.item_bytes} bytes declared at byte offset 8")
    return header


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


def _check_size(f: BinaryIO, header: IdxHeader) -> None:
    """Raise before reading if a raw file is shorter than its header declares (gzip is read to see)."""
    if isinstance(f, gzip.GzipFile):
        return
    available = os.fstat(f.fileno()).st_size - header.offset
    if available < header.count * header.item_bytes:
        raise _short(header, available // header.item_bytes, available % header.item_bytes)


def read_labels(path: Path, num_classes: int | None = None) -> bytes:
    """All labels of a labels file (one byte each), validated against count and classes."""
    with _reading(path) as f:
        header = read_header(f, path, LABELS_MAGIC)
        _check_size(f, header)
        data = bytearray()
        while len(data) < header.count:  # in chunks: a declared count is no promise of data
            block = f.read(min(BUFFER_BYTES, header.count - len(data)))
            if not block:
                raise _short(header, len(data), 0)
            data += block
        _check_end(f, header)
    data = bytes(data)
    if num_classes is not None and data and max(data) >= num_classes:
        i = next(i for i, label in enumerate(data) if label >= num_classes)
        raise IdxError(f"{path}: expected labels 0..{num_classes - 1}, found {data[i]} "
                       f"(item {i}, byte offset {header.offset + i})")
    return data


def image_header(path: Path) -> IdxHeader:
    with _reading(path) as f:
        return read_header(f, path, IMAGES_MAGIC)


def iter_images(path: Path, chunk: int = 4096) -> Iterator[tuple[memoryview, int]]:
    """Yield (pixels, n): the next ``n`` images' bytes, row-major, in chunks.

    One buffer is reused (memory stays bounded), so a chunk is valid only until the next one.
    Plain bytes rather than numpy keep the command-line converter's start-up short.
    """
    with _reading(path) as f:
        header = read_header(f, path, IMAGES_MAGIC)
        _check_size(f, header)
        size = header.item_bytes
        per_chunk = max(1, min(chunk, header.count, BUFFER_BYTES // size))
        try:
            buffer = bytearray(per_chunk * size)
        except MemoryError:
            raise IdxError(f"{path}: images of {'x'.join(map(str, header.item_shape))} ({size} bytes each) "
                           "do not fit in memory") from None
        done = 0
        while done < header.count:
            n = min(per_chunk, header.count - done)
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
