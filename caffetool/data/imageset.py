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
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import caffetool
from caffetool.choices import choose
from caffetool.data import datum, db, layout
from caffetool.errors import ConfigError, DataError
from caffetool.fsio import check_replaceable, staged_dir, write_atomic

ENCODE_TYPES = ("png", "jpg", "jpeg", "bmp")
CHUNK = 1000  # convert_imageset commits every 1000 records too
LIST_NAMES = {"train": "train.txt", "test": "test.txt"}
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm")
# A record is one decoded image: bounded as the demo bounds an upload (imageheader.MAX_DECODED_BYTES),
# far below protobuf's 2 GiB limit on a message Caffe parses.
MAX_RECORD_BYTES = 120_000_000
MAX_CLASSES = 100_000  # labels number classes from 0; labels.txt lists every number up to the largest
SHOWN_SKIPS = 10  # skipped files named one by one; the rest are counted (all are in the manifest)


@dataclass(frozen=True)
class ListEntry:
    """One line of a list: a path relative to ROOT and its label."""

    path: str
    label: int


@dataclass(frozen=True)
class ImagesetFlags:
    """``convert_imageset``'s flags that shape the records."""

    resize_height: int = 0
    resize_width: int = 0
    gray: bool = False
    encoded: bool = False
    encode_type: str = ""
    backend: str = "lmdb"
    mixed_sizes: bool = False  # keep images of different sizes (for a net whose data layer crops them)

    def __post_init__(self) -> None:
        if bool(self.resize_height) != bool(self.resize_width):
            raise ConfigError("--resize-height and --resize-width go together; give both or neither")
        if self.resize_height < 0 or self.resize_width < 0:
            raise ConfigError("--resize-height and --resize-width must be positive")
        if (size := self.resize_height * self.resize_width * (1 if self.gray else 3)) > MAX_RECORD_BYTES:
            raise ConfigError(f"--resize-height {self.resize_height} --resize-width {self.resize_width} makes "
                              f"records of {size:,} bytes, over the limit of {MAX_RECORD_BYTES:,} an image may "
                              "decode to; choose a smaller size")
        if self.encode_type:
            object.__setattr__(self, "encode_type", choose(self.encode_type, ENCODE_TYPES, "--encode-type"))
        object.__setattr__(self, "backend", db.check_backend(self.backend))

    @property
    def is_encoded(self) -> bool:
        return self.encoded or bool(self.encode_type)


@dataclass
class SplitDatabase:
    """What one database holds: its records, their shape if all share one, and what was skipped."""

    count: int = 0
    histogram: list[int] = field(default_factory=list)
    shapes: dict[tuple[int, int, int], int] = field(default_factory=dict)  # shape -> images of that shape
    skipped: list[tuple[str, str]] = field(default_factory=list)
    damaged: list[tuple[str, str]] = field(default_factory=list)  # stored, but not whole (a truncated JPEG)


@dataclass
class BuildResult:
    path: Path
    splits: dict[str, SplitDatabase]
    classes: list[str]


def read_list(path: Path) -> list[ListEntry]:
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
            entries.append(ListEntry(name, int(label)))
        except ValueError:
            raise DataError(f"{path}:{number}: expected `PATH LABEL`, got {line!r}") from None
        if not name:
            raise DataError(f"{path}:{number}: expected `PATH LABEL`, got {line!r}")
        if not 0 <= entries[-1].label < MAX_CLASSES:
            raise DataError(f"{path}:{number}: label {label} is out of range; labels number the classes from 0 "
                            f"(at most {MAX_CLASSES - 1:,})")
    if not entries:
        raise DataError(f"the list {path} names no images")
    return entries


def scan_folder(root: Path) -> tuple[list[ListEntry], list[str], list[tuple[str, str]]]:
    """Every file under ROOT's class folders (sorted), labelled by its folder's place in sorted order;
    and what was passed over with why (a link to nothing, a FIFO, a folder named like an image)."""
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    if not classes:
        raise DataError(f"{root} holds no class folders; put each class's images in a sub-folder named after it")
    entries, passed = [], []
    for label, name in enumerate(classes):
        for file in sorted((root / name).rglob("*")):
            relative = file.relative_to(root).as_posix()
            if file.is_file():
                entries.append(ListEntry(relative, label))
            elif file.is_dir():
                if file.suffix.lower() in IMAGE_SUFFIXES:
                    passed.append((relative, "a folder named like an image (its files are read)"))
            else:
                passed.append((relative, _not_a_file(file)))
    if not entries:
        raise DataError(f"{root}'s class folders ({', '.join(classes)}) hold no files")
    return entries, classes, passed


def _not_a_file(path: Path) -> str:
    """Why ``path``, which is no regular file, is not read."""
    if path.is_symlink() and not path.exists():
        return f"a link to {os.readlink(path)}, which does not exist"
    if not path.exists() and not path.is_symlink():
        return "not found"
    kind = stat.S_IFMT(path.stat().st_mode)
    names = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a device", stat.S_IFBLK: "a device",
             stat.S_IFDIR: "a folder"}
    return f"{names.get(kind, 'not a regular file')}, not an image file"


def order(entries: Sequence[ListEntry], shuffle: bool, seed: int, val_fraction: float) -> dict[str, list[ListEntry]]:
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


@dataclass(frozen=True)
class ImageRecord:
    """One image as a database record: the serialised Datum, the image's shape, and what is wrong
    with a file that was stored anyway (a truncated JPEG, which OpenCV decodes with its end gray)."""

    value: bytes
    shape: tuple[int, int, int]
    damage: str | None = None


def source_file(root: Path, entry: ListEntry) -> Path:
    """The file of ``entry`` as ``convert_imageset`` names it: ROOT and the list's path joined as text,
    so an absolute path in the list stays under ROOT (``ROOT//abs/path``), as Caffe's does."""
    return Path(f"{root}/{entry.path}")


def record(root: Path, entry: ListEntry, options: ImagesetFlags) -> ImageRecord:
    """The record Caffe's ``ReadImageToDatum`` makes of ``entry``; DataError if it cannot be read, or
    if its header says it would decode past :data:`MAX_RECORD_BYTES` bytes."""
    import cv2  # noqa: PLC0415 - OpenCV only where images are read
    import numpy as np  # noqa: PLC0415

    from caffetool.data import imageheader  # noqa: PLC0415 - Pillow only where images are read

    file = source_file(root, entry)
    if not file.is_file():
        raise DataError(_not_a_file(file))
    if not os.access(file, os.R_OK):
        raise DataError("cannot be read (permission denied)")
    data = file.read_bytes()
    try:
        header = imageheader.read(data)
    except imageheader.DecompressionBombError as e:
        raise DataError(f"too large to decode ({e})") from None
    if header is not None and (why := imageheader.over_limits(header, max_decoded_bytes=MAX_RECORD_BYTES)):
        raise DataError(why)
    damage = "a truncated JPEG (no end marker): OpenCV decodes its missing end as gray" \
        if header is not None and header.format == "JPEG" and b"\xff\xd9" not in data[-1024:] else None
    try:
        image = cv2.imread(str(file), cv2.IMREAD_GRAYSCALE if options.gray else cv2.IMREAD_COLOR)
        if image is not None and options.resize_height:
            image = cv2.resize(image, (options.resize_width, options.resize_height))
    except cv2.error as e:
        raise DataError(f"OpenCV cannot read it ({str(e).strip().splitlines()[-1]})") from None
    if image is None:
        raise DataError("not an image OpenCV can read")
    planes = image.reshape(image.shape[0], image.shape[1], -1)
    shape = (planes.shape[2], planes.shape[0], planes.shape[1])
    if not options.is_encoded:
        return ImageRecord(datum.encode(planes.transpose(2, 0, 1).tobytes(), entry.label, False, shape), shape, damage)
    encoding = options.encode_type or entry.path.rpartition(".")[2].lower()
    if _keeps_file(entry.path, encoding, shape[0], options):
        return ImageRecord(datum.encode(data, entry.label, True), shape, damage)
    try:
        ok, buffer = cv2.imencode(f".{encoding}", image)
    except cv2.error:
        ok = False
    if not ok:
        raise ConfigError(f"{file}: OpenCV cannot encode .{encoding} images; pass --encode-type "
                          f"({', '.join(ENCODE_TYPES)})")
    return ImageRecord(datum.encode(np.asarray(buffer).tobytes(), entry.label, True), shape, damage)


def _keeps_file(path: str, encoding: str, channels: int, options: ImagesetFlags) -> bool:
    """Caffe's test for storing the file's own bytes: right channels, not resized, extension matches."""
    ext = path.rpartition(".")[2].lower()
    matches = ext == encoding or (encoding == "jpg" and ext == "jpeg")
    return (channels == 3) == (not options.gray) and not options.resize_height and matches


def write_db(root: Path, entries: Sequence[ListEntry], out: Path, options: ImagesetFlags, strict: bool = False,
             say: Callable[[str], None] = print, progress: bool = False, desc: str = "") -> SplitDatabase:
    """Write ``entries`` as ``convert_imageset ROOT/ LIST OUT`` with ``options`` would; ``out`` must not exist.

    A file that cannot be read is skipped and named (the first :data:`SHOWN_SKIPS`, then a count),
    or refused with ``strict``, as is a damaged one that is stored; a list of which most files cannot
    be read is refused (its paths are most likely not relative to ROOT)."""
    split = SplitDatabase(histogram=[0] * (max((e.label for e in entries), default=-1) + 1))
    writer = db.Writer(out, options.backend)
    try:
        keys: list[bytes] = []
        values: list[bytes] = []
        for index, entry in _progress(entries, progress, desc or out.name):
            try:
                made = record(root, entry, options)
            except DataError as e:
                _passed_over(split.skipped, root, entry, str(e), strict, say, "skipped")
                continue
            if made.damage:
                _passed_over(split.damaged, root, entry, made.damage, strict, say, "stored")
            keys.append(b"%08d_" % index + entry.path.encode())
            values.append(made.value)
            split.count += 1
            split.shapes[made.shape] = split.shapes.get(made.shape, 0) + 1
            split.histogram[entry.label] += 1
            if len(keys) == CHUNK:
                writer.put_chunk(keys, values)
                keys, values = [], []
        if keys:
            writer.put_chunk(keys, values)
    finally:
        writer.close()
    for kind, passed in (("skipped", split.skipped), ("stored", split.damaged)):
        if len(passed) > SHOWN_SKIPS:
            say(f"... and {len(passed) - SHOWN_SKIPS:,} more {kind} (every one is listed in the manifest)")
    if split.count < len(split.skipped):
        first, why = split.skipped[0]
        raise DataError(f"{len(split.skipped):,} of the {len(entries):,} files listed for {out.name} could not be "
                        f"read (the first: {source_file(root, ListEntry(first, 0))}: {why}); check that the paths are "
                        f"relative to {root}")
    return split


def _passed_over(passed: list[tuple[str, str]], root: Path, entry: ListEntry, why: str, strict: bool,
                 say: Callable[[str], None], kind: str) -> None:
    """Name a file that was skipped (or stored though damaged), or refuse it with ``strict``."""
    if strict:
        action = "skip" if kind == "skipped" else "store"
        raise DataError(f"{source_file(root, entry)}: {why} (--strict refuses it; remove it from the input or "
                        f"leave out --strict to {action} it)")
    if len(passed) < SHOWN_SKIPS:
        say(f"{kind} {source_file(root, entry)}: {why}")
    passed.append((entry.path, why))


def check_sizes(splits: dict[str, SplitDatabase], options: ImagesetFlags, root: Path) -> None:
    """Refuse images of different sizes unless ``mixed_sizes``: Caffe's Data layer batches images of
    one size, and a net that does not crop them fails at its first batch of mixed ones."""
    shapes: dict[tuple[int, int, int], int] = {}
    for split in splits.values():
        for shape, n in split.shapes.items():
            shapes[shape] = shapes.get(shape, 0) + n
    if len(shapes) > 1 and not options.mixed_sizes:
        common = sorted(shapes.items(), key=lambda item: -item[1])
        channels = len({c for c, _, _ in shapes}) > 1
        shown = ", ".join(f"{w}x{h}{f'x{c}' if channels else ''}: {n:,}" for (c, h, w), n in common[:4])
        shown += ", ..." if len(common) > 4 else ""
        (c, h, w), _ = common[0]
        raise DataError(f"{root} holds images of {len(shapes)} sizes ({shown}); Caffe's Data layer batches images of "
                        f"one size: pass --resize-height {h} --resize-width {w} (or --mixed-sizes for a net whose "
                        "data layer crops them to one size)")


def _progress(entries: Sequence[ListEntry], progress: bool, desc: str) -> Iterator[tuple[int, ListEntry]]:
    if not progress:
        yield from enumerate(entries)
        return
    from tqdm import tqdm  # noqa: PLC0415 - only when drawing a bar

    yield from tqdm(enumerate(entries), total=len(entries), unit="img", desc=desc, leave=False, disable=None)


def build(root: Path, out: Path, options: ImagesetFlags, list_file: Path | None = None, shuffle: bool = False,
          seed: int = 0, val_fraction: float = 0.0, strict: bool = False, force: bool = False,
          say: Callable[[str], None] = print, progress: bool = False) -> BuildResult:
    """Write the data set folder ``out``: databases, the lists they hold, labels.txt and manifest.json."""
    if not root.is_dir():
        raise DataError(f"{root} is not a folder of images" if root.exists() else f"{root} does not exist")
    if out.exists() or out.is_symlink():
        inputs = [root, *([list_file] if list_file is not None else [])]
        check_replaceable(out, layout.made_by_caffetool, "a data set", inputs, ConfigError)
        if not force:
            raise ConfigError(f"{out} already exists; pass --force to replace it")
    passed: list[tuple[str, str]] = []
    if list_file is not None:
        entries = read_list(list_file)
        classes = [str(k) for k in range(max(e.label for e in entries) + 1)]
    else:
        entries, classes, passed = scan_folder(root)
        for path, why in passed[:SHOWN_SKIPS]:
            say(f"passed over {root / path}: {why}")
    if len(classes) < 2:
        where = f"every label in {list_file} is 0" if list_file is not None else f"{root} holds one class folder"
        raise DataError(f"{where}; a classifier learns two classes or more")
    lists = order(entries, shuffle, seed, val_fraction)
    splits: dict[str, SplitDatabase] = {}
    with staged_dir(out, DataError) as built:
        for name, lines in lists.items():
            write_atomic(built / LIST_NAMES[name], "".join(f"{e.path} {e.label}\n" for e in lines), DataError)
            splits[name] = write_db(root, lines, built / f"{name}_{options.backend}", options, strict, say,
                                    progress, f"{out.name} {name}")
        check_sizes(splits, options, root)
        splits["train"].skipped[:0] = passed
        write_atomic(built / layout.LABELS, "".join(f"{c}\n" for c in classes), DataError)
        source = {"root": str(root.absolute()), "list": str(list_file.absolute()) if list_file else None,
                  "shuffle": shuffle, "seed": seed, "val_fraction": val_fraction, **asdict(options)}
        manifest = _manifest(out.name, str(root), options.backend, classes, splits, source)
        write_atomic(built / layout.MANIFEST, json.dumps(manifest, indent=2) + "\n", DataError)
    return BuildResult(out, splits, classes)


def _manifest(name: str, root: str, backend: str, classes: list[str], splits: dict[str, SplitDatabase],
              source: dict) -> dict:
    return {
        "dataset": name,
        "title": f"images from {root}",
        "backend": backend,
        "classes": classes,
        "white_on_black": False,
        "splits": {split: {"db": f"{split}_{backend}", "list": LIST_NAMES[split], "count": s.count,
                           "shape": list(next(iter(s.shapes))) if len(s.shapes) == 1 else None,
                           "shapes": len(s.shapes),
                           "histogram": s.histogram + [0] * (len(classes) - len(s.histogram))}
                   for split, s in splits.items()},
        "skipped": [{"split": split, "path": path, "reason": reason}
                    for split, s in splits.items() for path, reason in s.skipped],
        "damaged": [{"split": split, "path": path, "reason": reason}
                    for split, s in splits.items() for path, reason in s.damaged],
        "source": source,
        "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "caffetool_version": caffetool.__version__,
    }
