"""The image in a request body: the first file of a multipart form, or the body itself.

Multipart is parsed here, with python-multipart's streaming parser over the bytes already read,
rather than by Starlette's ``request.form()``: that spools every uploaded file past 1 MB to a
temporary file on disk, and the demo keeps uploads in memory only (the body it parses is already
capped at ``--max-body``).
"""

from __future__ import annotations

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

from caffetool.errors import ImageError


class BadMultipart(ImageError):
    """A multipart body that is malformed or holds no file."""


def image_bytes(content_type: str, body: bytes) -> bytes:
    """The first non-empty part of a ``multipart/form-data`` body, or ``body`` for any other type."""
    kind, options = parse_options_header(content_type)
    if kind != b"multipart/form-data":
        return body
    boundary = options.get(b"boundary")
    if not boundary:
        raise BadMultipart("multipart body without a boundary")
    files = [part for part in _parts(boundary, body) if part]
    if not files:
        raise BadMultipart("the multipart body holds no file")
    return files[0]


def _parts(boundary: bytes, body: bytes) -> list[bytes]:
    """The data of every complete part of ``body``, in order."""
    parts: list[bytes] = []
    current: list[bytearray] = []

    def on_part_begin() -> None:
        current.append(bytearray())

    def on_part_data(data: bytes, start: int, end: int) -> None:
        current[-1] += data[start:end]

    def on_part_end() -> None:
        parts.append(bytes(current.pop()))

    # By hand, not request.form(): Starlette would spool files over 1 MB to disk; uploads stay in memory.
    parser = MultipartParser(boundary, {"on_part_begin": on_part_begin, "on_part_data": on_part_data,
                                        "on_part_end": on_part_end})
    try:
        parser.write(body)
        parser.finalize()
    except MultipartParseError as e:
        raise BadMultipart(f"malformed multipart body: {e}") from None
    if current:
        raise BadMultipart("the multipart body ends inside a part, before its closing boundary")
    return parts
