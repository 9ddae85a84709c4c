"""HTTP downloads that resume, time out, verify and never leave a bad file in place.

A download streams into ``<name>.part``; after an interruption the next attempt (from the same
or the next mirror) asks for the rest with an HTTP Range request. Only a file whose checksum
matches is renamed to its final name; a mismatch deletes it and names the file and the mirror.
"""

from __future__ import annotations

import http.client
import os
import socket
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from caffetool.errors import SourceError

CHUNK = 1 << 16
DEFAULT_TIMEOUT = 30.0
USER_AGENT = "caffetool (+https://github.com/BVLC/caffe data fetcher)"


class DownloadError(SourceError):
    """One mirror failed; the next may still succeed."""


def download(url: str, dest: Path, verify: Callable[[Path], None], timeout: float = DEFAULT_TIMEOUT,
             progress: bool = True, expected_size: int | None = None) -> Path:
    """Fetch ``url`` to ``dest`` (resuming ``dest.part``), run ``verify`` on it, rename into place.

    ``verify`` raises (ChecksumMismatch) to reject the file; the partial file is then deleted so
    the next mirror starts afresh.
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
            return _finish(part, dest, url, verify)
        raise DownloadError(f"{url}: HTTP {e.code} {e.reason}") from e
    except (urllib.error.URLError, socket.timeout, OSError, http.client.HTTPException) as e:
        raise DownloadError(f"{url}: {getattr(e, 'reason', e)}") from e
    with response:
        resumed = response.status == 206
        if not resumed:
            have = 0
        length = response.headers.get("Content-Length")
        total = have + int(length) if length else expected_size
        bar = _bar(total, have, dest.name) if progress else None
        try:
            with open(part, "ab" if resumed else "wb") as f:
                while True:
                    try:
                        block = response.read(CHUNK)
                    except (socket.timeout, OSError, http.client.HTTPException) as e:
                        raise DownloadError(
                            f"{url}: stalled after {f.tell()} bytes ({e}); the partial file is kept "
                            "and the next attempt resumes from there"
                        ) from e
                    if not block:
                        break
                    f.write(block)
                    if bar is not None:
                        bar.update(len(block))
                received = f.tell()
        finally:
            if bar is not None:
                bar.close()
    if total is not None and received < total:
        raise DownloadError(f"{url}: connection closed after {received} of {total} bytes; "
                            "the next attempt resumes from there")
    return _finish(part, dest, url, verify)


def _finish(part: Path, dest: Path, url: str, verify: Callable[[Path], None]) -> Path:
    try:
        verify(part)
    except Exception:
        part.unlink(missing_ok=True)
        raise
    os.replace(part, dest)
    return dest


def _bar(total: int | None, initial: int, name: str):
    from tqdm import tqdm  # noqa: PLC0415

    return tqdm(total=total, initial=initial, unit="B", unit_scale=True, desc=name, leave=False,
                disable=None)  # None: off unless a TTY
