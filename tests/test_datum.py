"""Datum records: the fast encoder's bytes are protobuf's, and decoding is protobuf's own."""

from __future__ import annotations

import re

import pytest

from caffetool.data import convert, datum, db
from caffetool.errors import DataError

from .idxfiles import random_set, write_pair


def test_encoder_equals_protobuf_byte_for_byte(caffe):
    images, labels = random_set(6, 5, 7, classes=256)
    labels[:3] = (0, 127, 128)  # labels from 128 take two varint bytes
    records = datum.encode_chunk(images.tobytes(), bytes(labels), 6, 1, 5, 7)
    for image, label, record in zip(images, labels, records):
        expected = caffe.proto.caffe_pb2.Datum(channels=1, height=5, width=7, data=image.tobytes(), label=int(label))
        assert bytes(record) == expected.SerializeToString()
        assert datum.decode(bytes(record), caffe.proto.caffe_pb2) == (1, 5, 7, image.tobytes(), label)


@pytest.mark.parametrize("fields,message", [
    ({"channels": 1, "height": 1, "width": 2, "float_data": [0.5, 1.5]}, "a record holds float_data; only raw 8-bit "
                                                                          "pixels (as convert_mnist_data writes) are read"),
    ({"channels": 3, "height": 2, "width": 2, "data": b"\xff\xd8", "encoded": True}, "a record holds encoded images;"),
    ({"channels": 1, "height": 2, "width": 2, "data": b"abc"}, "a record of 1x2x2 holds 3 bytes of pixels, expected 4"),
])
def test_records_caffetool_cannot_read_are_named(caffe, fields, message):
    record = caffe.proto.caffe_pb2.Datum(**fields).SerializeToString()
    with pytest.raises(DataError, match=re.escape(message)):
        datum.decode(record, caffe.proto.caffe_pb2)


def test_a_damaged_record_names_its_database_and_key(tmp_path, caffe):
    images, labels = random_set(3, 2, 2)
    img_file, lab_file = write_pair(tmp_path, images, labels)
    convert.convert(img_file, lab_file, tmp_path / "db")
    writer = db.Writer(tmp_path / "bad", "lmdb")
    writer.put_chunk(db.keys(0, 3), [value for _, value in db.read(tmp_path / "db")][:2] + [b"\x0a\xff"])
    writer.close()
    assert [d[4] for d in list(datum.read(tmp_path / "db", caffe.proto.caffe_pb2))] == list(labels)
    with pytest.raises(DataError, match=re.escape(f"{tmp_path / 'bad'}: record 00000002: a record is not a Caffe Datum (")):
        list(datum.read(tmp_path / "bad", caffe.proto.caffe_pb2))
