"""A folder of images, or Caffe's list file, into databases exactly as ``convert_imageset`` writes them.

The input is either ROOT with one sub-folder per class (labels number the folder names in sorted
order, and ``labels.txt`` lists them) or Caffe's list file of ``PATH LABEL`` lines, paths relative
to ROOT (the last space separates the label, as ``convert_imageset`` reads it, so paths may hold
spaces). Each database holds, for the list it was given, the records ``convert_imageset`` would
write for that list with the same flags: key ``%08d_PATH`` with the line's index (a skipped file
leaves its index unused, as Caffe's does), value a ``Datum``:

- raw: OpenCV's ``imread`` (colour, or gray with ``gray``), resized with ``cv2.resize``'s default
  bilinear interpolation when both sides are given, pixels channel by channel (BGR), and
  ``encoded: false``;
- encoded (``encoded``, or any ``encode_type``): the file's own bytes when its extension names the
  encoding, nothing is resized and its channel count fits (a colour image read gray still counts
  as fitting, as Caffe decides it: with ``gray`` the file is stored as it is); otherwise the decoded
  image re-encoded by OpenCV's ``imencode``.

Shuffling is ours, not Caffe's: ``convert_imageset --shuffle`` draws from Caffe's RNG, seeded
from ``/dev/urandom`` (``cluster_seedgen``), which no run can reproduce. ``shuffle`` permutes the
list with Python's ``random.Random(seed)`` instead, and the list each database was written from is
saved beside it (``train.txt``, ``test.txt``): ``convert_imageset`` given that list without
``--shuffle`` writes the same records. Blank lines of a list file are left out (``convert_imageset``
would count each as an unreadable file and leave its index unused). ``val_fraction`` moves a seeded
random choice of that share of the lines, in list order, into the test database.

A file OpenCV cannot read (missing, not an image, corrupt) is named and skipped, and recorded in
the manifest; ``strict`` refuses it instead. The data set folder is built aside and moved into place
complete (:func:`caffetool.fsio.staged_dir`).

Limits: byte equality holds where this process's OpenCV decodes, resizes and encodes as the
engine's does (JPEG and PNG via libjpeg-turbo and libpng are tested); ``encode_type`` is one of
:data:`ENCODE_TYPES`. ``convert_imageset``'s ``--check_size`` and ``--min_dim``/``--max_dim`` are
not offered.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import caffetool
from caffetool.choices import choose
from caffetool.data import datum, db, layout
from caffetool.errors import ConfigError, DataError
from caffetool.fsio import staged_dir, write_atomic

ENCODE_TYPES = ("png", "jpg", "jpeg", "bmp")
CHUNK = 1000  # convert_imageset commits every 1000 records too
LIST_NAMES = {"train": "train.txt", "test": "test.txt"}


@dataclass(frozen=True)
class Entry:
    """One line of a list: a path relative to ROOT and its label."""

    path: str
    label: int


@dataclass(frozen=True)
class Options:
    """``convert_imageset``'s flags that shape the records."""

    resize_height: int = 0
    resize_width: int = 0
    gray: bool = False
    encoded: bool = False
    encode_type: str = ""
    backend: str = "lmdb"

    def __post_init__(self) -> None:
        if bool(self.resize_height) != bool(self.resize_width):
            raise ConfigError("--resize-height and --resize-width go together; give both or neither")
        if self.resize_height < 0 or self.resize_width < 0:
            raise ConfigError("--resize-height and --resize-width must be positive")
        if self.encode_type:
            object.__setattr__(self, "encode_type", choose(self.encode_type, ENCODE_TYPES, "--encode-type"))
        object.__setattr__(self, "backend", db.check_backend(self.backend))

    @property
    def is_encoded(self) -> bool:
        return self.encoded or bool(self.encode_type)


@dataclass
class Split:
    """What one database holds: its records, their shape if all share one, and what was skipped."""

    count: int = 0
    histogram: list[int] = field(default_factory=list)
    shapes: set[tuple[int, int, int]] = field(default_factory=set)
    skipped: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class BuildResult:
    path: Path
    splits: dict[str, Split]
    classes: list[str]


def read_list(path: Path) -> list[Entry]:
    """The entries of Caffe's list file; a line without a whole-number label names its line number."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"cannot read the list {path} ({e})") from e
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        name, _, label = line.rstrip().rpartition(" ")
        try:
            entries.append(Entry(name, int(label)))
        except ValueError:
            raise DataError(f"{path}:{number}: expected `PATH LABEL`, got {line!r}") from None
        if not name:
            raise DataError(f"{path}:{number}: expected `PATH LABEL`, got {line!r}")
    if not entries:
        raise DataError(f"the list {path} names no images")
    return entries


def scan_folder(root: Path) -> tuple[list[Entry], list[str]]:
    """Every file under ROOT's class folders (sorted), labelled by its folder's place in sorted order."""
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    if not classes:
        raise DataError(f"{root} holds no class folders; put each class's images in a sub-folder named after it")
    entries = [Entry(file.relative_to(root).as_posix(), label)
               for label, name in enumerate(classes)
               for file in sorted((root / name).rglob("*")) if file.is_file()]
    if not entries:
        raise DataError(f"{root}'s class folders ({', '.join(classes)}) hold no files")
    return entries, classes


def order(entries: Sequence[Entry], shuffle: bool, seed: int, val_fraction: float) -> dict[str, list[Entry]]:
    """The lists each database is written from: shuffled with ``seed``, then split off ``val_fraction``."""
    lines = list(entries)
    rng = random.Random(seed)
    if shuffle:
        rng.shuffle(lines)
    if not val_fraction:
        return {"train": lines}
    n_test = round(len(lines) * val_fraction)
    if not 0 < n_test < len(lines):
        raise ConfigError(f"--val-fraction {val_fraction} of {len(lines)} images leaves an empty split")
    test = set(rng.sample(range(len(lines)), n_test))
    return {"train": [e for i, e in enumerate(lines) if i not in test],
            "test": [e for i, e in enumerate(lines) if i in test]}


def record(root: Path, entry: Entry, options: Options) -> tuple[bytes, tuple[int, int, int]]:
    """(serialised Datum, image shape) as Caffe's ``ReadImageToDatum`` makes it; DataError if unreadable."""
    import cv2  # noqa: PLC0415 - OpenCV only where images are read
    import numpy as np  # noqa: PLC0415

    file = root / entry.path
    if not file.is_file():
        raise DataError("not found")
    if not os.access(file, os.R_OK):
        raise DataError("cannot be read (permission denied)")
    image = cv2.imread(str(file), cv2.IMREAD_GRAYSCALE if options.gray else cv2.IMREAD_COLOR)
    if image is None:
        raise DataError("not an image OpenCV can read")
    if options.resize_height:
        image = cv2.resize(image, (options.resize_width, options.resize_height))
    planes = image.reshape(image.shape[0], image.shape[1], -1)
    shape = (planes.shape[2], planes.shape[0], planes.shape[1])
    if not options.is_encoded:
        return datum.encode(planes.transpose(2, 0, 1).tobytes(), entry.label, False, shape), shape
    encoding = options.encode_type or entry.path.rpartition(".")[2].lower()
    if _keeps_file(entry.path, encoding, shape[0], options):
        return datum.encode(file.read_bytes(), entry.label, True), shape
    try:
        ok, buffer = cv2.imencode(f".{encoding}", image)
    except cv2.error:
        ok = False
    if not ok:
        raise ConfigError(f"{file}: OpenCV cannot encode .{encoding} images; pass --encode-type "
                          f"({', '.join(ENCODE_TYPES)})")
    return datum.encode(np.asarray(buffer).tobytes(), entry.label, True), shape


def _keeps_file(path: str, encoding: str, channels: int, options: Options) -> bool:
    """Caffe's test for storing the file's own bytes: right channels, not resized, extension matches."""
    ext = path.rpartition(".")[2].lower()
    matches = ext == encoding or (encoding == "jpg" and ext == "jpeg")
    return (channels == 3) == (not options.gray) and not options.resize_height and matches


def write_db(root: Path, entries: Sequence[Entry], out: Path, options: Options, strict: bool = False,
             say: Callable[[str], None] = print, progress: bool = False, desc: str = "") -> Split:
    """Write ``entries`` as ``convert_imageset ROOT/ LIST OUT`` with ``options`` would; ``out`` must not exist."""
    split = Split(histogram=[0] * (max((e.label for e in entries), default=-1) + 1))
    writer = db.Writer(out, options.backend)
    try:
        keys: list[bytes] = []
        values: list[bytes] = []
        for index, entry in _progress(entries, progress, desc or out.name):
            try:
                value, shape = record(root, entry, options)
            except DataError as e:
                if strict:
                    raise DataError(f"{root / entry.path}: {e} (--strict refuses it; remove it from "
                                    "the input or leave out --strict to skip it)") from None
                say(f"skipped {root / entry.path}: {e}")
                split.skipped.append((entry.path, str(e)))
                continue
            keys.append(b"%08d_" % index + entry.path.encode())
            values.append(value)
            split.count += 1
            split.shapes.add(shape)
            if entry.label >= 0:
                split.histogram[entry.label] += 1
            if len(keys) == CHUNK:
                writer.put_chunk(keys, values)
                keys, values = [], []
        if keys:
            writer.put_chunk(keys, values)
    finally:
        writer.close()
    if not split.count:
        raise DataError(f"none of the {len(entries)} files listed for {out.name} could be read")
    return split


def _progress(entries: Sequence[Entry], progress: bool, desc: str) -> Iterator[tuple[int, Entry]]:
    if not progress:
        yield from enumerate(entries)
        return
    from tqdm import tqdm  # noqa: PLC0415 - only when drawing a bar

    yield from tqdm(enumerate(entries), total=len(entries), unit="img", desc=desc, leave=False, disable=None)


def build(root: Path, out: Path, options: Options, list_file: Path | None = None, shuffle: bool = False,
          seed: int = 0, val_fraction: float = 0.0, strict: bool = False, force: bool = False,
          say: Callable[[str], None] = print, progress: bool = False) -> BuildResult:
    """Write the data set folder ``out``: databases, the lists they hold, labels.txt and manifest.json."""
    if not root.is_dir():
        raise DataError(f"{root} is not a folder of images" if root.exists() else f"{root} does not exist")
    if out.exists() and not force:
        raise ConfigError(f"{out} already exists; pass --force to replace it")
    if list_file is not None:
        entries = read_list(list_file)
        classes = [str(k) for k in range(max(e.label for e in entries) + 1)]
    else:
        entries, classes = scan_folder(root)
    lists = order(entries, shuffle, seed, val_fraction)
    splits: dict[str, Split] = {}
    with staged_dir(out, DataError) as built:
        for name, lines in lists.items():
            write_atomic(built / LIST_NAMES[name], "".join(f"{e.path} {e.label}\n" for e in lines), DataError)
            splits[name] = write_db(root, lines, built / f"{name}_{options.backend}", options, strict, say,
                                    progress, f"{out.name} {name}")
        write_atomic(built / layout.LABELS, "".join(f"{c}\n" for c in classes), DataError)
        source = {"root": str(root.absolute()), "list": str(list_file.absolute()) if list_file else None,
                  "shuffle": shuffle, "seed": seed, "val_fraction": val_fraction, **asdict(options)}
        manifest = _manifest(out.name, str(root), options.backend, classes, splits, source)
        write_atomic(built / layout.MANIFEST, json.dumps(manifest, indent=2) + "\n", DataError)
    return BuildResult(out, splits, classes)


def _manifest(name: str, root: str, backend: str, classes: list[str], splits: dict[str, Split],
              source: dict) -> dict:
    return {
        "dataset": name,
        "title": f"images from {root}",
        "backend": backend,
        "classes": classes,
        "white_on_black": False,
        "splits": {split: {"db": f"{split}_{backend}", "list": LIST_NAMES[split], "count": s.count,
                           "shape": list(next(iter(s.shapes))) if len(s.shapes) == 1 else None,
                           "histogram": s.histogram + [0] * (len(classes) - len(s.histogram))}
                   for split, s in splits.items()},
        "skipped": [{"split": split, "path": path, "reason": reason}
                    for split, s in splits.items() for path, reason in s.skipped],
        "source": source,
        "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "caffetool_version": caffetool.__version__,
    }
