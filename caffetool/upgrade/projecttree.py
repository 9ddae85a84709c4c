"""A project's folder walked for ``caffetool upgrade`` without trusting what is in it.

A project may hold anything a file system can: FIFOs and sockets (which block or fail when read),
device nodes, links out of the project or to nowhere, names that are not UTF-8, folders that
cannot be listed, files that vanish while they are copied, nesting past the system's path length.
The walk therefore never follows a link and never opens what ``lstat`` does not call a regular
file; a file is opened without following links and without blocking, and checked again on the
open descriptor, so a file swapped for a FIFO in between is refused, not waited on. Whatever is not
copied is a :class:`ProjectEntry` with a reason for the report, and the walk goes on. It is iterative
(no recursion limit, however deep the folders).

Names are kept as the file system has them (``str`` with undecodable bytes as surrogates, which
``os`` turns back into the same bytes); :func:`shown` is the form for people and reports.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from caffetool.errors import CaffetoolError

CHUNK = 1 << 20
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
         (stat.S_ISBLK, "a block device"))


class UnreadableEntry(CaffetoolError):
    """A file or folder of the project that could not be read; the message is the reason."""


@dataclass(frozen=True)
class ProjectEntry:
    """One thing in the project: ``kind`` is ``folder``, ``file``, ``link`` (``link_to`` is what the
    copy's link says) or ``skipped``; ``note`` is what the report says of it, if anything."""

    path: Path
    relative: Path
    kind: str
    note: str = ""
    link_to: str = ""


def shown(name: str | Path) -> str:
    """``name`` printable anywhere: bytes that are not UTF-8 as ``\\xe9`` escapes, and control
    characters as ``\\x0a`` ones (a name with a newline or a terminal escape in it cannot forge a
    line of the report or repaint the terminal)."""
    text = os.fsencode(str(name)).decode("utf-8", "backslashreplace")
    return CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def walk(root: Path) -> Iterator[ProjectEntry]:
    """Everything under ``root`` (a real folder, links resolved), each folder before its contents,
    names sorted. A folder that cannot be listed is one ``skipped`` entry; ``root`` itself raises
    :class:`UnreadableEntry`."""
    pending = [root]
    while pending:
        folder = pending.pop()
        try:
            names = sorted(os.listdir(folder))
        except OSError as e:
            if folder == root:
                raise UnreadableEntry(f"{shown(root)}: {_reason(e)}") from None
            yield ProjectEntry(folder, folder.relative_to(root), "skipped", f"folder {_reason(e)}: its files are not "
                        "copied")
            continue
        inner = []
        for name in names:
            entry = _entry(folder / name, root)
            yield entry
            if entry.kind == "folder":
                inner.append(entry.path)
        pending.extend(reversed(inner))


def _entry(path: Path, root: Path) -> ProjectEntry:
    relative = path.relative_to(root)
    try:
        mode = os.lstat(path).st_mode
    except OSError as e:
        return ProjectEntry(path, relative, "skipped", f"{_reason(e)}: not copied")
    if stat.S_ISLNK(mode):
        return _link(path, relative, root)
    if stat.S_ISDIR(mode):
        return ProjectEntry(path, relative, "folder")
    if stat.S_ISREG(mode):
        return ProjectEntry(path, relative, "file")
    return ProjectEntry(path, relative, "skipped", f"not a regular file ({kind_of(mode)}): not copied")


def _link(path: Path, relative: Path, root: Path) -> ProjectEntry:
    """A link stays a link. One into the project is made relative, so the copy's link points into
    the copy; one out of it, or to nothing, keeps its text and is named: its target is not read."""
    try:
        text = os.readlink(path)
    except OSError as e:
        return ProjectEntry(path, relative, "skipped", f"link {_reason(e)}: not copied")
    real = Path(os.path.realpath(path))
    if not os.path.exists(real):
        return ProjectEntry(path, relative, "link", f"a link to {shown(text)}, which does not exist (or loops): "
                            "kept as a link", text)
    if real != root and not real.is_relative_to(root):
        return ProjectEntry(path, relative, "link", f"a link to {shown(text)} outside the project: kept as a link, "
                            "not converted; copy it in to convert it", text)
    return ProjectEntry(path, relative, "link", "", os.path.relpath(real, path.parent))


def kind_of(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    return next((what for test, what in KINDS if test(mode)), "not a file")


def open_regular(path: Path) -> BinaryIO:
    """``path`` open for reading if it is a regular file, not reached through a link; otherwise
    :class:`UnreadableEntry`. Opening does not block (a FIFO would wait for a writer)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise UnreadableEntry(_reason(e)) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise UnreadableEntry(f"not a regular file ({kind_of(mode)})")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_file(path: Path) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular file ``path`` and its status; a failure to read is
    :class:`UnreadableEntry`."""
    with open_regular(path) as f:
        try:
            return f.read(), os.fstat(f.fileno())
        except OSError as e:
            raise UnreadableEntry(_reason(e)) from None


def copy_file(path: Path, out: Path) -> None:
    """Copy the regular file ``path`` to ``out`` with its permissions and times. A failure to read
    is :class:`UnreadableEntry` (and ``out`` is removed); a failure to write is the ``OSError``."""
    with open_regular(path) as source:
        status = os.fstat(source.fileno())
        try:
            with open(out, "wb") as copy:
                while chunk := _chunk(source):
                    copy.write(chunk)
        except UnreadableEntry:
            out.unlink(missing_ok=True)
            raise
    keep_status(out, status)


def keep_status(out: Path, status: os.stat_result) -> None:
    """Give ``out`` the permissions and modification time of the file ``status`` describes."""
    os.chmod(out, stat.S_IMODE(status.st_mode))
    os.utime(out, ns=(status.st_atime_ns, status.st_mtime_ns))


def _chunk(source: BinaryIO) -> bytes:
    try:
        return source.read(CHUNK)
    except OSError as e:
        raise UnreadableEntry(_reason(e)) from None


def _reason(e: OSError) -> str:
    """Why a read failed, as a phrase: ``cannot be read (Input/output error)``."""
    if isinstance(e, FileNotFoundError):
        return "gone while the project was read"
    return f"cannot be read ({e.strerror or e})"
