"""caffetool.data.lookup: ``--dataset`` names a registered data set or a folder ``data.images`` made, and
a folder of your own images trains like a registered data set."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from caffetool.data import imageset, lookup
from caffetool.errors import ConfigError, DataError

from .test_tasks_engine import invoke

CLASSES = ("circle", "square", "stripe")


def draw(kind: str, rng: np.random.Generator, size: int = 28) -> np.ndarray:
    """A gray ``size`` x ``size`` image of ``kind``, placed and shaded at random."""
    image = rng.integers(0, 40, (size, size), dtype=np.uint8)
    x, y = (int(v) for v in rng.integers(8, size - 8, 2))
    shade = int(rng.integers(160, 256))
    if kind == "circle":
        cv2.circle(image, (x, y), 6, shade, -1)
    elif kind == "square":
        cv2.rectangle(image, (x - 5, y - 5), (x + 5, y + 5), shade, -1)
    else:
        image[:, ::4] = shade
    return image


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    """Three classes of 28x28 PNGs, 40 each, in one folder per class."""
    root = tmp_path_factory.mktemp("shapes") / "shapes"
    rng = np.random.default_rng(1)
    for kind in CLASSES:
        (root / kind).mkdir(parents=True)
        for i in range(40):
            assert cv2.imwrite(str(root / kind / f"{i:02}.png"), draw(kind, rng))
    return root


@pytest.fixture(scope="module")
def data_dir(photos, tmp_path_factory) -> Path:
    """A data directory holding ``shapes``, made by data.images with a fifth of the images held out."""
    folder = tmp_path_factory.mktemp("data")
    imageset.build(photos, folder / "shapes", imageset.ImagesetFlags(gray=True), shuffle=True, seed=3, val_fraction=0.2,
                 say=lambda _: None)
    return folder


def test_a_folder_is_found_by_name_by_path_and_relative_path(data_dir, monkeypatch):
    by_name = lookup.find("shapes", data_dir)
    assert by_name.path == data_dir / "shapes"
    assert by_name.classes == list(CLASSES) and by_name.shape == (1, 28, 28)
    assert (by_name.count("train"), by_name.count("test")) == (96, 24)
    assert lookup.find(str(data_dir / "shapes"), "/nonexistent").path == data_dir / "shapes"
    monkeypatch.chdir(data_dir)
    assert lookup.find("./shapes", "/nonexistent").path == data_dir / "shapes"


def test_an_unknown_name_says_what_it_looked_for(data_dir):
    with pytest.raises(ConfigError) as e:
        lookup.find("faces", data_dir)
    assert str(e.value) == (f"unknown --dataset 'faces': not one of mnist, fashion-mnist, and no folder "
                            f"{Path('faces').absolute()} or {data_dir / 'faces'}; make one from your images with "
                            "`caffetool data.images ROOT`")


def test_a_folder_without_a_manifest_names_the_fix(tmp_path):
    (tmp_path / "loose").mkdir()
    with pytest.raises(DataError, match=r"loose holds no data set \(manifest.json is missing\); rebuild it with "
                                        r"`caffetool data.images ROOT --out .*loose --force`"):
        lookup.find(str(tmp_path / "loose"), tmp_path)


def test_a_set_without_a_test_split_is_refused_for_training(photos, tmp_path):
    imageset.build(photos, tmp_path / "all", imageset.ImagesetFlags(gray=True), say=lambda _: None)
    with pytest.raises(DataError, match="has no test split, which training and its test nets need; rebuild it with "
                                        "a --val-fraction"):
        lookup.find("all", tmp_path)


def test_images_of_several_sizes_are_refused_with_the_resize_fix(tmp_path):
    root = tmp_path / "mixed"
    for k, name in enumerate(("a", "b")):
        (root / name).mkdir(parents=True)
        for i in range(3):
            cv2.imwrite(str(root / name / f"{i}.png"), np.full((20 + k, 20), 9, np.uint8))
    # kept as they are (--mixed-sizes): a net whose data layer does not crop them cannot batch them
    imageset.build(root, tmp_path / "data/mixed", imageset.ImagesetFlags(gray=True, mixed_sizes=True), val_fraction=0.5,
                   say=lambda _: None)
    with pytest.raises(DataError, match=r"are not all the same size; rebuild it with `caffetool data.images \.\.\. "
                                        r"--resize-height H --resize-width W --force`"):
        lookup.find("mixed", tmp_path / "data").shape


def test_train_and_generate_on_your_own_images(engine, data_dir, tmp_path):
    runs = tmp_path / "runs"
    done = invoke("train", "--model", "lenet", "--dataset", "shapes", "--data-dir", str(data_dir),
                  "--runs-dir", str(runs), "--name", "mine", "--max-iter", "60", "--test-interval", "30",
                  "--test-iter", "2", "--batch-size", "16", "--test-batch-size", "12", "--base-lr", "0.01")
    assert done.returncode == 0, done.stderr
    run = runs / "mine"
    assert (run / "labels.txt").read_text() == "".join(f"{c}\n" for c in CLASSES)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["dataset"]["name"] == "shapes"
    assert manifest["dataset"]["counts"] == {"train": 96, "test": 24}
    assert "final test: iteration 60: accuracy" in done.stdout
    assert manifest["final"]["test0"]["accuracy"] > 0.6  # three easy shapes; chance is 1/3
    deploy = (run / "deploy.prototxt").read_text()
    assert "num_output: 3" in deploy and "dim: 28" in deploy

    generated = invoke("model.generate", "--model", "lenet", "--dataset", str(data_dir / "shapes"),
                       "--out", str(tmp_path / "gen"))
    assert generated.returncode == 0, generated.stderr
    assert str(data_dir / "shapes" / "train_lmdb") in (tmp_path / "gen" / "train_val.prototxt").read_text()
