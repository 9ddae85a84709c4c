"""Where a fetched data set lives and what its manifest says.

``<data dir>/<name>/`` holds ``train_<backend>/``, ``test_<backend>/``, ``labels.txt`` and
``manifest.json`` (and, once made, ``mean.binaryproto`` and ``contact_sheet.png``). Verified raw
IDX files are kept apart, in caffetool's cache, so rebuilding the databases never downloads again.

:func:`load` is the one check that a fetched data set is usable (``data.info``, ``data.mean``,
``model.generate`` and training all go through it): its databases must be whole files (a
truncated LMDB otherwise kills its reader with SIGBUS) holding the records the manifest counts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from caffetool import config
from caffetool.data import db
from caffetool.data.registry import DatasetSpec
from caffetool.errors import DataError

MANIFEST = "manifest.json"
LABELS = "labels.txt"


class DatasetMissing(DataError, FileNotFoundError):
    """A data set was asked for that has not been fetched."""


def made_by_caffetool(folder: Path) -> bool:
    """Whether ``folder`` is a data set caffetool wrote (``data.fetch``, ``data.images``): it holds
    the data set's manifest; what ``--force`` may replace."""
    return (folder / MANIFEST).is_file()


def dataset_dir(spec: DatasetSpec, data_dir: str | Path | None) -> Path:
    return Path(data_dir or "data").absolute() / spec.name


def raw_dir(spec: DatasetSpec) -> Path:
    return config.cache_home() / "datasets" / spec.name


@dataclass
class Dataset:
    """A fetched data set as the rest of caffetool uses it."""

    path: Path
    manifest: dict

    @property
    def name(self) -> str:
        return self.manifest["dataset"]

    @property
    def backend(self) -> str:
        return self.manifest["backend"]

    @property
    def classes(self) -> list[str]:
        return self.manifest["classes"]

    @property
    def shape(self) -> tuple[int, int, int]:
        """(channels, height, width) of every training image; images of several sizes are refused."""
        shape = self.manifest["splits"]["train"]["shape"]
        if not shape:
            raise DataError(f"the images of {self.path} are not all the same size; rebuild it with "
                            "`caffetool data.images ... --resize-height H --resize-width W --force`")
        return tuple(shape)

    def db(self, split: str) -> Path:
        return self.path / self.manifest["splits"][split]["db"]

    def count(self, split: str) -> int:
        return self.manifest["splits"][split]["count"]

    @property
    def labels_file(self) -> Path:
        return self.path / LABELS


def load(spec: DatasetSpec, data_dir: str | Path | None) -> Dataset:
    """The fetched data set, checked: manifest readable, databases whole, with their counts."""
    path = dataset_dir(spec, data_dir)
    return load_folder(path, f"rerun `caffetool data.fetch --dataset {spec.name} --force`",
                       f"data set {spec.name} not found in {path.parent} — run "
                       f"`caffetool data.fetch --dataset {spec.name}`")


def load_folder(path: Path, fix: str, missing: str | None = None) -> Dataset:
    """The data set in ``path`` (fetched, or made by ``data.images``), checked as :func:`load` says;
    ``fix`` is the command that rebuilds it, ``missing`` what to say when it has no manifest."""
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except FileNotFoundError:
        raise DatasetMissing(missing or f"{path} holds no data set ({MANIFEST} is missing); {fix}") from None
    except (OSError, ValueError) as e:
        raise DataError(f"{path / MANIFEST} is unreadable ({e}); {fix}") from e
    dataset = Dataset(path, manifest)
    for split in ("train", "test"):
        try:
            where, expected = dataset.db(split), dataset.count(split)
        except (KeyError, TypeError) as e:
            if split == "test" and "splits" in manifest and "train" in manifest["splits"]:
                raise DataError(f"{path} has no test split, which training and its test nets need; "
                                f"rebuild it with a --val-fraction (e.g. 0.1): {fix}") from None
            raise DataError(f"{path / MANIFEST} does not describe the {split} split ({e!r}); {fix}") from e
        if not where.is_dir():
            raise DataError(f"{where} is missing; {fix}")
        try:
            found = db.check(where)
        except DataError as e:
            raise DataError(f"{e}; {fix}") from e
        if found is not None and found != expected:
            raise DataError(f"{where} holds {found} records, its manifest says {expected}; {fix}")
    return dataset
