"""``data.images``: record for record what the engine's ``convert_imageset`` writes for the same list."""

from __future__ import annotations

import json
import subprocess

import cv2
import lmdb
import numpy as np
import pytest

from caffetool.data import datum, db, imageset
from caffetool.engine.locate import caffe_env
from caffetool.errors import ConfigError, DataError

from .test_tasks_engine import invoke

CLASSES = ("cat", "dog", "zebra")
BAD = {"cat/notes.txt": "not an image OpenCV can read", "dog/broken.jpg": "not an image OpenCV can read"}


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """Three classes of PNG and JPEG images, colour and gray, of different sizes, plus two bad files."""
    root = tmp_path_factory.mktemp("images") / "photos"
    rng = np.random.default_rng(0)
    for k, name in enumerate(CLASSES):
        (root / name).mkdir(parents=True)
        for i in range(4):
            height, width = 20 + 3 * i + k, 30 - 2 * i
            shape = (height, width) if i % 2 else (height, width, 3)
            pixels = rng.integers(0, 256, shape, dtype=np.uint8)
            assert cv2.imwrite(str(root / name / f"im {i}.{'png' if i < 2 else 'jpg'}"), pixels)
    (root / "dog" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a JPEG")
    (root / "cat" / "notes.txt").write_text("not an image\n")
    return root


def lmdb_records(path):
    with lmdb.open(str(path), readonly=True, lock=False).begin() as txn:
        return [(bytes(k), bytes(v)) for k, v in txn.cursor()]


def convert_imageset(engine, root, listing, out, *flags):
    subprocess.run([str(engine.tool("convert_imageset")), *flags, f"{root}/", str(listing), str(out)],
                   check=True, capture_output=True, env=caffe_env())
    return out


def build(root, out, options=imageset.Options(), **kw):
    said = []
    result = imageset.build(root, out, options, say=said.append, **kw)
    return result, said


MODES = {
    "plain": (imageset.Options(), []),
    "resized": (imageset.Options(resize_height=16, resize_width=12), ["--resize_height=16", "--resize_width=12"]),
    "gray": (imageset.Options(gray=True), ["--gray"]),
    "gray-resized": (imageset.Options(gray=True, resize_height=9, resize_width=31),
                     ["--gray", "--resize_height=9", "--resize_width=31"]),
    "encoded": (imageset.Options(encoded=True), ["--encoded"]),
    "encoded-png": (imageset.Options(encoded=True, encode_type="png"), ["--encoded", "--encode_type=png"]),
    "encoded-jpg-resized": (imageset.Options(encode_type="JPG", resize_height=16, resize_width=12),
                            ["--encoded", "--encode_type=jpg", "--resize_height=16", "--resize_width=12"]),
    "encoded-gray": (imageset.Options(encoded=True, gray=True), ["--encoded", "--gray"]),
}


@pytest.mark.parametrize("mode", MODES)
def test_records_equal_convert_imageset(engine, tree, tmp_path, mode):
    options, flags = MODES[mode]
    result, said = build(tree, tmp_path / "ds", options)
    ours = lmdb_records(tmp_path / "ds" / "train_lmdb")
    theirs = lmdb_records(convert_imageset(engine, tree, tmp_path / "ds" / "train.txt", tmp_path / "ref", *flags))
    assert [k for k, _ in ours] == [k for k, _ in theirs]
    assert ours == theirs
    assert len(ours) == 12 and result.splits["train"].count == 12
    assert ours[3][0] == b"00000003_cat/im 3.jpg" and ours[4][0] == b"00000006_dog/im 0.png"  # 4, 5 skipped
    assert said == [f"skipped {tree / path}: {reason}" for path, reason in BAD.items()]


def test_leveldb_records_equal_convert_imageset(engine, tree, tmp_path):
    build(tree, tmp_path / "ds", imageset.Options(backend="LevelDB", resize_height=10, resize_width=10))
    ref = convert_imageset(engine, tree, tmp_path / "ds" / "train.txt", tmp_path / "ref", "--backend=leveldb",
                           "--resize_height=10", "--resize_width=10")
    assert list(db.read(tmp_path / "ds" / "train_leveldb")) == list(db.read(ref))
    assert sorted(p.name for p in (tmp_path / "ds").iterdir()) == [
        "labels.txt", "manifest.json", "train.txt", "train_leveldb"]


def test_folder_layout_labels_and_manifest_name_the_skipped_files(tree, tmp_path):
    result, _ = build(tree, tmp_path / "ds")
    out = tmp_path / "ds"
    assert (out / "labels.txt").read_text() == "cat\ndog\nzebra\n"
    assert (out / "train.txt").read_text().splitlines()[:6] == [
        "cat/im 0.png 0", "cat/im 1.png 0", "cat/im 2.jpg 0", "cat/im 3.jpg 0", "cat/notes.txt 0", "dog/broken.jpg 1"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["classes"] == list(CLASSES) and manifest["backend"] == "lmdb"
    assert manifest["splits"] == {"train": {"db": "train_lmdb", "list": "train.txt", "count": 12, "shape": None,
                                            "histogram": [4, 4, 4]}}
    assert manifest["skipped"] == [{"split": "train", "path": p, "reason": r} for p, r in BAD.items()]
    assert result.classes == list(CLASSES)
    assert [p.name for p in tmp_path.iterdir()] == ["ds"]


def test_strict_refuses_the_corrupt_file_and_leaves_nothing(tree, tmp_path):
    with pytest.raises(DataError) as err:
        build(tree, tmp_path / "ds", strict=True)
    assert str(err.value) == (f"{tree}/cat/notes.txt: not an image OpenCV can read (--strict refuses it; "
                              "remove it from the input or leave out --strict to skip it)")
    assert list(tmp_path.iterdir()) == []


def test_list_file_with_spaces_in_paths_and_its_own_labels(engine, tree, tmp_path):
    listing = tmp_path / "list.txt"
    listing.write_text("zebra/im 1.png 7\n\ncat/im 2.jpg 3\ndog/missing.png 1\n")
    result, said = build(tree, tmp_path / "ds", imageset.Options(resize_height=5, resize_width=6), list_file=listing)
    assert said == [f"skipped {tree}/dog/missing.png: not found"]
    ours = lmdb_records(tmp_path / "ds" / "train_lmdb")
    assert (tmp_path / "ds" / "train.txt").read_text() == "zebra/im 1.png 7\ncat/im 2.jpg 3\ndog/missing.png 1\n"
    theirs = lmdb_records(convert_imageset(engine, tree, tmp_path / "ds" / "train.txt", tmp_path / "ref",
                                           "--resize_height=5", "--resize_width=6"))
    assert ours == theirs and [k for k, _ in ours] == [b"00000000_zebra/im 1.png", b"00000001_cat/im 2.jpg"]
    assert (tmp_path / "ds" / "labels.txt").read_text().splitlines() == [str(k) for k in range(8)]
    assert result.splits["train"].histogram == [0, 0, 0, 1, 0, 0, 0, 1]


def test_shuffled_split_is_reproducible_and_equal_to_convert_imageset(engine, tree, tmp_path):
    options = imageset.Options(resize_height=8, resize_width=8)
    first, _ = build(tree, tmp_path / "one", options, shuffle=True, seed=5, val_fraction=0.25)
    build(tree, tmp_path / "two", options, shuffle=True, seed=5, val_fraction=0.25)
    build(tree, tmp_path / "other", options, shuffle=True, seed=6, val_fraction=0.25)
    for name in ("train.txt", "test.txt"):
        assert (tmp_path / "one" / name).read_text() == (tmp_path / "two" / name).read_text()
    train = (tmp_path / "one" / "train.txt").read_text().splitlines()
    test = (tmp_path / "one" / "test.txt").read_text().splitlines()
    assert len(test) == 4 and len(train) == 10
    assert sorted(train + test) == sorted((tmp_path / "two" / "train.txt").read_text().splitlines() + test)
    assert train + test != sorted(train + test)  # shuffled
    assert (tmp_path / "other" / "test.txt").read_text() != (tmp_path / "one" / "test.txt").read_text()
    for split in ("train", "test"):
        ours = lmdb_records(tmp_path / "one" / f"{split}_lmdb")
        assert ours == lmdb_records(tmp_path / "two" / f"{split}_lmdb")
        ref = convert_imageset(engine, tree, tmp_path / "one" / f"{split}.txt", tmp_path / f"ref_{split}",
                               "--resize_height=8", "--resize_width=8")
        assert ours == lmdb_records(ref)
    manifest = json.loads((tmp_path / "one" / "manifest.json").read_text())
    assert {s: (v["count"], v["shape"]) for s, v in manifest["splits"].items()} == {
        "train": (first.splits["train"].count, [3, 8, 8]), "test": (first.splits["test"].count, [3, 8, 8])}
    assert first.splits["train"].count + first.splits["test"].count == 12


@pytest.mark.parametrize("flags", [["--resize-height", "6", "--resize-width", "7"],
                                   ["--encode-type", "png", "--resize-height", "6", "--resize-width", "7", "--gray"]])
def test_mean_of_any_database_equals_compute_image_mean(engine, tree, tmp_path, flags):
    done = invoke("data.images", str(tree), "--out", str(tmp_path / "ds"), *flags)
    assert done.returncode == 0, done.stderr
    assert f"train: 12 images, 2 skipped in {tmp_path}/ds/train_lmdb" in done.stdout
    done = invoke("data.mean", "--db", str(tmp_path / "ds" / "train_lmdb"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("mean of 12 records (overall ")
    assert done.stdout.rstrip().endswith(f"written to {tmp_path}/ds/mean.binaryproto")
    ref = tmp_path / "ref.binaryproto"
    subprocess.run([str(engine.tool("compute_image_mean")), str(tmp_path / "ds" / "train_lmdb"), str(ref)],
                   check=True, capture_output=True, env=caffe_env())
    assert (tmp_path / "ds" / "mean.binaryproto").read_bytes() == ref.read_bytes()


def test_encode_matches_protobuf(caffe):
    message = caffe.proto.caffe_pb2.Datum(channels=3, height=1, width=2, data=bytes(range(6)), label=-2, encoded=False)
    assert datum.encode(bytes(range(6)), -2, False, (3, 1, 2)) == message.SerializeToString()
    message = caffe.proto.caffe_pb2.Datum(data=b"\x89PNG", label=300, encoded=True)
    assert datum.encode(b"\x89PNG", 300, True) == message.SerializeToString()


def test_options_are_checked():
    with pytest.raises(ConfigError, match="^--resize-height and --resize-width go together; give both or neither$"):
        imageset.Options(resize_height=4)
    with pytest.raises(ConfigError, match="--encode-type"):
        imageset.Options(encode_type="gif")


def error_of(*args):
    done = invoke("data.images", *args)
    assert done.returncode == 1 and done.stdout == ""
    return done.stderr.strip()


def test_cli_errors_are_one_line(tree, tmp_path):
    missing = tmp_path / "nowhere"
    assert error_of(str(missing), "--out", str(tmp_path / "a")) == f"Error: {missing} does not exist"
    (tmp_path / "empty").mkdir()
    assert error_of(str(tmp_path / "empty"), "--out", str(tmp_path / "a")) == (
        f"Error: {tmp_path}/empty holds no class folders; put each class's images in a sub-folder named after it")
    listing = tmp_path / "list.txt"
    listing.write_text("cat/im 0.png 0\ncat/im 1.png\n")
    assert error_of(str(tree), "--list", str(listing), "--out", str(tmp_path / "a")) == (
        f"Error: {listing}:2: expected `PATH LABEL`, got 'cat/im 1.png'")
    assert error_of(str(tree), "--out", str(tmp_path / "a"), "--val-fraction", "0.01") == (
        "Error: --val-fraction 0.01 of 14 images leaves an empty split")
    (tmp_path / "a").mkdir()
    assert error_of(str(tree), "--out", str(tmp_path / "a")) == (
        f"Error: {tmp_path}/a already exists; pass --force to replace it")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "empty", "list.txt"]


def test_a_full_disk_leaves_nothing_half_written(tree, tmp_path):
    from .smalldisk import small_disk

    with small_disk(tmp_path / "disk", "256k") as disk:
        with pytest.raises(DataError) as err:
            build(tree, disk / "ds", imageset.Options(resize_height=200, resize_width=200))
        assert str(err.value).startswith(f"could not write {disk}/.ds.staging-")
        assert str(err.value).endswith("/built/train_lmdb: mdb_txn_commit: Input/output error "
                                       "(0.0 MB left on its file system)")
        assert list(disk.iterdir()) == []
