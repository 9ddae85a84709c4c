"""Caffe ``Datum`` records, encoded in bulk with numpy and decoded by the engine's ``caffe_pb2``.

``convert_mnist_data`` fills a Datum with channels, height, width, the raw pixel bytes and the
label, and serialises it with protobuf, which writes set fields in field-number order:
``08 channels 10 height 18 width 22 len data 28 label`` (all varints). For a data set of equal
image sizes every record therefore shares one prefix, so a whole chunk of records is one numpy
array assembled with slicing: the bytes are identical to protobuf's (the tests compare them with
the real converter's output and parse them with ``caffe_pb2``), at a fraction of the cost.

Decoding has no such shortcut to earn its keep, so it is protobuf's own: whatever a database holds
is read as Caffe reads it. Limits: only raw 8-bit pixels are decoded; ``float_data`` and
``encoded`` (JPEG/PNG) records are refused by name.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from google.protobuf.message import DecodeError

from caffetool.data import db
from caffetool.errors import DataError

CHANNELS, HEIGHT, WIDTH, DATA, LABEL = 1, 2, 3, 4, 5


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _tag(field: int, wire_type: int) -> bytes:
    return varint(field << 3 | wire_type)


def prefix(channels: int, height: int, width: int) -> bytes:
    """The bytes before the pixels: the three dimensions and the data field's tag and length."""
    return (
        _tag(CHANNELS, 0) + varint(channels) + _tag(HEIGHT, 0) + varint(height)
        + _tag(WIDTH, 0) + varint(width) + _tag(DATA, 2) + varint(channels * height * width)
    )


def encode_one(pixels: bytes, label: int, channels: int, height: int, width: int) -> bytes:
    return prefix(channels, height, width) + pixels + _tag(LABEL, 0) + varint(label)


def encode_chunk(pixels: memoryview | bytes, labels: bytes, n: int,
                 channels: int, height: int, width: int) -> list[memoryview] | list[bytes]:
    """Records for ``n`` images whose bytes are ``pixels`` (row-major) and their labels.

    Labels below 128 fit one varint byte, so every record has one length and the chunk is a
    single buffer (returned as per-record views); larger labels take the per-record path.
    """
    size = channels * height * width
    if n and max(labels) >= 128:
        return [encode_one(bytes(pixels[i * size : (i + 1) * size]), labels[i], channels, height, width)
                for i in range(n)]
    head = prefix(channels, height, width)
    start, length = len(head), len(head) + size + 2
    out = bytearray((head + bytes(size) + _tag(LABEL, 0) + b"\0") * n)
    for i in range(n):
        at = i * length + start
        out[at : at + size] = pixels[i * size : (i + 1) * size]
    out[length - 1 :: length] = labels[:n]
    view = memoryview(out)
    return [view[i * length : (i + 1) * length] for i in range(n)]


def decode(record: bytes, caffe_pb2: ModuleType) -> tuple[int, int, int, bytes, int]:
    """(channels, height, width, data, label) of a serialised Datum of raw 8-bit pixels."""
    message = caffe_pb2.Datum()
    try:
        message.ParseFromString(record)
    except DecodeError as e:
        raise DataError(f"a record is not a Caffe Datum ({e})") from e
    if message.encoded or message.float_data:
        kind = "encoded images" if message.encoded else "float_data"
        raise DataError(f"a record holds {kind}; only raw 8-bit pixels (as convert_mnist_data writes) are read")
    size = message.channels * message.height * message.width
    if len(message.data) != size:
        raise DataError(f"a record of {message.channels}x{message.height}x{message.width} holds "
                        f"{len(message.data)} bytes of pixels, expected {size}")
    return message.channels, message.height, message.width, message.data, message.label


def read(path: Path, caffe_pb2: ModuleType) -> Iterator[tuple[int, int, int, bytes, int]]:
    """The decoded records of the database at ``path``, in key order; a bad one names its key."""
    for key, value in db.read(path):
        try:
            yield decode(value, caffe_pb2)
        except DataError as e:
            raise DataError(f"{path}: record {key.decode(errors='replace')}: {e}") from e
