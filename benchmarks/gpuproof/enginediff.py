"""A second engine carried as its difference from the first: the files that differ, nothing else.

The GPU proof compares two CUDA engines in one call (the one under test and a baseline), and a
call carries at most 64 MiB: two engine bundles do not fit beside the data. Two engines built
from the same source with different patches share every vendored library byte for byte (their
RUNPATHs are set the same way by :func:`caffetool.engine.bundles.make`); what differs is
``libcaffe``, the ``caffe`` tool, pycaffe's ``_caffe.so`` and the build manifest. :func:`pack`
(here) compares the two bundles member by member and writes only the differing members, xz
compressed, with a list of what the second lacks; :func:`install_copy` (on the GPU machine, the
standard library alone) makes the second engine as a copy of the first installed one with those
members replaced, each file checked against its sha256.
"""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import shutil
import subprocess
import tarfile
from pathlib import Path, PurePosixPath

ARCHIVE = "engine.tar.xz"
LISTING = "engine.json"
BUNDLE_MANIFEST = "caffetool-bundle.json"  # a bundle's first member, not part of the install


def entries(archive: Path) -> dict[str, tuple[str, str]]:
    """A bundle's install, member by member: name -> ("file", sha256) or ("link", target)."""
    found: dict[str, tuple[str, str]] = {}
    with open_bundle(archive) as tar:
        for member in tar:
            if member.name == BUNDLE_MANIFEST:
                continue
            if member.issym():
                found[member.name] = ("link", member.linkname)
            elif member.isfile():
                found[member.name] = ("file", hashlib.sha256(tar.extractfile(member).read()).hexdigest())
    return found


def changes(first: dict[str, tuple[str, str]], second: dict[str, tuple[str, str]]) -> tuple[list[str], list[str]]:
    """The members of ``second`` that ``first`` lacks or holds otherwise, and those only ``first`` has."""
    changed = sorted(name for name, entry in second.items() if first.get(name) != entry)
    removed = sorted(set(first) - set(second))
    return changed, removed


def pack(first: Path, second: Path, folder: Path) -> dict:
    """Write ``folder/engine.tar.xz`` (the members of bundle ``second`` that differ from bundle
    ``first``) and ``folder/engine.json`` (their sha256, and the members to delete); return the listing."""
    changed, removed = changes(entries(first), entries(second))
    wanted = set(changed)
    files: dict[str, str] = {}
    folder.mkdir(parents=True, exist_ok=True)
    with open_bundle(second) as src, tarfile.open(folder / ARCHIVE, "w:xz", preset=9 | lzma.PRESET_EXTREME) as out:
        for member in src:
            if member.name not in wanted:
                continue
            if member.isfile():
                data = src.extractfile(member).read()
                files[member.name] = hashlib.sha256(data).hexdigest()
                out.addfile(member, io.BytesIO(data))
            else:
                out.addfile(member)
    listing = {"changed": changed, "removed": removed, "files": files}
    (folder / LISTING).write_text(json.dumps(listing, indent=1) + "\n")
    return listing


def install_copy(engine: Path, folder: Path, target: Path) -> dict:
    """On the GPU machine: ``target`` made a copy of the installed ``engine`` with the members in
    ``folder`` (:func:`pack`'s output) put in and the removed ones deleted, then its ``caffe
    --version`` run with no library path. Returns the listing."""
    listing = json.loads((folder / LISTING).read_text())
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(engine, target, symlinks=True)  # lib/nvidia stays the link to the CUDA wheels
    for name in listing["removed"] + listing["changed"]:
        path = target / name
        if path.is_symlink() or path.is_file():
            path.unlink()
    with tarfile.open(folder / ARCHIVE, "r:xz") as tar:
        for member in tar:
            name = PurePosixPath(member.name)
            if name.is_absolute() or ".." in name.parts:
                raise ValueError(f"{folder / ARCHIVE}: member {member.name} points outside the engine")
            dest = target / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            if member.issym():
                dest.symlink_to(member.linkname)
            elif member.isfile():
                with tar.extractfile(member) as src, open(dest, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
                dest.chmod(member.mode & 0o755)
    for name, digest in listing["files"].items():
        if hashlib.sha256((target / name).read_bytes()).hexdigest() != digest:
            raise ValueError(f"{target / name} does not match the sha256 in {folder / LISTING}")
    caffe = target / "bin" / "caffe"
    if caffe.exists():
        subprocess.run([str(caffe), "--version"], check=True, capture_output=True,
                       env={"PATH": "/usr/bin:/bin"})  # no LD_LIBRARY_PATH: RUNPATHs alone must find everything
    return listing


def open_bundle(archive: Path) -> tarfile.TarFile:
    """A bundle's ``.tar.zst`` as a tar stream (zstandard: the caffetool venv here, a payload wheel there)."""
    import zstandard

    stream = zstandard.ZstdDecompressor().stream_reader(open(archive, "rb"), closefd=True)
    return tarfile.open(fileobj=stream, mode="r|")
