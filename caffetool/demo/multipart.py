"""The images in a request body: the files of a multipart form, or the body itself.

Multipart is parsed here, with python-multipart's streaming parser over the bytes already read,
rather than by Starlette's ``request.form()``: that spools every uploaded file past 1 MB to a
temporary file on disk, and the demo keeps uploads in memory only (the body it parses is already
capped at ``--max-body``). A form may carry several files ("classify many"); every non-empty part
counts as one, up to a limit, and keeps the file name its client gave, for the answer to name it.
A route that takes settings in the form too (a detector's ``threshold``) takes those parts out by
their field name first (:func:`settings`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header

from caffetool.errors import ImageError

MAX_NAME = 200  # characters of a client's file name echoed back
MAX_BOUNDARY = 70  # characters of a boundary (RFC 2046, section 5.1.1)


class BadMultipart(ImageError):
    """A multipart body that is malformed or holds no file."""


class TooManyFiles(ImageError):
    """A multipart body holding more files than one request may classify."""


@dataclass(frozen=True)
class Upload:
    """One image of a request: its bytes, and the file name the client gave (None for a raw body)."""

    name: str | None
    data: bytes
    field: str | None = field(default=None, compare=False)  # the form's name for the part (``name=``)


def uploads(content_type: str, body: bytes, max_files: int | None = None) -> list[Upload]:
    """The non-empty parts of a ``multipart/form-data`` body, in order, or ``body`` for any other type."""
    kind, options = parse_options_header(content_type)
    if kind != b"multipart/form-data":
        return [Upload(None, body)]
    boundary = options.get(b"boundary")
    if not boundary:
        raise BadMultipart("multipart body without a boundary")
    if len(boundary) > MAX_BOUNDARY:
        raise BadMultipart(f"the multipart boundary is {len(boundary)} characters long; RFC 2046 allows at most "
                           f"{MAX_BOUNDARY}")
    files = [part for part in _parts(boundary, body) if part.data]
    if not files:
        raise BadMultipart("the multipart body holds no file")
    if max_files is not None and len(files) > max_files:
        raise TooManyFiles(f"{len(files)} files in one request, over the limit of {max_files}")
    return files


def settings(parts: list[Upload], names: tuple[str, ...]) -> tuple[dict[str, str], list[Upload]]:
    """The text fields among ``parts`` whose field name is one of ``names`` (parts without a file
    name), by name, and the other parts; a field that is not text is left among the files."""
    found: dict[str, str] = {}
    rest: list[Upload] = []
    for part in parts:
        if part.name is None and part.field in names:
            try:
                found[part.field] = part.data.decode("ascii").strip()
                continue
            except UnicodeDecodeError:
                pass
        rest.append(part)
    return found, rest


def image_bytes(content_type: str, body: bytes) -> bytes:
    """The first non-empty part of a ``multipart/form-data`` body, or ``body`` for any other type."""
    return uploads(content_type, body)[0].data


def _parts(boundary: bytes, body: bytes) -> list[Upload]:
    """Every complete part of ``body``, in order, with its file name."""
    parts: list[Upload] = []
    data: list[bytearray] = []
    headers: dict[bytes, bytes] = {}
    header, value = bytearray(), bytearray()

    def on_part_begin() -> None:
        data.append(bytearray())
        headers.clear()

    def on_header_field(chunk: bytes, start: int, end: int) -> None:
        header.extend(chunk[start:end])

    def on_header_value(chunk: bytes, start: int, end: int) -> None:
        value.extend(chunk[start:end])

    def on_header_end() -> None:
        headers[bytes(header).lower()] = bytes(value)
        header.clear()
        value.clear()

    def on_part_data(chunk: bytes, start: int, end: int) -> None:
        data[-1] += chunk[start:end]

    def on_part_end() -> None:
        disposition = headers.get(b"content-disposition", b"")
        parts.append(Upload(_file_name(disposition), bytes(data.pop()), _field_name(disposition)))

    try:
        parser = MultipartParser(boundary, {
            "on_part_begin": on_part_begin, "on_header_field": on_header_field, "on_header_value": on_header_value,
            "on_header_end": on_header_end, "on_part_data": on_part_data, "on_part_end": on_part_end})
        parser.write(body)
        parser.finalize()
    except FormParserError as e:
        raise BadMultipart(f"malformed multipart body: {e}") from None
    if data:
        raise BadMultipart("the multipart body ends inside a part, before its closing boundary")
    return parts


def _field_name(disposition: bytes) -> str | None:
    raw = parse_options_header(disposition)[1].get(b"name")
    return raw.decode("utf-8", errors="replace")[:MAX_NAME] if raw else None


def _file_name(disposition: bytes) -> str | None:
    """The last path component of a part's ``filename`` (old browsers send the whole path), printable."""
    raw = parse_options_header(disposition)[1].get(b"filename")
    if not raw:
        return None
    name = re.split(r"[\\/]", raw.decode("utf-8", errors="replace"))[-1]
    return "".join(ch for ch in name if ch.isprintable())[:MAX_NAME] or None
