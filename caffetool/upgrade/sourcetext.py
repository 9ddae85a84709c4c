"""A Python source file's bytes as text and back, stored as they were.

A converted file is written back as Python read the original (PEP 263's coding line, a UTF-8 BOM),
each line with its own ending, so a latin-1 script stays latin-1 and a CRLF one CRLF, and the only
bytes that differ are those the conversion changed.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

_ENDING = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class Stored:
    """How a source file's text was stored, to write its conversion back the same way."""

    encoding: str  # as :func:`tokenize.detect_encoding` names it: ``utf-8-sig`` has a BOM
    endings: tuple[str, ...] = ()  # each line's ending, in order; () where all are "\n"


def decode_source(data: bytes) -> tuple[str, Stored]:
    """``data`` as text with ``\\n`` line endings, decoded as Python decodes a source file (a UTF-8
    BOM, else PEP 263's coding line, else UTF-8), and how it was stored. Raises UnicodeDecodeError
    where it is not text in that encoding, or names an encoding Python does not know."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as e:
        raise UnicodeDecodeError("utf-8", data[:0], 0, 0, str(e)) from None
    text = data.decode(encoding)
    if "\r" not in text:
        return text, Stored(encoding)
    return _ENDING.sub("\n", text), Stored(encoding, tuple(_ENDING.findall(text)))


def encode_source(text: str, stored: Stored) -> bytes:
    """``text`` (``\\n`` line endings) stored as :func:`decode_source` found its original: the same
    encoding (a BOM kept) and line endings, line by line where the lines are as many as before,
    else the original's most common one."""
    if stored.endings:
        lines = text.split("\n")
        endings = stored.endings
        if len(endings) != len(lines) - 1:
            endings = (Counter(endings).most_common(1)[0][0],) * (len(lines) - 1)
        text = "".join(line + ending for line, ending in zip(lines, endings)) + lines[-1]
    return text.encode(stored.encoding)


def read_source(path: Path) -> tuple[str, Stored]:
    """The file at ``path`` as :func:`decode_source` reads it."""
    return decode_source(path.read_bytes())


def write_source(path: Path, text: str, stored: Stored) -> None:
    """``text`` written to ``path`` as :func:`encode_source` stores it."""
    path.write_bytes(encode_source(text, stored))
