"""Contact sheets: drawn from the database Caffe reads, and every failure named, never a traceback."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from caffetool.data import convert, datum, db, sheet
from caffetool.errors import DataError

from .idxfiles import random_set, write_pair
from .smalldisk import small_disk


def database(folder, n=20, classes=3, rows=6, cols=5):
    images, labels = random_set(n, rows, cols, classes=classes)
    convert.convert(*write_pair(folder / "idx", images, labels), folder / "db")
    return folder / "db", images, labels


def test_one_labelled_row_per_class_with_the_first_images(engine, tmp_path):
    path, images, labels = database(tmp_path)
    out = sheet.contact_sheet(path, ["a", "b", "c"], tmp_path / "sheet" / "contact.png", engine, per_class=2)
    drawn = cv2.imread(str(out))
    h, w = 6 * sheet.SCALE, 5 * sheet.SCALE
    assert drawn.shape == (3 * (h + 4) + 4, sheet.LABEL_WIDTH + 2 * (w + 4) + 4, 3)
    first_of_b = images[list(labels).index(1)]
    y, x = 4 + (h + 4), sheet.LABEL_WIDTH + 4
    assert np.array_equal(drawn[y : y + h : sheet.SCALE, x : x + w : sheet.SCALE, 0], first_of_b)
    assert sorted(p.name for p in out.parent.iterdir()) == ["contact.png"]


def test_a_database_without_the_named_classes_is_named(engine, tmp_path):
    names = [f"class {k}" for k in range(3)]
    images, labels = random_set(4, 6, 5)
    other = tmp_path / "other"
    writer = db.Writer(other, "lmdb")
    writer.put_chunk(db.keys(0, 4), datum.encode_chunk(images.tobytes(), bytes([200] * 4), 4, 1, 6, 5))
    writer.close()
    with pytest.raises(DataError) as err:
        sheet.contact_sheet(other, names, tmp_path / "contact.png", engine)
    assert str(err.value) == f"{other} holds no images labelled 0 to 2: no contact sheet to draw"
    assert not (tmp_path / "contact.png").exists()


def test_images_of_four_channels_are_refused_by_name(engine, tmp_path):
    rgba = np.zeros((2, 4, 3, 3), np.uint8)
    path = tmp_path / "rgba"
    writer = db.Writer(path, "lmdb")
    writer.put_chunk(db.keys(0, 2), datum.encode_chunk(rgba.tobytes(), bytes([0, 1]), 2, 4, 3, 3))
    writer.close()
    with pytest.raises(DataError, match=rf"^{path} holds 4-channel images; a contact sheet shows 1 or 3 channels$"):
        sheet.contact_sheet(path, ["a", "b"], tmp_path / "contact.png", engine)


def test_a_full_disk_is_named_and_leaves_no_half_image(engine, tmp_path):
    path, _, _ = database(tmp_path, n=400, rows=28, cols=28)
    with small_disk(tmp_path / "disk", "12k") as disk:
        out = disk / "contact_sheet.png"
        with pytest.raises(DataError) as err:
            sheet.contact_sheet(path, ["a", "b", "c"], out, engine)
        assert str(err.value) == f"cannot write {out}: No space left on device"
        assert list(disk.iterdir()) == []


def test_a_file_where_the_folder_should_be_is_named(engine, tmp_path):
    path, _, _ = database(tmp_path)
    (tmp_path / "out").write_text("a file")
    out = tmp_path / "out" / "contact.png"
    with pytest.raises(DataError, match=f"^cannot write {out}: {out.parent} is a file, not a folder$"):
        sheet.contact_sheet(path, ["a", "b", "c"], out, engine)
