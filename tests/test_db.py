"""Databases: damaged LMDB and LevelDB files are named errors, never a SIGBUS or a traceback."""

from __future__ import annotations

import os
import re

import pytest

from caffetool.data import convert, db
from caffetool.errors import ConfigError, DataError

from .idxfiles import random_set, write_pair
from .smalldisk import small_disk


def make_db(tmp_path, backend="lmdb", n=2000):
    images, labels = random_set(n, 28, 28)
    img_file, lab_file = write_pair(tmp_path / "idx", images, labels)
    convert.convert(img_file, lab_file, tmp_path / "db", backend)
    return tmp_path / "db"


def test_whole_lmdb_is_counted_by_walking_it(tmp_path):
    assert db.count(make_db(tmp_path)) == 2000


def test_truncated_lmdb_is_named_before_any_record_is_read(tmp_path):
    path = make_db(tmp_path)
    data = path / "data.mdb"
    full = data.stat().st_size
    os.truncate(data, full // 2)
    message = f"{path} is truncated: data.mdb holds {full // 2} bytes, its last page ends at byte {full}"
    with pytest.raises(DataError, match=re.escape(message)):
        db.count(path)
    with pytest.raises(DataError, match=re.escape(message)):
        list(db.read(path))


def test_zero_byte_lmdb_is_named(tmp_path):
    path = make_db(tmp_path, n=10)
    os.truncate(path / "data.mdb", 0)
    with pytest.raises(DataError, match=re.escape(f"{path} is empty: its data.mdb holds 0 bytes")):
        db.count(path)


def test_lmdb_cut_inside_its_meta_pages_is_named(tmp_path):
    path = make_db(tmp_path, n=10)
    os.truncate(path / "data.mdb", 100)
    with pytest.raises(DataError, match=re.escape(f"{path} is not a readable LMDB database (")):
        db.count(path)


def test_damaged_leveldb_is_named(tmp_path):
    path = make_db(tmp_path, "leveldb")
    assert db.count(path) == 2000
    for table in path.glob("*.ldb"):
        os.truncate(table, table.stat().st_size // 2)
    with pytest.raises(DataError, match=re.escape(f"{path} is damaged: ")):
        db.count(path)


def test_folder_that_is_no_database_is_named(tmp_path):
    with pytest.raises(DataError, match=re.escape(f"{tmp_path} is neither an LMDB nor a LevelDB database")):
        db.count(tmp_path)


def test_backend_names_ignore_case_and_list_the_choices():
    assert db.check_backend("LMDB") == "lmdb"
    with pytest.raises(ConfigError, match=re.escape("unknown --backend 'hdf5'; choose one of: lmdb, leveldb")):
        db.check_backend("hdf5")


@pytest.mark.parametrize("backend", ["lmdb", "leveldb"])
def test_full_disk_while_writing_is_one_error_naming_the_database(tmp_path, backend):
    images, labels = random_set(4096, 28, 28)  # 3.2 MB of records for a 2 MB disk
    img_file, lab_file = write_pair(tmp_path / "idx", images, labels)
    with small_disk(tmp_path / "small", "2m") as disk:
        with pytest.raises(DataError) as err:
            convert.convert(img_file, lab_file, disk / "db", backend)
        left = list(disk.iterdir())
    assert re.match(rf"could not (write|create) {re.escape(str(disk))}/\S+: .+ \(\d+\.\d MB left on its file system\)",
                    str(err.value)), str(err.value)
    assert left == []
