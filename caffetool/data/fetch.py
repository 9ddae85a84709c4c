"""``data.fetch``: obtain a data set's IDX files, verify them, and write Caffe databases.

Each file is looked for in order: caffetool's verified cache → ``--source`` (a folder or a base
URL) → copies installed on this system (installing the declared Debian package if needed) → the
data set's mirrors. Whatever the origin, a file is accepted only when its checksum matches the
declaration. The data set directory is built in a temporary sibling and renamed into place
complete; an existing one is kept unless ``force``.
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import caffetool
from caffetool.checksum import CHUNK, sha256_file
from caffetool.data import convert, db, download, layout
from caffetool.data.registry import SPLITS, DatasetSpec, IdxFile
from caffetool import apt
from caffetool.errors import CaffetoolError, ChecksumMismatch, ConfigError, SourceError

VERIFIED = "verified.json"


@dataclass
class FetchResult:
    dataset: layout.Dataset
    cached: bool
    seconds: float


def fetch(spec: DatasetSpec, data_dir: str | Path | None = None, source: str | None = None,
          backend: str = "lmdb", force: bool = False, timeout: float = download.DEFAULT_TIMEOUT,
          progress: bool = True, say: Callable[[str], None] = print,
          mirrors: tuple[str, ...] | None = None) -> FetchResult:
    """Make ``spec`` present as Caffe databases under ``data_dir``; see the module docstring."""
    started = time.monotonic()
    db.check_backend(backend)
    out = layout.dataset_dir(spec, data_dir)
    if out.exists() and not force:
        try:
            existing = layout.load(spec, data_dir)
        except CaffetoolError as e:
            raise ConfigError(f"{out} exists but is not a complete data set ({e}); "
                              "rerun with --force to rebuild it") from None
        if existing.backend != backend:
            raise ConfigError(f"{out} holds {existing.backend} databases; rerun with --force "
                              f"to replace them with {backend}")
        return FetchResult(existing, True, time.monotonic() - started)

    files = obtain(spec, source, timeout, progress, say, mirrors)
    t_obtained = time.monotonic()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
    try:
        build = tmp / out.name
        build.mkdir()
        splits = {}
        for split, (images_role, labels_role) in SPLITS.items():
            stats = convert.convert(
                files[images_role]["path"], files[labels_role]["path"], build / f"{split}_{backend}",
                backend, num_classes=len(spec.classes), progress=progress, desc=f"{spec.name} {split}",
            )
            splits[split] = {"db": f"{split}_{backend}", "count": stats.count,
                             "shape": list(stats.shape), "histogram": stats.histogram}
        (build / layout.LABELS).write_text("".join(f"{c}\n" for c in spec.classes))
        manifest = _manifest(spec, backend, splits, files,
                             {"obtain": t_obtained - started, "convert": time.monotonic() - t_obtained})
        (build / layout.MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        if out.exists():
            os.rename(out, tmp / "replaced")
        os.rename(build, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return FetchResult(layout.load(spec, data_dir), False, time.monotonic() - started)


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


def obtain(spec: DatasetSpec, source: str | None, timeout: float, progress: bool,
           say: Callable[[str], None], mirrors: tuple[str, ...] | None = None) -> dict[str, dict]:
    """Verified local paths of all of ``spec``'s files: {role: {path, name, sha256, source}}."""
    cache = layout.raw_dir(spec)
    cache.mkdir(parents=True, exist_ok=True)
    verified = _read_verified(cache)
    found: dict[str, dict] = {}
    installed_package = False
    for f in spec.files:
        target = cache / f.name
        known = verified.get(f.name, {})
        if target.exists() and known.get("sha256") == sha256_file(target):
            found[f.role] = {"path": target, "name": f.name, **known}
            continue
        failures: list[str] = []
        candidates = _candidates(spec, f, source, mirrors)
        for origin, kind in candidates:
            if kind == "package" and not installed_package:
                installed_package = True
                try:
                    if apt.install_packages([spec.debian_package]):
                        say(f"installed Debian package {spec.debian_package}")
                except CaffetoolError as e:
                    failures.append(f"{spec.debian_package}: {e}")
                continue
            try:
                if kind == "url":
                    download.download(origin, target, lambda p, o=origin, f=f: verify(p, f, o), timeout,
                                      progress, f.size)
                else:
                    _copy_verified(Path(origin), target, f)
            except (SourceError, OSError) as e:
                failures.append(str(e))
                continue
            verified[f.name] = {"sha256": sha256_file(target), "source": origin}
            _write_verified(cache, verified)
            found[f.role] = {"path": target, "name": f.name, **verified[f.name]}
            say(f"{f.name}: verified, from {origin}")
            break
        else:
            tried = "\n  ".join(failures or ["no source"])
            raise SourceError(
                f"{spec.name}: could not obtain {f.name}; tried:\n  {tried}\n"
                f"Pass --source DIR|URL holding {', '.join(x.name for x in spec.files)}"
            )
    return found


def _candidates(spec: DatasetSpec, f: IdxFile, source: str | None,
                mirrors: tuple[str, ...] | None) -> list[tuple[str, str]]:
    """(location, kind) pairs in the order they are tried; kind is path, url or package."""
    out: list[tuple[str, str]] = []
    names = (f.name, f.name.removesuffix(".gz"))
    if source:
        if "://" in source:
            out.append((source.rstrip("/") + "/" + f.name, "url"))
        else:
            out += [(str(Path(source).expanduser() / n), "path") for n in names]
    local = [(str(d / n), "path") for d in spec.local_dirs for n in names]
    out += [(p, k) for p, k in local if Path(p).exists()]
    if spec.debian_package and not any(Path(p).exists() for p, _ in local):
        out.append((spec.debian_package, "package"))
        out += local
    out += [(m.rstrip("/") + "/" + f.name, "url") for m in (mirrors if mirrors is not None else spec.mirrors)]
    return out


def _copy_verified(src: Path, target: Path, f: IdxFile) -> None:
    if not src.is_file():
        raise SourceError(f"{src}: not found")
    part = target.with_name(target.name + ".part")
    shutil.copyfile(src, part)
    try:
        verify(part, f, str(src))
    except ChecksumMismatch:
        part.unlink(missing_ok=True)
        raise
    os.replace(part, target)


def verify(path: Path, f: IdxFile, origin: str) -> None:
    """Accept ``path`` if its own sha256, or that of its decompressed content, is declared."""
    digest = sha256_file(path)
    if f.sha256 and digest == f.sha256:
        return
    content = _content_sha256(path) if f.idx_sha256 else None
    if content is not None and content == f.idx_sha256:
        return
    expected = " or ".join(x for x in (
        f.sha256 and f"file sha256 {f.sha256}", f.idx_sha256 and f"IDX content sha256 {f.idx_sha256}") if x)
    raise ChecksumMismatch(f"{f.name} from {origin} failed verification: file sha256 {digest}"
                           f"{f', content sha256 {content}' if content else ''}; expected {expected}; "
                           "the copy was deleted")


def _content_sha256(path: Path) -> str | None:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as probe:
            opener = gzip.open if probe.read(2) == b"\x1f\x8b" else open
        with opener(path, "rb") as f:
            while block := f.read(CHUNK):
                digest.update(block)
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    return digest.hexdigest()


def _read_verified(cache: Path) -> dict[str, dict]:
    """{file name: {sha256, source}} of the files this cache verified (re-checked by sha256)."""
    try:
        data = json.loads((cache / VERIFIED).read_text())
        return {k: v for k, v in data.items() if isinstance(v, dict)}
    except (OSError, ValueError, AttributeError):
        return {}


def _write_verified(cache: Path, verified: dict[str, dict]) -> None:
    tmp = cache / f".{VERIFIED}.tmp"
    tmp.write_text(json.dumps(verified, indent=1))
    os.replace(tmp, cache / VERIFIED)
