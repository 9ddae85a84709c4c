"""IDX parsing: odd shapes read back exactly; every malformation is its own clear error."""

from __future__ import annotations

import re
import struct

import numpy as np
import pytest

from caffetool.data import convert, idx

from .idxfiles import images_bytes, labels_bytes, random_set, write, write_pair


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("shape", [(1, 28, 28), (7, 3, 5), (5000, 2, 3)])
def test_images_and_labels_read_back_exactly(tmp_path, compress, shape):
    images, labels = random_set(*shape)
    img_file, lab_file = write_pair(tmp_path, images, labels, compress)
    got = b"".join(bytes(chunk) for chunk, _ in idx.iter_images(img_file, chunk=1000))
    assert got == images.tobytes()
    assert idx.read_labels(lab_file, 10) == labels.tobytes()
    assert idx.image_header(img_file).dims == shape


def malformed_cases():
    images, labels = random_set(4, 3, 5)
    good = images_bytes(images)
    return {
        "labels-as-images": (labels_bytes(labels), "expected magic number 2051 (images) at byte offset 0, found 2049"),
        "bad-ndim": (struct.pack(">I", 0x00000802) + good[4:],
                     "expected magic number 2051 (images) at byte offset 0, found 2050"),
        "short-magic": (b"\x00\x00", "expected a 4-byte IDX magic number at byte offset 0, found only 2 bytes"),
        "short-dims": (good[:10], "expected 3 dimension sizes at byte offset 4, found only 6 of 12 bytes"),
        "zero-rows": (struct.pack(">IIII", 2051, 4, 0, 5), "expected a non-zero size for dimension 1 at byte offset 8, found 0"),
        "truncated": (good[:-7], "truncated: 4 items of 15 bytes declared (76 bytes in all), data ends at byte offset 69"),
        "trailing": (good + b"extra", "expected the file to end at byte offset 76 (4 items declared), found trailing data there"),
    }


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("case", list(malformed_cases()))
def test_malformed_images_are_named_and_leave_no_database(tmp_path, case, compress):
    data, message = malformed_cases()[case]
    img_file = write(tmp_path / "images", data, compress)
    _, labels = random_set(4, 3, 5)
    lab_file = write(tmp_path / "labels", labels_bytes(labels))
    with pytest.raises(idx.IdxError, match=re.escape(f"{img_file}: {message}")):
        convert.convert(img_file, lab_file, tmp_path / "db")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["images", "labels"]


def test_label_outside_the_classes_names_item_and_offset(tmp_path):
    images, labels = random_set(6, 3, 5)
    labels[4] = 12
    img_file, lab_file = write_pair(tmp_path, images, labels)
    with pytest.raises(idx.IdxError, match=re.escape(
            f"{lab_file}: expected labels 0..9, found 12 (item 4, byte offset 12)")):
        convert.convert(img_file, lab_file, tmp_path / "db", num_classes=10)
    assert not (tmp_path / "db").exists()


def test_image_and_label_counts_must_agree(tmp_path):
    images, labels = random_set(6, 3, 5)
    img_file, lab_file = write_pair(tmp_path, images, labels[:5])
    with pytest.raises(idx.IdxError, match=re.escape(f"{img_file}: expected 5 images to match {lab_file}, found 6")):
        convert.convert(img_file, lab_file, tmp_path / "db")


def test_truncated_labels_are_reported(tmp_path):
    lab_file = write(tmp_path / "labels", labels_bytes(np.arange(10) % 10)[:-3])
    with pytest.raises(idx.IdxError, match=re.escape(
            f"{lab_file}: truncated: 10 items of 1 bytes declared (18 bytes in all), data ends at byte offset 15")):
        idx.read_labels(lab_file)


def test_existing_database_is_not_overwritten(tmp_path):
    images, labels = random_set(3, 2, 2)
    img_file, lab_file = write_pair(tmp_path, images, labels)
    (tmp_path / "db").mkdir()
    (tmp_path / "db" / "keep").write_text("x")
    with pytest.raises(Exception, match="already exists; remove it or use --force"):
        convert.convert(img_file, lab_file, tmp_path / "db")
    assert (tmp_path / "db" / "keep").read_text() == "x"


@pytest.mark.parametrize("how,reason", [
    ("deflate", "corrupt gzip: Error -3 while decompressing data: invalid block type"),
    ("truncated", "corrupt gzip: the compressed stream ends early"),
    ("crc", "corrupt gzip: CRC check failed"),
])
def test_corrupt_gzip_is_named_and_leaves_no_database(tmp_path, how, reason):
    images, labels = random_set(40, 28, 28)
    img_file, lab_file = write_pair(tmp_path, images, labels, compress=True)
    body = img_file.read_bytes()
    img_file.write_bytes({"deflate": body[:10] + bytes([0xFF] * 8) + body[18:], "truncated": body[: len(body) // 2],
                          "crc": body[:-8] + bytes(4) + body[-4:]}[how])
    with pytest.raises(idx.IdxError, match=re.escape(f"{img_file}: {reason}")):
        convert.convert(img_file, lab_file, tmp_path / "db")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["images-idx3-ubyte", "labels-idx1-ubyte"]


def test_missing_file_and_folder_are_named(tmp_path):
    images, labels = random_set(3, 2, 2)
    img_file, lab_file = write_pair(tmp_path, images, labels)
    with pytest.raises(idx.IdxError, match=re.escape(f"{tmp_path / 'nope'}: no such file or directory; expected an IDX file")):
        convert.convert(img_file, tmp_path / "nope", tmp_path / "db")
    with pytest.raises(idx.IdxError, match=re.escape(f"{tmp_path}: is a directory; expected an IDX file")):
        convert.convert(tmp_path, lab_file, tmp_path / "db")


def test_image_larger_than_a_datum_is_refused_from_the_header(tmp_path):
    img_file = write(tmp_path / "images", struct.pack(">IIII", 2051, 5, 60000, 60000), compress=True)
    with pytest.raises(idx.IdxError, match=re.escape(
            f"{img_file}: expected items of at most 2147483647 bytes (a Caffe Datum's limit), "
            "found 60000x60000 = 3600000000 bytes declared at byte offset 8")):
        idx.image_header(img_file)


@pytest.mark.parametrize("compress", [False, True])
def test_huge_declared_counts_are_truncation_not_memory_errors(tmp_path, compress):
    img_file = write(tmp_path / "images", struct.pack(">IIII", 2051, 4_000_000_000, 1, 1) + b"\x07" * 10, compress)
    with pytest.raises(idx.IdxError, match=re.escape(f"{img_file}: truncated: 4000000000 items of 1 bytes declared")):
        for _ in idx.iter_images(img_file):
            pass
    lab_file = write(tmp_path / "labels", struct.pack(">II", 2049, 4_000_000_000) + b"\x01" * 10, compress)
    with pytest.raises(idx.IdxError, match=re.escape(f"{lab_file}: truncated: 4000000000 items of 1 bytes declared")):
        idx.read_labels(lab_file)
    big = write(tmp_path / "big", struct.pack(">IIII", 2051, 60000, 30000, 30000) + bytes(100))
    with pytest.raises(idx.IdxError, match=re.escape(f"{big}: truncated: 60000 items of 900000000 bytes declared")):
        next(idx.iter_images(big))

