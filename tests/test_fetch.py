"""`data.*` on the real Fashion-MNIST from Debian's package, as a user runs them."""

from __future__ import annotations

import re
import subprocess

import cv2
import pytest

from caffetool.data import fetch, layout
from caffetool.data.registry import FASHION_MNIST
from caffetool.errors import ConfigError

from .idxfiles import random_set, write_pair
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
                    str(ref)], check=True, capture_output=True)
    assert (data_dir / "fashion-mnist" / "mean.binaryproto").read_bytes() == ref.read_bytes()


def test_missing_data_set_says_how_to_fetch(tmp_path):
    done = invoke("data.info", "--dataset", "mnist", "--data-dir", str(tmp_path))
    assert done.returncode == 1
    assert done.stderr.strip() == (f"Error: data set mnist not found in {tmp_path} — "
                                   "run `invoke data.fetch --dataset mnist`")


def test_unknown_data_set_lists_the_choices():
    done = invoke("data.fetch", "--dataset", "cifar")
    assert done.stderr.strip() == "Error: unknown data set 'cifar' for --dataset; choose one of: mnist, fashion-mnist"


def test_malformed_idx_through_the_task_exits_non_zero_and_leaves_nothing(tmp_path):
    images, labels = random_set(4, 3, 5)
    img_file, lab_file = write_pair(tmp_path / "in", images, labels)
    img_file.write_bytes(img_file.read_bytes()[:-1])
    done = invoke("data.convert", str(img_file), str(lab_file), str(tmp_path / "out" / "db"))
    assert done.returncode == 1
    assert done.stderr.startswith(f"Error: {img_file}: truncated: 4 items of 15 bytes declared")
    assert list((tmp_path / "out").iterdir()) == []
