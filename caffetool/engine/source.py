"""Obtain, verify, unpack and patch the engine's source.

Tarballs are tried in order: caffetool's cache (already verified) → ``--source`` (a folder or
a base URL holding both tarballs) → apt through a private configuration. Whatever the origin,
each tarball is checked against the pinned sha256 before it enters the cache, so every later
step works on exactly the bytes the recipe names. Downloads and copies go through
:mod:`caffetool.download`, so an interrupted download resumes where it stopped.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from caffetool import apt, download
from caffetool.apt import SourcePackage, Tarball
from caffetool.checksum import sha256_file, verify_sha256
from caffetool.engine.recipe import PATCH_DIR, PROJECT_PATCHES
from caffetool.errors import BuildError, ChecksumMismatch, SourceError

DOWNLOAD_TIMEOUT = 60.0


@dataclass(frozen=True)
class Patch:
    name: str
    origin: str  # "debian" or "caffetool"
    sha256: str


def obtain(pkg: SourcePackage, cache: Path, source: str | None, mirror: str | None) -> str:
    """Make both verified tarballs present in ``cache``; return where they came from."""
    cache.mkdir(parents=True, exist_ok=True)
    if _cached(pkg, cache):
        return "cache"
    try:
        return _obtain(pkg, cache, source, mirror)
    except OSError as e:
        if not download.is_disk_full(e):
            raise
        raise SourceError(f"no space left to write {e.filename or cache} ({e.strerror}); "
                          f"free space in {cache} and rerun") from e


def _obtain(pkg: SourcePackage, cache: Path, source: str | None, mirror: str | None) -> str:
    if source:
        for tarball in pkg.tarballs:
            if not (cache / tarball.name).exists():  # _cached removed any bad copy
                _from_location(tarball, cache, source)
        return source
    mirror = mirror or apt.system_debian_mirror()
    if not mirror:
        raise SourceError(
            "this machine's apt knows no Debian archive to fetch the Caffe source from; "
            "pass --debian-mirror URL (a Debian archive) or --source DIR|URL (the two tarballs)"
        )
    with tempfile.TemporaryDirectory(dir=cache, prefix=".apt-") as tmp:
        os.chmod(tmp, 0o755)
        apt.fetch_source(pkg, mirror, Path(tmp), cache / "apt")
        _adopt(pkg, Path(tmp), cache, origin=f"apt ({mirror} {pkg.suite})")
    return f"apt:{mirror} {pkg.suite}"


def _cached(pkg: SourcePackage, cache: Path) -> bool:
    """True when both tarballs are in the cache with the pinned checksums (bad copies removed)."""
    ok = True
    for tarball in pkg.tarballs:
        path = cache / tarball.name
        if not path.exists():
            ok = False
        elif path.stat().st_size != tarball.size or sha256_file(path) != tarball.sha256:
            path.unlink()
            ok = False
    return ok


def _from_location(tarball: Tarball, cache: Path, source: str) -> None:
    """Download or copy one tarball from ``source`` (a base URL or a folder) into the cache."""
    verify = _verifier(tarball, source)
    if "://" in source:
        url = source.rstrip("/") + "/" + tarball.name
        try:
            download.download(url, cache / tarball.name, verify, DOWNLOAD_TIMEOUT,
                              expected_size=tarball.size)
        except download.DownloadError as e:
            raise SourceError(f"could not download {e.url}: {e.reason}", attempts=e.attempts) from e
        return
    found = Path(source).expanduser() / tarball.name
    if not found.is_file():
        raise SourceError(f"{found} not found; --source must be a folder holding {tarball.name}",
                          attempts=[(str(found), "not found")])
    download.copy(found, cache / tarball.name, verify)


def _verifier(tarball: Tarball, origin: str) -> Callable[[Path], None]:
    """A check of a (temporary) copy of ``tarball`` against its pinned sha256."""
    return lambda path: verify_sha256(path, tarball.sha256, origin, name=tarball.name)


def _adopt(pkg: SourcePackage, staged: Path, cache: Path, origin: str) -> None:
    """Verify every tarball in ``staged`` and move it into the cache; a bad one is deleted."""
    for tarball in pkg.tarballs:
        path = staged / tarball.name
        if not path.exists():
            raise SourceError(f"{tarball.name} was not delivered by {origin}")
        try:
            verify_sha256(path, tarball.sha256, origin)
        except ChecksumMismatch:
            path.unlink()
            raise
    for tarball in pkg.tarballs:
        os.replace(staged / tarball.name, cache / tarball.name)


def unpack(pkg: SourcePackage, cache: Path, dest: Path) -> None:
    """Unpack the orig tarball into ``dest`` and the Debian tarball (``debian/``) inside it."""
    dest.mkdir(parents=True)
    for tarball in (pkg.orig, pkg.debian):
        with tarfile.open(cache / tarball.name) as tar:
            _extract_all(tar, dest)


def _extract_all(tar: tarfile.TarFile, dest: Path) -> None:
    """Unpack with tarfile's "data" filter where this Python has it (3.11.4+, 3.12); Debian 12's
    Python 3.11.2 has none, and these tarballs are the bytes their pinned sha256 names."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(dest, filter="data")
    else:
        tar.extractall(dest)  # noqa: S202 - verified by sha256 before it is opened


def apply_patches(tree: Path, log: Path, ours: tuple[str, ...] = PROJECT_PATCHES) -> list[Patch]:
    """Apply Debian's series, then caffetool's patches ``ours``; return them in order of application."""
    series = tree / "debian" / "patches" / "series"
    debian = [
        tree / "debian" / "patches" / line.split()[0]
        for line in series.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    applied = []
    for path, origin in [(p, "debian") for p in debian] + [(PATCH_DIR / name, "caffetool") for name in ours]:
        with open(log, "a") as out:
            out.write(f"$ patch -p1 < {path}\n")
            out.flush()
            done = subprocess.run(
                ["patch", "-p1", "--batch", "--forward", "-i", str(path)],
                cwd=tree, stdout=out, stderr=subprocess.STDOUT, check=False,
            )
        if done.returncode != 0:
            raise BuildError(f"{origin} patch {path.name} does not apply; see {log}")
        applied.append(Patch(path.name, origin, sha256_file(path)))
    return applied
