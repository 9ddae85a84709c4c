"""Caffe ``Datum`` records, encoded in bulk with numpy and decoded by the engine's ``caffe_pb2``.

``convert_mnist_data`` fills a Datum with channels, height, width, the raw pixel bytes and the
label, and serialises it with protobuf, which writes set fields in field-number order:
``08 channels 10 height 18 width 22 len data 28 label`` (all varints). For a data set of equal
image sizes every record therefore shares one prefix, so a whole chunk of records is one numpy
array assembled with slicing: the bytes are identical to protobuf's (the tests compare them with
the real converter's output and parse them with ``caffe_pb2``), at a fraction of the cost.

Decoding has no such shortcut to earn its keep, so it is protobuf's own: whatever a database holds
is read as Caffe reads it. Limits: only raw 8-bit pixels are decoded; ``float_data`` records are
refused by name, and ``encoded`` (JPEG/PNG) ones too except through :func:`decode_any` (the mean
image, which Caffe also computes on decoded images). :func:`encode` writes single records as
``convert_imageset`` does (raw or encoded, any number of channels).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from google.protobuf.message import DecodeError

from caffetool.data import db
from caffetool.errors import DataError

CHANNELS, HEIGHT, WIDTH, DATA, LABEL = 1, 2, 3, 4, 5
ENCODED = 7
UINT64 = (1 << 64) - 1


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


def encode(data: bytes, label: int, encoded: bool, shape: tuple[int, int, int] | None = None) -> bytes:
    """One Datum as ``convert_imageset`` serialises it, ``encoded`` flag included.

    Raw pixels (``shape`` given, ``encoded`` False) come from Caffe's ``CVMatToDatum``, which sets
    ``encoded: false`` explicitly, so the record ends ``38 00``; an encoded image (``shape`` None)
    holds the file's or encoder's bytes, its label and ``encoded: true``. A negative label is the
    ten-byte varint protobuf writes for a negative int32.
    """
    head = b""
    if shape is not None:
        channels, height, width = shape
        head = _tag(CHANNELS, 0) + varint(channels) + _tag(HEIGHT, 0) + varint(height) + _tag(WIDTH, 0) + varint(width)
    return (head + _tag(DATA, 2) + varint(len(data)) + data + _tag(LABEL, 0) + varint(label & UINT64)
            + _tag(ENCODED, 0) + (b"\1" if encoded else b"\0"))


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


def parse(record: bytes, caffe_pb2: ModuleType) -> Any:
    """A serialised Datum as a ``caffe_pb2.Datum``; anything else is refused as what it is not."""
    message = caffe_pb2.Datum()
    try:
        message.ParseFromString(record)
    except DecodeError as e:
        raise DataError(f"a record is not a Caffe Datum ({e})") from None
    return message


def planes(message: Any, flag: int | None = None) -> Any:
    """A parsed Datum's 8-bit pixels as a (C, H, W) uint8 array: raw pixels as they are, an encoded
    image decoded with OpenCV's ``flag`` (default ``IMREAD_UNCHANGED``: the image's own channels, as
    Caffe's ``DecodeDatumNative`` keeps them) and laid out channel by channel. ``float_data`` and
    images of other depths are refused: Caffe's ``CVMatToDatum`` and DataTransformer take 8 bits."""
    import numpy as np  # noqa: PLC0415

    if message.encoded:
        import cv2  # noqa: PLC0415 - OpenCV only for encoded records

        image = cv2.imdecode(np.frombuffer(message.data, np.uint8), cv2.IMREAD_UNCHANGED if flag is None else flag)
        if image is None:
            raise DataError("a record's encoded image cannot be decoded")
        if image.dtype != np.uint8:
            raise DataError(f"a record's encoded image has {image.dtype} pixels; only 8-bit images are read")
        return image.reshape(image.shape[0], image.shape[1], -1).transpose(2, 0, 1)
    if message.float_data:
        raise DataError("a record holds float_data; only raw 8-bit pixels (as convert_mnist_data writes) are read")
    size = message.channels * message.height * message.width
    if len(message.data) != size:
        raise DataError(f"a record of {message.channels}x{message.height}x{message.width} holds "
                        f"{len(message.data)} bytes of pixels, expected {size}")
    return np.frombuffer(message.data, np.uint8).reshape(message.channels, message.height, message.width)


def decode(record: bytes, caffe_pb2: ModuleType) -> tuple[int, int, int, bytes, int]:
    """(channels, height, width, data, label) of a serialised Datum of raw 8-bit pixels."""
    message = parse(record, caffe_pb2)
    if message.encoded:
        raise DataError("a record holds encoded images; only raw 8-bit pixels (as convert_mnist_data writes) are read")
    pixels = planes(message)
    return message.channels, message.height, message.width, pixels.tobytes(), message.label


def decode_any(record: bytes, caffe_pb2: ModuleType) -> tuple[int, int, int, bytes, int]:
    """As :func:`decode`, and an encoded image decoded as ``compute_image_mean`` does it (its own
    channels, :func:`planes`)."""
    message = parse(record, caffe_pb2)
    pixels = planes(message)
    return pixels.shape[0], pixels.shape[1], pixels.shape[2], pixels.tobytes(), message.label


def read(path: Path, caffe_pb2: ModuleType, encoded: bool = False) -> Iterator[tuple[int, int, int, bytes, int]]:
    """The decoded records of the database at ``path``, in key order; a bad one names its key.

    With ``encoded``, JPEG/PNG records are decoded too (:func:`decode_any`).
    """
    decoder = decode_any if encoded else decode
    for key, value in db.read(path):
        try:
            yield decoder(value, caffe_pb2)
        except DataError as e:
            raise DataError(f"{path}: record {key.decode(errors='replace')}: {e}") from e
