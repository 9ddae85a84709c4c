"""File checksums, read in chunks so multi-gigabyte files never sit in memory."""

from __future__ import annotations

import hashlib
from pathlib import Path

from caffetool.errors import ChecksumMismatch

CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def verify_sha256(path: Path, expected: str, origin: str, name: str | None = None) -> None:
    """Raise ChecksumMismatch naming the file, where it came from and both digests.

    ``name`` is the file's own name where ``path`` is a temporary copy of it.
    """
    found = sha256_file(path)
    if found != expected:
        raise ChecksumMismatch(
            f"{name or path.name} from {origin} has sha256 {found}, expected {expected}; "
            "the copy is corrupt or not the pinned release"
        )
