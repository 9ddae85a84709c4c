"""The files a user keeps inside an engine prefix, carried into the engine that replaces it.

``engine.install --force`` (a build or a bundle) replaces a prefix caffetool made as one folder, in
one rename, so a half-replaced engine is never seen. A user's own files kept in that folder (notes,
a model beside the examples, a script) would go with the old engine. So each install lists what it
wrote (:data:`LISTING`), and a replacement copies every other file of the old prefix into the new
tree before the rename, at the same place. In a prefix installed before the listing existed,
caffetool's are the files the new engine also has and everything in the folders a build fills
(``bin``, ``lib``, ``include`` ...: an older recipe's leftovers there are not carried); the rest is
carried. Python's byte-code caches are caffetool's. A file of the user's at a path the new
engine writes is refused by name before anything changes.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from caffetool.errors import EngineError

LISTING = Path("share/caffetool/files.txt")  # in a prefix: every file the install wrote, one per line
BUILT = ("bin", "lib", "lib64", "include", "python", "cuda")  # a prefix's folders the build fills


def record(tree: Path) -> None:
    """List every file and link under ``tree`` (a finished install, before it is moved into place)."""
    (tree / LISTING).parent.mkdir(parents=True, exist_ok=True)
    paths = sorted({*(str(p) for p in _files(tree)), str(LISTING)})
    (tree / LISTING).write_text("\n".join(paths) + "\n")


def carry_over(root: Path, tree: Path, say: Callable[[str], None] = print) -> list[Path]:
    """Copy the user's files in the prefix ``root`` into ``tree``, the engine about to replace it;
    the copied paths, relative to ``root``."""
    if not root.is_dir():
        return []
    listed = _listed(root)
    users = [p for p in _files(root) if not _caffetools(p, listed, tree)]
    clashes = [p for p in users if (tree / p).exists() or (tree / p).is_symlink()]
    if clashes:
        shown = ", ".join(map(str, clashes[:3])) + (", ..." if len(clashes) > 3 else "")
        raise EngineError(f"{root} holds files that caffetool did not install where the new engine puts its own "
                          f"({shown}); move them out of {root} and run the install again (nothing was changed)")
    for path in users:
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / path, tree / path, follow_symlinks=False)
    if users:
        shown = ", ".join(map(str, users[:5])) + (", ..." if len(users) > 5 else "")
        say(f"kept {len(users)} file(s) of yours from the engine it replaces: {shown}")
    return users


def _files(tree: Path) -> list[Path]:
    """Files and links under ``tree``, relative to it, without Python's byte-code caches; a link to a
    folder (a bundle's CUDA libraries) is one entry, not followed."""
    found = []
    for folder, dirs, files in os.walk(tree):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        here = Path(folder).relative_to(tree)
        found += [here / d for d in dirs if (Path(folder) / d).is_symlink()]
        found += [here / f for f in files]
    return found


def _listed(root: Path) -> set[Path] | None:
    try:
        return {Path(line) for line in (root / LISTING).read_text().splitlines() if line}
    except OSError:
        return None


def _caffetools(path: Path, listed: set[Path] | None, tree: Path) -> bool:
    if listed is not None:
        return path in listed
    return (tree / path).exists() or (tree / path).is_symlink() or path.parts[0] in BUILT
