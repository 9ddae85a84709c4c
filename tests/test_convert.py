"""Databases equal Caffe's own converter's, byte for byte, and Caffe's Data layer reads them."""

from __future__ import annotations

import gzip
import shutil
import subprocess

import lmdb
import numpy as np
import pytest

from caffetool.data import convert, datum, db
from caffetool.data.registry import FASHION_MNIST
from caffetool.engine.locate import caffe_env

from .idxfiles import random_set, write_pair

FASHION_DIR = FASHION_MNIST.local_dirs[0]


def caffe_convert(engine, images, labels, out, backend="lmdb"):
    done = subprocess.run([str(engine.tool("convert_mnist_data")), str(images), str(labels), str(out),
                           f"--backend={backend}"], capture_output=True, text=True, env=caffe_env())
    assert done.returncode == 0, done.stderr


def records(path):
    return list(db.read(path))


@pytest.mark.parametrize("backend", ["lmdb", "leveldb"])
@pytest.mark.parametrize("shape", [(1, 28, 28), (9, 3, 5), (2500, 28, 28)])
def test_bytes_equal_convert_mnist_data(tmp_path, engine, backend, shape):
    images, labels = random_set(*shape)
    img_file, lab_file = write_pair(tmp_path / "idx", images, labels)
    caffe_convert(engine, img_file, lab_file, tmp_path / "caffe", backend)
    convert.convert(img_file, lab_file, tmp_path / "ours", backend)
    theirs, ours = records(tmp_path / "caffe"), records(tmp_path / "ours")
    assert len(ours) == shape[0]
    assert ours == theirs


def test_real_fashion_mnist_test_split_equals_caffe(tmp_path, engine, fashion_raw):
    images, labels = fashion_raw["test"]
    caffe_convert(engine, images, labels, tmp_path / "caffe")
    convert.convert(images, labels, tmp_path / "ours")
    assert records(tmp_path / "ours") == records(tmp_path / "caffe")


def test_records_parse_as_caffe_datums(tmp_path, caffe):
    images, labels = random_set(5, 4, 6, classes=200)  # labels >= 128 take two varint bytes
    labels[0] = 199
    img_file, lab_file = write_pair(tmp_path, images, labels)
    convert.convert(img_file, lab_file, tmp_path / "db")
    for i, (key, value) in enumerate(records(tmp_path / "db")):
        d = caffe.proto.caffe_pb2.Datum()
        d.ParseFromString(value)
        assert key == b"%08d" % i
        assert (d.channels, d.height, d.width, d.label) == (1, 4, 6, labels[i])
        assert d.data == images[i].tobytes()
        assert d.SerializeToString() == value
        assert datum.decode(value, caffe.proto.caffe_pb2) == (1, 4, 6, images[i].tobytes(), labels[i])


def test_caffe_data_layer_reads_our_lmdb(tmp_path, caffe):
    images, labels = random_set(10, 28, 28)
    img_file, lab_file = write_pair(tmp_path, images, labels)
    convert.convert(img_file, lab_file, tmp_path / "db")
    net_file = tmp_path / "net.prototxt"
    net_file.write_text(f"""layer {{ name: "d" type: "Data" top: "data" top: "label"
      data_param {{ source: "{tmp_path / 'db'}" backend: LMDB batch_size: 10 }} }}""")
    net = caffe.Net(str(net_file), caffe.TEST)
    net.forward()
    assert np.array_equal(net.blobs["data"].data.astype(np.uint8), images[:, None])
    assert np.array_equal(net.blobs["label"].data.astype(np.uint8), labels)


def test_lmdb_map_grows_as_needed(tmp_path):
    images, labels = random_set(3000, 28, 28)
    writer = db.Writer(tmp_path / "db", "lmdb", map_size=1 << 20)  # 1 MiB for 2.4 MB of records
    values = datum.encode_chunk(images.tobytes(), labels.tobytes(), 3000, 1, 28, 28)
    writer.put_chunk(db.keys(0, 3000), values)
    writer.close()
    env = lmdb.open(str(tmp_path / "db"), readonly=True, lock=False)
    assert env.stat()["entries"] == 3000
    assert env.info()["map_size"] > 1 << 20
    env.close()


@pytest.fixture(scope="session")
def fashion_raw(tmp_path_factory):
    """Fashion-MNIST from Debian's package, decompressed (Caffe's converter reads raw IDX)."""
    if not FASHION_DIR.is_dir():
        pytest.fail(f"{FASHION_DIR} is missing: `caffetool test` installs dataset-fashion-mnist")
    out = tmp_path_factory.mktemp("fashion")
    paths = {}
    for f in FASHION_MNIST.files:
        target = out / f.name.removesuffix(".gz")
        with gzip.open(FASHION_DIR / f.name) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
        paths[f.role] = target
    return {"train": (paths["train-images"], paths["train-labels"]),
            "test": (paths["test-images"], paths["test-labels"])}
