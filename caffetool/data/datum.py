"""Caffe ``Datum`` records, encoded in bulk with numpy.

``convert_mnist_data`` fills a Datum with channels, height, width, the raw pixel bytes and the
label, and serialises it with protobuf, which writes set fields in field-number order:
``08 channels 10 height 18 width 22 len data 28 label`` (all varints). For a data set of equal
image sizes every record therefore shares one prefix, so a whole chunk of records is one numpy
array assembled with slicing: the bytes are identical to protobuf's (the tests compare them with
the real converter's output and parse them with ``caffe_pb2``), at a fraction of the cost.
"""

from __future__ import annotations

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


def decode(record: bytes) -> tuple[int, int, int, bytes, int]:
    """(channels, height, width, data, label) of a record written as above (no float_data)."""
    pos, fields = 0, {}
    while pos < len(record):
        key, pos = _read_varint(record, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            fields[field], pos = _read_varint(record, pos)
        elif wire == 2:
            length, pos = _read_varint(record, pos)
            fields[field], pos = record[pos : pos + length], pos + length
        else:
            raise ValueError(f"unexpected wire type {wire} in Datum field {field}")
    return (fields.get(CHANNELS, 0), fields.get(HEIGHT, 0), fields.get(WIDTH, 0),
            fields.get(DATA, b""), fields.get(LABEL, 0))


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
