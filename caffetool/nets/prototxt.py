"""Reading and writing prototxt with errors that point at the line and column."""

from __future__ import annotations

import os
from pathlib import Path

from google.protobuf import text_format

from caffetool.errors import ConfigError


def parse(text: str, message, where: str):
    """Parse ``text`` into ``message``; a syntax error names ``where``, line and column."""
    try:
        return text_format.Parse(text, message)
    except text_format.ParseError as e:
        line, column = e.GetLine(), e.GetColumn()
        detail = str(e).split(" : ", 1)[-1] if " : " in str(e) else str(e)
        at = f"{where}:{line}:{column}" if line else where
        raise ConfigError(f"{at}: {detail}") from None


def read(path: Path, message):
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from None
    return parse(text, message, str(path))


def to_text(message) -> str:
    return text_format.MessageToString(message)


def round_trip(message, name: str) -> str:
    """The text of ``message``, checked to parse back into an equal message."""
    text = to_text(message)
    again = parse(text, type(message)(), name)
    if again != message:
        raise ConfigError(f"{name} does not survive a text_format round trip")
    return text


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
