"""The one HTTP downloader: data files, engine source tarballs and engine bundles all use it.

:func:`download` fetches a URL, :func:`copy` takes the same file from a local folder; both accept
it only once ``verify`` passes. A download streams into ``<name>.part`` with a timeout, a User-Agent and a progress bar (shown
on a terminal only). After an interruption the next attempt (from the same or another URL) asks
for the rest with an HTTP Range request. Only a file that ``verify`` accepts is renamed to its
final name; a rejected one is deleted, so the next attempt starts afresh.

Limits: the standard library's ``urllib`` (no extra dependency; HTTP and HTTPS with the system's
certificates), one connection per file, and a server that ignores Range is read from the start.
A failure to *write* (disk full, read-only folder) is not a download failure: the ``.part`` is
deleted and the ``OSError`` raised as it is, for the caller to report (:func:`is_disk_full`).
"""

from __future__ import annotations

import errno
import http.client
import os
import shutil
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from caffetool import fsio
from caffetool.errors import SourceError

CHUNK = 1 << 16
DEFAULT_TIMEOUT = 30.0
USER_AGENT = "caffetool (+https://github.com/BVLC/caffe data and source fetcher)"
NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)

if TYPE_CHECKING:
    from tqdm import tqdm


class DownloadError(SourceError):
    """One URL failed; another (or a later attempt at the same one) may still succeed."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"{url}: {reason}", attempts=[(url, reason)])
        self.url, self.reason = url, reason


def is_disk_full(error: OSError) -> bool:
    """True when ``error`` says the file system (or the user's quota) has no room left."""
    return error.errno in NO_ROOM


def download(url: str, dest: Path, verify: Callable[[Path], None] | None = None,
             timeout: float = DEFAULT_TIMEOUT, progress: bool = True,
             expected_size: int | None = None) -> Path:
    """Fetch ``url`` to ``dest`` (resuming ``dest.part``), run ``verify`` on it, rename into place.

    ``verify`` raises (ChecksumMismatch) to reject the file; the partial file is then deleted so
    the next URL starts afresh. ``expected_size`` sizes the progress bar when the server sends
    no Content-Length.
    """
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    if have:
        request.add_header("Range", f"bytes={have}-")
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # nothing left to send: the partial file is complete
            return _finish(part, dest, verify)
        raise DownloadError(url, f"HTTP {e.code} {e.reason}") from e
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as e:
        raise DownloadError(url, str(getattr(e, "reason", e))) from e
    with response:
        resumed = response.status == 206
        length = response.headers.get("Content-Length")
        start = have if resumed else 0
        total = start + int(length) if length else expected_size
        received = _stream(response, part, resumed, url, _bar(total, start, dest.name, progress))
    if total is not None and received < total:
        raise DownloadError(url, f"connection closed after {received} of {total} bytes; "
                                 "the next attempt resumes from there")
    return _finish(part, dest, verify)


def copy(src: Path, dest: Path, verify: Callable[[Path], None] | None = None) -> Path:
    """Copy a local file to ``dest`` through a temporary sibling that only a passing ``verify`` renames.

    A source that cannot be read raises SourceError (the next source may do); a failed write
    raises the ``OSError``, and nothing is left at or beside ``dest`` in either case.
    """
    try:
        reader = open(src, "rb")
    except OSError as e:
        reason = (e.strerror or str(e)).lower()
        raise SourceError(f"{src}: {reason}", attempts=[(str(src), reason)]) from e
    with reader, fsio.atomic_file(dest) as tmp:
        with open(tmp, "wb") as writer:
            shutil.copyfileobj(reader, writer, CHUNK)
        if verify is not None:
            verify(tmp)
    return dest


def _stream(response: BinaryIO, part: Path, append: bool, url: str, bar: tqdm | None) -> int:
    """Copy the body into ``part``; returns its size.

    A stalled server keeps the part for the next attempt to resume; a failed write deletes it
    (on a full disk it is only in the way) and raises the ``OSError``.
    """
    try:
        with open(part, "ab" if append else "wb") as f:
            while True:
                try:
                    block = response.read(CHUNK)
                except (OSError, http.client.HTTPException) as e:
                    raise DownloadError(url, f"stalled after {f.tell()} bytes ({e}); the partial "
                                             "file is kept and the next attempt resumes from there") from e
                if not block:
                    return f.tell()
                f.write(block)
                if bar is not None:
                    bar.update(len(block))
    except OSError:
        part.unlink(missing_ok=True)
        raise
    finally:
        if bar is not None:
            bar.close()


def _finish(part: Path, dest: Path, verify: Callable[[Path], None] | None) -> Path:
    if verify is not None:
        try:
            verify(part)
        except Exception:
            part.unlink(missing_ok=True)
            raise
    os.replace(part, dest)
    return dest


def _bar(total: int | None, initial: int, name: str, progress: bool) -> tqdm | None:
    if not progress:
        return None
    from tqdm import tqdm  # noqa: PLC0415 - tqdm costs a command's start-up; only a download needs it

    return tqdm(total=total, initial=initial, unit="B", unit_scale=True, desc=name, leave=False,
                disable=None)  # None: off unless a TTY
