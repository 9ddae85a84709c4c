"""``data.fetch``: obtain a data set's IDX files, verify them, and write Caffe databases.

Each file comes from the first source that delivers a verified copy. Sources are declared as
small classes, each knowing how to obtain a file, and tried in order (:func:`sources`):
caffetool's verified cache → ``--source`` (a :class:`LocalFolder` or a :class:`Url`) → copies
installed on this system (:class:`DebianPackage`, installing the package if needed) → the data
set's mirrors (:class:`Url`). A copy is accepted only when its checksum matches the declaration;
a rejected one (wrong checksum, corrupt gzip) is deleted, mentioned, and the next source tried.
When none delivers, :class:`SourceError` carries every attempt as ``(source, reason)``.

The data set directory is built in a staging sibling and swapped into place complete
(:func:`caffetool.fsio.staged_dir`): an existing data set stays in place until its replacement
is finished, and staging left by a killed fetch is removed by the next one. A failed write (disk
full, read-only folder) is reported as such, with nothing half-written kept.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import caffetool
from caffetool import apt, download, fsio
from caffetool.checksum import CHUNK, sha256_file
from caffetool.data import convert, db, idx, layout
from caffetool.data.registry import SPLITS, DatasetSpec, IdxFile
from caffetool.errors import CaffetoolError, ChecksumMismatch, ConfigError, DataError, SourceError

VERIFIED = "verified.json"
# Bytes of database per byte of IDX images: LMDB pages hold whole records plus their keys.
DB_OVERHEAD = 1.1


@dataclass
class FetchResult:
    dataset: layout.Dataset
    cached: bool
    seconds: float


class Provider(Protocol):
    """Somewhere a data file may be had."""

    given: bool  # named by the user (--source): every file not taken from it is mentioned

    def obtain(self, f: IdxFile, target: Path) -> str:
        """Put a verified copy of ``f`` at ``target`` and return where it came from.

        Raises SourceError (with its ``attempts``) when this source cannot deliver one.
        """


@dataclass(frozen=True)
class LocalFolder:
    """A folder holding the files, compressed as on the mirrors or not."""

    folder: Path
    given: bool = False

    def obtain(self, f: IdxFile, target: Path) -> str:
        names = (f.name, f.name.removesuffix(".gz"))
        path = next((self.folder / n for n in names if (self.folder / n).exists()), None)
        if path is None:
            missing = self.folder / f.name
            raise SourceError(f"{missing}: not found", attempts=[(str(missing), "not found")])
        download.copy(path, target, lambda p: verify(p, f, str(path)))
        return str(path)


@dataclass(frozen=True)
class Url:
    """A base URL (``--source`` or one of the data set's mirrors) serving the files by name."""

    base: str
    timeout: float = download.DEFAULT_TIMEOUT
    progress: bool = True
    given: bool = False

    def obtain(self, f: IdxFile, target: Path) -> str:
        url = self.base.rstrip("/") + "/" + f.name
        download.download(url, target, lambda p: verify(p, f, url), self.timeout, self.progress, f.size)
        return url


@dataclass
class DebianPackage:
    """A Debian package installing the files into known folders; installed once, when first needed."""

    package: str
    folders: tuple[Path, ...]
    say: Callable[[str], None] = print
    given: bool = False
    failure: SourceError | None = field(default=None, init=False)
    tried: bool = field(default=False, init=False)

    def obtain(self, f: IdxFile, target: Path) -> str:
        self._install()
        errors = []
        for folder in self.folders:
            try:
                return LocalFolder(folder).obtain(f, target)
            except SourceError as e:
                errors.append(e)
        raise SourceError("\n  ".join(str(e) for e in errors),
                          attempts=[a for e in errors for a in e.attempts])

    def _install(self) -> None:
        if not self.tried and not any(d.exists() for d in self.folders):
            self.tried = True
            try:
                if apt.install_packages([self.package]):
                    self.say(f"installed Debian package {self.package}")
            except CaffetoolError as e:
                self.failure = SourceError(f"{self.package}: {e}",
                                           attempts=[(f"Debian package {self.package}", str(e))])
        if self.failure is not None:
            raise self.failure


def fetch(spec: DatasetSpec, data_dir: str | Path | None = None, source: str | None = None,
          backend: str = "lmdb", force: bool = False, timeout: float = download.DEFAULT_TIMEOUT,
          progress: bool = True, say: Callable[[str], None] = print,
          mirrors: tuple[str, ...] | None = None) -> FetchResult:
    """Make ``spec`` present as Caffe databases under ``data_dir``; see the module docstring."""
    started = time.monotonic()
    backend = db.check_backend(backend)
    out = layout.dataset_dir(spec, data_dir)
    with _writing(out.parent, "pass --data-dir elsewhere"):
        if out.parent.is_dir():
            fsio.remove_stale(out)
    if out.exists() and not force:
        return FetchResult(_existing(spec, data_dir, backend), True, time.monotonic() - started)
    fsio.check_replaceable(out, layout.made_by_caffetool, "a data set", error=ConfigError)

    files = obtain(spec, source, timeout, progress, say, mirrors)
    t_obtained = time.monotonic()
    with _writing(out.parent, "pass --data-dir elsewhere"):
        out.parent.mkdir(parents=True, exist_ok=True)
        _check_room(spec, out.parent)
        with fsio.staged_dir(out) as build:
            splits = {split: _convert_split(spec, files, build, split, backend, progress) for split in SPLITS}
            (build / layout.LABELS).write_text("".join(f"{c}\n" for c in spec.classes))
            manifest = _manifest(spec, backend, splits, files,
                                 {"obtain": t_obtained - started, "convert": time.monotonic() - t_obtained})
            (build / layout.MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return FetchResult(layout.load(spec, data_dir), False, time.monotonic() - started)


def _existing(spec: DatasetSpec, data_dir: str | Path | None, backend: str) -> layout.Dataset:
    """The data set already in place, if it is complete and in ``backend``.

    A damaged one raises :func:`layout.load`'s DataError, which names the fix (``--force``).
    """
    out = layout.dataset_dir(spec, data_dir)
    try:
        existing = layout.load(spec, data_dir)
    except layout.DatasetMissing:
        raise DataError(f"{out} exists but is not a complete data set (no {layout.MANIFEST}); "
                        f"rerun `caffetool data.fetch --dataset {spec.name} --force` to rebuild it") from None
    if existing.backend != backend:
        raise ConfigError(f"{out} holds {existing.backend} databases; rerun with --force "
                          f"to replace them with {backend}")
    return existing


def _convert_split(spec: DatasetSpec, files: dict[str, dict], build: Path, split: str, backend: str,
                   progress: bool) -> dict:
    images_role, labels_role = SPLITS[split]
    stats = convert.convert(files[images_role]["path"], files[labels_role]["path"], build / f"{split}_{backend}",
                            backend, num_classes=len(spec.classes), progress=progress, desc=f"{spec.name} {split}")
    return {"db": f"{split}_{backend}", "count": stats.count, "shape": list(stats.shape),
            "histogram": stats.histogram}


def _check_room(spec: DatasetSpec, folder: Path) -> None:
    """Refuse before converting when ``folder``'s file system cannot hold the databases."""
    need = int(DB_OVERHEAD * sum(spec.file(images).idx_size for images, _ in SPLITS.values()))
    free = shutil.disk_usage(folder).free
    if free < need:
        raise DataError(f"{folder} has {free / 1e6:.1f} MB free; the {spec.name} databases need about "
                        f"{need / 1e6:.1f} MB — free space there or pass --data-dir elsewhere")


@contextmanager
def _writing(folder: Path, elsewhere: str) -> Iterator[None]:
    """Report a failed write under ``folder`` (disk full, read-only, not a folder) as a DataError."""
    try:
        yield
    except OSError as e:
        what = "no space left on device" if download.is_disk_full(e) else (e.strerror or str(e)).lower()
        where = e.filename or folder
        raise DataError(f"cannot write {where}: {what}; nothing half-written was kept — "
                        f"free space or {elsewhere}, then rerun") from e


def _manifest(spec: DatasetSpec, backend: str, splits: dict, files: dict, seconds: dict) -> dict:
    return {
        "dataset": spec.name,
        "title": spec.title,
        "backend": backend,
        "classes": list(spec.classes),
        "white_on_black": spec.white_on_black,
        "splits": splits,
        "files": {role: {k: v for k, v in f.items() if k != "path"} for role, f in files.items()},
        "seconds": {k: round(v, 3) for k, v in seconds.items()},
        "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "caffetool_version": caffetool.__version__,
    }


def sources(spec: DatasetSpec, source: str | None = None, timeout: float = download.DEFAULT_TIMEOUT,
            progress: bool = True, say: Callable[[str], None] = print,
            mirrors: tuple[str, ...] | None = None) -> list[Provider]:
    """Where ``spec``'s files are looked for, in order (the verified cache comes before all)."""
    found: list[Provider] = []
    if source and "://" in source:
        found.append(Url(source, timeout, progress, given=True))
    elif source:
        found.append(LocalFolder(Path(source).expanduser(), given=True))
    if spec.debian_package:
        found.append(DebianPackage(spec.debian_package, spec.local_dirs, say))
    else:
        found += [LocalFolder(d) for d in spec.local_dirs]
    found += [Url(m, timeout, progress) for m in (spec.mirrors if mirrors is None else mirrors)]
    return found


def obtain(spec: DatasetSpec, source: str | None, timeout: float, progress: bool,
           say: Callable[[str], None], mirrors: tuple[str, ...] | None = None) -> dict[str, dict]:
    """Verified local paths of all of ``spec``'s files: {role: {path, name, sha256, source}}."""
    cache = layout.raw_dir(spec)
    with _writing(cache, "set XDG_CACHE_HOME to a folder with room"):
        cache.mkdir(parents=True, exist_ok=True)
        verified = _read_verified(cache)
        tried = sources(spec, source, timeout, progress, say, mirrors)
        return {f.role: _cached(cache, f, verified) or _obtain_file(spec, f, cache, tried, verified, say)
                for f in spec.files}


def _cached(cache: Path, f: IdxFile, verified: dict[str, dict]) -> dict | None:
    """The cache's copy of ``f`` if it is the one verified before; any other copy is deleted."""
    target = cache / f.name
    known = verified.get(f.name, {})
    if target.exists() and known.get("sha256") == sha256_file(target):
        return {"path": target, "name": f.name, **known}
    target.unlink(missing_ok=True)
    return None


def _obtain_file(spec: DatasetSpec, f: IdxFile, cache: Path, tried: list[Provider],
                 verified: dict[str, dict], say: Callable[[str], None]) -> dict:
    """Try each source in turn for ``f``; the first verified copy enters the cache."""
    target = cache / f.name
    errors: list[SourceError] = []
    for candidate in tried:
        try:
            origin = candidate.obtain(f, target)
        except SourceError as e:
            errors.append(e)
            if candidate.given or isinstance(e, ChecksumMismatch):
                for where, reason in e.attempts:
                    say(f"{f.name}: skipped {where} ({reason})")
            continue
        verified[f.name] = {"sha256": sha256_file(target), "source": origin}
        fsio.write_atomic(cache / VERIFIED, json.dumps(verified, indent=1))
        say(f"{f.name}: verified, from {origin}")
        return {"path": target, "name": f.name, **verified[f.name]}
    lines = "\n  ".join(str(e) for e in errors) or "no source"
    raise SourceError(f"{spec.name}: could not obtain {f.name}; tried:\n  {lines}\n"
                      f"Pass --source DIR|URL holding {', '.join(x.name for x in spec.files)}",
                      attempts=[a for e in errors for a in e.attempts])


def verify(path: Path, f: IdxFile, origin: str) -> None:
    """Accept ``path`` if its own sha256, or that of its decompressed content, is declared."""
    digest = sha256_file(path)
    if f.sha256 and digest == f.sha256:
        return
    content = _content_sha256(path, f, origin) if f.idx_sha256 else None
    if content is not None and content == f.idx_sha256:
        return
    expected = " or ".join(x for x in (
        f.sha256 and f"file sha256 {f.sha256}", f.idx_sha256 and f"IDX content sha256 {f.idx_sha256}") if x)
    found = f"file sha256 {digest}{f', content sha256 {content}' if content else ''}"
    raise ChecksumMismatch(f"{f.name} from {origin} failed verification: {found}; expected {expected}; "
                           "the copy was deleted",
                           attempts=[(origin, f"failed verification: {found}; expected {expected}")])


def _content_sha256(path: Path, f: IdxFile, origin: str) -> str:
    """The sha256 of the IDX bytes inside ``path`` (gzip-compressed or raw)."""
    digest = hashlib.sha256()
    try:
        with idx.open_idx(path) as stream:
            while block := stream.read(CHUNK):
                digest.update(block)
    except idx.GZIP_ERRORS as e:
        reason = idx.unreadable(e)
        raise ChecksumMismatch(f"{f.name} from {origin} is not a readable gzip file ({reason}); "
                               "the copy was deleted", attempts=[(origin, reason)]) from e
    return digest.hexdigest()


def _read_verified(cache: Path) -> dict[str, dict]:
    """{file name: {sha256, source}} of the files this cache verified (re-checked by sha256)."""
    try:
        data = json.loads((cache / VERIFIED).read_text())
        return {k: v for k, v in data.items() if isinstance(v, dict)}
    except (OSError, ValueError, AttributeError):
        return {}
