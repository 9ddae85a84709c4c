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


def build(root, out, options=imageset.ImagesetFlags(), **kw):
    said = []
    result = imageset.build(root, out, options, say=said.append, **kw)
    return result, said


MODES = {
    "plain": (imageset.ImagesetFlags(mixed_sizes=True), []),
    "resized": (imageset.ImagesetFlags(resize_height=16, resize_width=12), ["--resize_height=16", "--resize_width=12"]),
    "gray": (imageset.ImagesetFlags(gray=True, mixed_sizes=True), ["--gray"]),
    "gray-resized": (imageset.ImagesetFlags(gray=True, resize_height=9, resize_width=31),
                     ["--gray", "--resize_height=9", "--resize_width=31"]),
    "encoded": (imageset.ImagesetFlags(encoded=True, mixed_sizes=True), ["--encoded"]),
    "encoded-png": (imageset.ImagesetFlags(encoded=True, encode_type="png", mixed_sizes=True),
                    ["--encoded", "--encode_type=png"]),
    "encoded-jpg-resized": (imageset.ImagesetFlags(encode_type="JPG", resize_height=16, resize_width=12),
                            ["--encoded", "--encode_type=jpg", "--resize_height=16", "--resize_width=12"]),
    "encoded-gray": (imageset.ImagesetFlags(encoded=True, gray=True, mixed_sizes=True), ["--encoded", "--gray"]),
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
    build(tree, tmp_path / "ds", imageset.ImagesetFlags(backend="LevelDB", resize_height=10, resize_width=10))
    ref = convert_imageset(engine, tree, tmp_path / "ds" / "train.txt", tmp_path / "ref", "--backend=leveldb",
                           "--resize_height=10", "--resize_width=10")
    assert list(db.read(tmp_path / "ds" / "train_leveldb")) == list(db.read(ref))
    assert sorted(p.name for p in (tmp_path / "ds").iterdir()) == [
        "labels.txt", "manifest.json", "train.txt", "train_leveldb"]


def test_folder_layout_labels_and_manifest_name_the_skipped_files(tree, tmp_path):
    result, _ = build(tree, tmp_path / "ds", imageset.ImagesetFlags(mixed_sizes=True))
    out = tmp_path / "ds"
    assert (out / "labels.txt").read_text() == "cat\ndog\nzebra\n"
    assert (out / "train.txt").read_text().splitlines()[:6] == [
        "cat/im 0.png 0", "cat/im 1.png 0", "cat/im 2.jpg 0", "cat/im 3.jpg 0", "cat/notes.txt 0", "dog/broken.jpg 1"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["classes"] == list(CLASSES) and manifest["backend"] == "lmdb"
    assert manifest["splits"] == {"train": {"db": "train_lmdb", "list": "train.txt", "count": 12, "shape": None,
                                            "shapes": 12, "histogram": [4, 4, 4]}}
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
    result, said = build(tree, tmp_path / "ds", imageset.ImagesetFlags(resize_height=5, resize_width=6), list_file=listing)
    assert said == [f"skipped {tree}/dog/missing.png: not found"]
    ours = lmdb_records(tmp_path / "ds" / "train_lmdb")
    assert (tmp_path / "ds" / "train.txt").read_text() == "zebra/im 1.png 7\ncat/im 2.jpg 3\ndog/missing.png 1\n"
    theirs = lmdb_records(convert_imageset(engine, tree, tmp_path / "ds" / "train.txt", tmp_path / "ref",
                                           "--resize_height=5", "--resize_width=6"))
    assert ours == theirs and [k for k, _ in ours] == [b"00000000_zebra/im 1.png", b"00000001_cat/im 2.jpg"]
    assert (tmp_path / "ds" / "labels.txt").read_text().splitlines() == [str(k) for k in range(8)]
    assert result.splits["train"].histogram == [0, 0, 0, 1, 0, 0, 0, 1]


def test_shuffled_split_is_reproducible_and_equal_to_convert_imageset(engine, tree, tmp_path):
    options = imageset.ImagesetFlags(resize_height=8, resize_width=8)
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
        imageset.ImagesetFlags(resize_height=4)
    with pytest.raises(ConfigError, match="--encode-type"):
        imageset.ImagesetFlags(encode_type="gif")


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


def test_force_never_writes_over_the_images_or_someone_elses_folder(tree, tmp_path):
    """``--force`` replaces a data set caffetool made; the images (ROOT itself, or a folder holding it),
    a file, or a folder of other files are refused, and nothing in them is touched."""
    import shutil

    root = tmp_path / "photos"
    shutil.copytree(tree, root)
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    for out, why in ((root, f"{root} is the input {root}"), (tmp_path, f"{tmp_path} holds the input {root}")):
        assert error_of(str(root), "--out", str(out), "--force") == (
            f"Error: {why}, which replacing it would delete; write a data set somewhere else (nothing was changed)")
    (tmp_path / "report.pdf").write_text("mine")
    assert error_of(str(root), "--out", str(tmp_path / "report.pdf"), "--force") == (
        f"Error: {tmp_path}/report.pdf is a file, not a data set; choose another place (nothing was changed)")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    assert error_of(str(root), "--out", str(tmp_path / "mine"), "--force") == (
        f"Error: {tmp_path}/mine holds files caffetool did not make (notes.txt), not a data set; caffetool replaces "
        "only a data set it made itself: choose an empty or new folder (nothing was changed)")
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == sorted(
        [*before, "report.pdf", "mine", "mine/notes.txt"])
    one_size = ("--resize-height", "20", "--resize-width", "30")
    assert invoke("data.images", str(root), "--out", str(tmp_path / "ds"), *one_size).returncode == 0
    assert invoke("data.images", str(root), "--out", str(tmp_path / "ds"), "--force", *one_size).returncode == 0


def test_a_full_disk_leaves_nothing_half_written(tree, tmp_path):
    from .smalldisk import small_disk

    with small_disk(tmp_path / "disk", "256k") as disk:
        with pytest.raises(DataError) as err:
            build(tree, disk / "ds", imageset.ImagesetFlags(resize_height=200, resize_width=200))
        assert str(err.value).startswith(f"could not write {disk}/.ds.staging-")
        assert str(err.value).endswith("/built/train_lmdb: mdb_txn_commit: Input/output error "
                                       "(0.0 MB left on its file system)")
        assert list(disk.iterdir()) == []


def png_declaring(width: int, height: int) -> bytes:
    """A valid 1x1 PNG whose header declares ``width`` x ``height`` (its IHDR rewritten, CRC and all)."""
    import struct
    import zlib

    data = bytearray(cv2.imencode(".png", np.zeros((1, 1, 3), np.uint8))[1].tobytes())
    ihdr = data[12:29]  # b"IHDR" and its 13 bytes
    ihdr[4:12] = struct.pack(">II", width, height)
    data[12:29] = ihdr
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(ihdr)))
    return bytes(data)


@pytest.fixture
def two_classes(tmp_path):
    """Two classes of three 8x8 images each."""
    root = tmp_path / "two"
    for name in ("a", "b"):
        (root / name).mkdir(parents=True)
        for i in range(3):
            cv2.imwrite(str(root / name / f"{i}.png"), np.full((8, 8, 3), 40 * i, np.uint8))
    return root


def test_an_image_that_would_decode_past_the_limit_is_skipped_unread(two_classes, tmp_path):
    (two_classes / "a" / "huge.png").write_bytes(png_declaring(30000, 30000))
    done = invoke("data.images", str(two_classes), "--out", str(tmp_path / "ds"))
    assert done.returncode == 0, done.stderr
    assert (f"skipped {two_classes}/a/huge.png: image of 30000x30000 pixels is over the limit of 40,000,000 pixels"
            in done.stdout)
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    assert manifest["splits"]["train"]["count"] == 6 and manifest["skipped"][0]["path"] == "a/huge.png"
    assert error_of(str(two_classes), "--out", str(tmp_path / "strict"), "--strict").startswith(
        f"Error: {two_classes}/a/huge.png: image of 30000x30000 pixels is over the limit")


@pytest.mark.parametrize("flags,message", [
    (["--resize-height", "100000", "--resize-width", "100000"],
     "--resize-height 100000 --resize-width 100000 makes records of 30,000,000,000 bytes, over the limit of "
     "120,000,000 an image may decode to; choose a smaller size"),
])
def test_a_resize_past_the_record_limit_is_refused(two_classes, tmp_path, flags, message):
    assert error_of(str(two_classes), "--out", str(tmp_path / "ds"), *flags) == f"Error: {message}"
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize("lines,message", [
    ("a/0.png 0\nb/0.png 99999999999999999999\n", "{list}:2: label 99999999999999999999 is out of range; labels "
                                                  "number the classes from 0 (at most 99,999)"),
    ("a/0.png -1\nb/0.png 1\n", "{list}:1: label -1 is out of range; labels number the classes from 0 "
                                "(at most 99,999)"),
    ("a/0.png 0\nb/0.png 0\n", "every label in {list} is 0; a classifier learns two classes or more"),
])
def test_labels_that_are_no_class_numbers_are_refused(two_classes, tmp_path, lines, message):
    listing = tmp_path / "list.txt"
    listing.write_text(lines)
    assert error_of(str(two_classes), "--list", str(listing), "--out", str(tmp_path / "ds")) == \
        "Error: " + message.format(list=listing)


def test_one_class_folder_is_refused(two_classes, tmp_path):
    import shutil

    shutil.rmtree(two_classes / "b")
    assert error_of(str(two_classes), "--out", str(tmp_path / "ds")) == (
        f"Error: {two_classes} holds one class folder; a classifier learns two classes or more")


def test_mixed_sizes_are_refused_with_the_flags_that_fix_them(tree, tmp_path):
    done = invoke("data.images", str(tree), "--out", str(tmp_path / "ds"))
    assert done.returncode == 1 and done.stderr.strip().splitlines()[-1] == (
        f"Error: {tree} holds images of 12 sizes (30x20: 1, 28x23: 1, 26x26: 1, 24x29: 1, ...); Caffe's Data layer "
        "batches images of one size: pass --resize-height 20 --resize-width 30 (or --mixed-sizes for a net whose "
        "data layer crops them to one size)")
    assert not (tmp_path / "ds").exists()
    assert invoke("data.images", str(tree), "--out", str(tmp_path / "ds"), "--mixed-sizes").returncode == 0


def test_an_absolute_list_path_stays_under_root_as_in_convert_imageset(engine, two_classes, tmp_path):
    outside = tmp_path / "outside.png"
    cv2.imwrite(str(outside), np.full((8, 8, 3), 99, np.uint8))
    listing = tmp_path / "list.txt"
    listing.write_text(f"a/0.png 0\n{outside} 1\nb/1.png 1\n")
    result, said = build(two_classes, tmp_path / "ds", list_file=listing)
    assert said == [f"skipped {two_classes}{outside}: not found"]  # ROOT + "/" + the path, as Caffe joins them
    assert result.splits["train"].count == 2
    theirs = lmdb_records(convert_imageset(engine, two_classes, listing, tmp_path / "ref"))
    assert lmdb_records(tmp_path / "ds" / "train_lmdb") == theirs


def test_a_truncated_jpeg_is_stored_as_caffe_stores_it_and_named(engine, two_classes, tmp_path):
    noise = np.random.default_rng(1).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    whole = cv2.imencode(".jpg", noise)[1].tobytes()
    (two_classes / "b" / "cut.jpg").write_bytes(whole[: len(whole) * 4 // 5])
    result, said = build(two_classes, tmp_path / "ds", imageset.ImagesetFlags(mixed_sizes=True))
    assert said == [f"stored {two_classes}/b/cut.jpg: a truncated JPEG (no end marker): OpenCV decodes its missing "
                    "end as gray"]
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    assert manifest["damaged"] == [{"split": "train", "path": "b/cut.jpg", "reason": said[0].split(": ", 1)[1]}]
    theirs = lmdb_records(convert_imageset(engine, two_classes, tmp_path / "ds" / "train.txt", tmp_path / "ref"))
    assert lmdb_records(tmp_path / "ds" / "train_lmdb") == theirs and result.splits["train"].count == 7
    with pytest.raises(DataError, match=r"cut.jpg: a truncated JPEG .* leave out --strict to store it\)$"):
        build(two_classes, tmp_path / "strict", imageset.ImagesetFlags(mixed_sizes=True), strict=True)


def test_what_is_no_image_file_is_named_not_passed_over_in_silence(two_classes, tmp_path):
    import os

    (two_classes / "a" / "gone.png").symlink_to(tmp_path / "nowhere.png")
    os.mkfifo(two_classes / "b" / "pipe.png")
    (two_classes / "b" / "album.png").mkdir()
    result, said = build(two_classes, tmp_path / "ds")
    assert said == [f"passed over {two_classes}/a/gone.png: a link to {tmp_path}/nowhere.png, which does not exist",
                    f"passed over {two_classes}/b/album.png: a folder named like an image (its files are read)",
                    f"passed over {two_classes}/b/pipe.png: a FIFO, not an image file"]
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    assert [s["path"] for s in manifest["skipped"]] == ["a/gone.png", "b/album.png", "b/pipe.png"]
    assert result.splits["train"].count == 6


def test_a_list_of_which_most_files_are_missing_is_refused(two_classes, tmp_path):
    listing = tmp_path / "list.txt"
    listing.write_text("a/0.png 0\nb/0.png 1\n" + "".join(f"elsewhere/{i}.png {i % 2}\n" for i in range(1000)))
    done = invoke("data.images", str(two_classes), "--list", str(listing), "--out", str(tmp_path / "ds"))
    assert done.returncode == 1 and not (tmp_path / "ds").exists()
    assert done.stderr.strip() == (f"Error: 1,000 of the 1,002 files listed for train_lmdb could not be read (the "
                                   f"first: {two_classes}/elsewhere/0.png: not found); check that the paths are "
                                   f"relative to {two_classes}")
    shown = [line for line in done.stdout.splitlines() if line.startswith("skipped ")]
    assert len(shown) == 10 and "... and 990 more skipped (every one is listed in the manifest)" in done.stdout
