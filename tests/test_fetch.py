"""`data.*` on the real Fashion-MNIST from Debian's package, as a user runs them."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import cv2
import pytest

from caffetool import fsio
from caffetool.data import fetch, layout
from caffetool.data.registry import FASHION_MNIST
from caffetool.engine.locate import caffe_env
from caffetool.errors import ConfigError, DataError

from .conftest import PROJECT
from .idxfiles import random_set, write_pair
from .smalldisk import small_disk
from .test_tasks_engine import invoke


@pytest.fixture(scope="module")
def fetched(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("data")
    done = invoke("data.fetch", "--dataset", "fashion-mnist", "--data-dir", str(data_dir))
    assert done.returncode == 0, done.stderr
    return data_dir, done


def test_fetch_writes_databases_labels_and_manifest(fetched):
    data_dir, done = fetched
    assert f"fashion-mnist: 60000 train + 10000 test images (1x28x28) as lmdb in {data_dir}/fashion-mnist" in done.stdout
    ds = layout.load(FASHION_MNIST, data_dir)
    m = ds.manifest
    assert m["splits"]["train"]["histogram"] == [6000] * 10
    assert m["splits"]["test"]["histogram"] == [1000] * 10
    assert ds.labels_file.read_text().splitlines() == list(FASHION_MNIST.classes)
    assert set(m["files"]) == {"train-images", "train-labels", "test-images", "test-labels"}
    assert all(len(f["sha256"]) == 64 for f in m["files"].values())
    assert sorted(p.name for p in (data_dir / "fashion-mnist").iterdir()) == [
        "labels.txt", "manifest.json", "test_lmdb", "train_lmdb"]
    assert [p.name for p in data_dir.iterdir()] == ["fashion-mnist"]  # no temporary left


def test_second_fetch_does_nothing_and_says_so(fetched):
    data_dir, _ = fetched
    before = (data_dir / "fashion-mnist" / "manifest.json").stat().st_mtime_ns
    done = invoke("data.fetch", "--dataset", "fashion-mnist", "--data-dir", str(data_dir))
    assert done.returncode == 0
    assert "already present and verified" in done.stdout
    assert (data_dir / "fashion-mnist" / "manifest.json").stat().st_mtime_ns == before


def test_other_backend_needs_force(fetched):
    data_dir, _ = fetched
    with pytest.raises(ConfigError, match="holds lmdb databases; rerun with --force to replace them with leveldb"):
        fetch.fetch(FASHION_MNIST, data_dir, backend="leveldb", progress=False)


def test_force_rebuilds_as_leveldb(tmp_path):
    fetch.fetch(FASHION_MNIST, tmp_path, progress=False, say=lambda _: None)
    result = fetch.fetch(FASHION_MNIST, tmp_path, backend="leveldb", force=True, progress=False, say=lambda _: None)
    assert result.dataset.backend == "leveldb"
    assert sorted(p.name for p in (tmp_path / "fashion-mnist").iterdir()) == [
        "labels.txt", "manifest.json", "test_leveldb", "train_leveldb"]
    assert [p.name for p in tmp_path.iterdir()] == ["fashion-mnist"]


@pytest.mark.engine
def test_info_prints_histogram_and_writes_a_contact_sheet(fetched):
    data_dir, _ = fetched
    done = invoke("data.info", "--dataset", "fashion-mnist", "--data-dir", str(data_dir), "--per-class", "5")
    assert done.returncode == 0, done.stderr
    assert re.search(r"^ +9 Ankle boot +6000 +1000$", done.stdout, re.M)
    image = cv2.imread(str(data_dir / "fashion-mnist" / "contact_sheet.png"))
    assert image is not None and image.shape[0] == 10 * (56 + 4) + 4


def test_mean_equals_compute_image_mean(fetched, engine, tmp_path):
    data_dir, _ = fetched
    done = invoke("data.mean", "--dataset", "fashion-mnist", "--data-dir", str(data_dir))
    assert done.returncode == 0, done.stderr
    ref = tmp_path / "ref.binaryproto"
    subprocess.run([str(engine.tool("compute_image_mean")), str(data_dir / "fashion-mnist" / "train_lmdb"),
                    str(ref)], check=True, capture_output=True, env=caffe_env())
    assert (data_dir / "fashion-mnist" / "mean.binaryproto").read_bytes() == ref.read_bytes()


def test_missing_data_set_says_how_to_fetch(tmp_path):
    done = invoke("data.info", "--dataset", "mnist", "--data-dir", str(tmp_path))
    assert done.returncode == 1
    assert done.stderr.strip() == (f"Error: data set mnist not found in {tmp_path} — "
                                   "run `caffetool data.fetch --dataset mnist`")


def test_unknown_data_set_lists_the_choices():
    done = invoke("data.fetch", "--dataset", "cifar")
    assert done.stderr.strip() == "Error: unknown --dataset 'cifar'; choose one of: mnist, fashion-mnist"


def test_malformed_idx_through_the_task_exits_non_zero_and_leaves_nothing(tmp_path):
    images, labels = random_set(4, 3, 5)
    img_file, lab_file = write_pair(tmp_path / "in", images, labels)
    img_file.write_bytes(img_file.read_bytes()[:-1])
    done = invoke("data.convert", str(img_file), str(lab_file), str(tmp_path / "out" / "db"))
    assert done.returncode == 1
    assert done.stderr.startswith(f"Error: {img_file}: truncated: 4 items of 15 bytes declared")
    assert list((tmp_path / "out").iterdir()) == []


def fetch_child(data_dir, *flags):
    """`caffetool data.fetch` for Fashion-MNIST as a separate process, to be killed by the test."""
    return subprocess.Popen([sys.executable, "-m", "invoke", "data.fetch", "--dataset", "fashion-mnist",
                             "--data-dir", str(data_dir), *flags], cwd=PROJECT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def kill_mid_conversion(child, out, marker):
    """SIGKILL ``child`` once a file named ``marker`` exists in a staging folder of ``out``."""
    deadline = time.monotonic() + 120
    try:
        while not any(next(s.rglob(marker), None) for s in fsio.staging_folders(out)):
            assert child.poll() is None, "the fetch finished before it could be killed mid-conversion"
            assert time.monotonic() < deadline, "the fetch never started converting"
            time.sleep(0.002)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()


def test_killed_fetch_leaves_staging_that_the_next_fetch_removes(tmp_path):
    out = tmp_path / "fashion-mnist"
    kill_mid_conversion(fetch_child(tmp_path), out, "data.mdb")
    assert len(fsio.staging_folders(out)) == 1 and not out.exists()
    result = fetch.fetch(FASHION_MNIST, tmp_path, progress=False, say=lambda _: None)
    assert result.dataset.count("train") == 60000
    assert [p.name for p in tmp_path.iterdir()] == ["fashion-mnist"]


def test_force_replaces_only_a_data_set_it_made(tmp_path):
    """The data set's folder name taken by someone else's files: ``--force`` refuses it by name."""
    theirs = tmp_path / FASHION_MNIST.name
    theirs.mkdir()
    (theirs / "train.csv").write_text("mine")
    with pytest.raises(ConfigError, match=r"fashion-mnist holds files caffetool did not make \(train.csv\), not a "
                                          r"data set"):
        fetch.fetch(FASHION_MNIST, tmp_path, force=True, progress=False, say=lambda _: None)
    assert [p.name for p in theirs.iterdir()] == ["train.csv"]


def test_forced_refetch_keeps_the_old_data_set_until_the_new_one_is_complete(tmp_path):
    fetch.fetch(FASHION_MNIST, tmp_path, progress=False, say=lambda _: None)
    out = tmp_path / "fashion-mnist"
    manifest = (out / "manifest.json").read_bytes()
    child = fetch_child(tmp_path, "--force", "--backend", "leveldb")
    kill_mid_conversion(child, out, "CURRENT")
    assert layout.load(FASHION_MNIST, tmp_path).backend == "lmdb"
    assert (out / "manifest.json").read_bytes() == manifest
    result = fetch.fetch(FASHION_MNIST, tmp_path, backend="leveldb", force=True, progress=False, say=lambda _: None)
    assert result.dataset.backend == "leveldb"
    assert [p.name for p in tmp_path.iterdir()] == ["fashion-mnist"]


@pytest.fixture
def own_copy(fetched, tmp_path):
    """A copy of the fetched data set for a test to damage: (data dir, train database)."""
    data_dir, _ = fetched
    shutil.copytree(data_dir / "fashion-mnist", tmp_path / "fashion-mnist")
    return tmp_path, tmp_path / "fashion-mnist" / "train_lmdb"


FIX = "rerun `caffetool data.fetch --dataset fashion-mnist --force`"


@pytest.mark.engine
@pytest.mark.parametrize("task", [("data.info",), ("data.mean",), ("train", "--max-iter", "10")])
def test_truncated_lmdb_is_named_with_the_fix_by_every_reader(own_copy, task):
    data_dir, train_db = own_copy
    full = (train_db / "data.mdb").stat().st_size
    os.truncate(train_db / "data.mdb", full // 2)
    done = invoke(*task, "--dataset", "fashion-mnist", "--data-dir", str(data_dir),
                  *(["--runs-dir", str(data_dir / "runs")] if task[0] == "train" else []))
    assert (done.returncode, done.stderr.strip()) == (1, (
        f"Error: {train_db} is truncated: data.mdb holds {full // 2} bytes, its last page ends at byte {full}; {FIX}"))
    assert not (data_dir / "runs").exists()


def test_zero_byte_lmdb_is_named_with_the_fix(own_copy):
    data_dir, train_db = own_copy
    os.truncate(train_db / "data.mdb", 0)
    done = invoke("data.info", "--dataset", "fashion-mnist", "--data-dir", str(data_dir))
    assert (done.returncode, done.stderr.strip()) == (1, f"Error: {train_db} is empty: its data.mdb holds 0 bytes; {FIX}")


def test_full_data_disk_is_refused_before_converting_and_leaves_nothing(tmp_path):
    with small_disk(tmp_path / "small", "20m") as disk:
        with pytest.raises(DataError) as err:
            fetch.fetch(FASHION_MNIST, disk, progress=False, say=lambda _: None)
        left = list(disk.iterdir())
    assert str(err.value) == (f"{disk} has 21.0 MB free; the fashion-mnist databases need about 60.4 MB — "
                              "free space there or pass --data-dir elsewhere")
    assert left == []


def test_full_cache_disk_is_one_error_and_leaves_no_partial_file(tmp_path, monkeypatch):
    with small_disk(tmp_path / "cache", "5m") as disk:
        monkeypatch.setenv("XDG_CACHE_HOME", str(disk))
        with pytest.raises(DataError) as err:
            fetch.fetch(FASHION_MNIST, tmp_path / "data", progress=False, say=lambda _: None)
        left = sorted(str(p.relative_to(disk)) for p in disk.rglob("*"))
    assert re.fullmatch(rf"cannot write {re.escape(str(disk))}/caffetool/datasets/fashion-mnist\S*: "
                        r"no space left on device; nothing half-written was kept — free space or set "
                        r"XDG_CACHE_HOME to a folder with room, then rerun", str(err.value)), str(err.value)
    assert left == ["caffetool", "caffetool/datasets", "caffetool/datasets/fashion-mnist"]
    assert not (tmp_path / "data").exists()
