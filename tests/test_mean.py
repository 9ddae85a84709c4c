"""The mean image: equal to Caffe's (tests/test_fetch.py), and every failure named."""

from __future__ import annotations

import numpy as np
import pytest

from caffetool.data import datum, db, mean
from caffetool.errors import DataError

from .smalldisk import small_disk


def database(path, images):
    n, channels, height, width = images.shape
    writer = db.Writer(path, "lmdb")
    if n:
        writer.put_chunk(db.keys(0, n), datum.encode_chunk(images.tobytes(), bytes(n), n, channels, height, width))
    writer.close()
    return path


def test_mean_of_a_small_database_and_its_binaryproto(engine, caffe, tmp_path):
    images = np.arange(2 * 3 * 2 * 2, dtype=np.uint8).reshape(2, 3, 2, 2)
    image, count = mean.mean_image(database(tmp_path / "db", images), engine)
    assert count == 2 and np.array_equal(image, images.mean(axis=0, dtype=np.float32))
    out = mean.write_binaryproto(image, tmp_path / "mean.binaryproto", engine)
    blob = caffe.proto.caffe_pb2.BlobProto.FromString(out.read_bytes())
    assert (blob.num, blob.channels, blob.height, blob.width) == (1, 3, 2, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db", "mean.binaryproto"]


def test_an_empty_database_is_a_data_error(engine, tmp_path):
    path = database(tmp_path / "db", np.zeros((0, 1, 2, 2), np.uint8))
    with pytest.raises(DataError, match=rf"^{path} is empty: no mean to compute$"):
        mean.mean_image(path, engine)


def test_a_full_disk_keeps_the_previous_mean(engine, tmp_path):
    big = np.zeros((3, 256, 256), np.float32)
    with small_disk(tmp_path / "disk", "256k") as disk:
        out = mean.write_binaryproto(np.zeros((1, 2, 2), np.float32), disk / "mean.binaryproto", engine)
        before = out.read_bytes()
        with pytest.raises(DataError) as err:
            mean.write_binaryproto(big, out, engine)
        assert str(err.value) == f"cannot write {out}: No space left on device"
        assert out.read_bytes() == before
        assert [p.name for p in disk.iterdir()] == ["mean.binaryproto"]
