"""Reading and writing prototxt with errors that point at the file, the line and the column.

Everything read here is a net or solver description, so every refusal is a :class:`NetError`
naming the file: one that cannot be read, is not text (a binary file given as ``--net``), holds
nothing, or does not parse. A net written for another fork of Caffe (a layer type, parameter field or
Python layer the engine lacks) is refused as such by :mod:`caffetool.nets.forks`, naming the layer,
its type and the fork, whichever task reads it. Writing goes through :func:`caffetool.fsio.write_atomic`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TypeVar

from google.protobuf import text_format
from google.protobuf.message import Message

from caffetool.errors import NetError, UnsupportedLayer
from caffetool.nets import forks

M = TypeVar("M", bound=Message)


def parse(text: str, message: M, where: str) -> M:
    """Parse ``text`` into ``message``; a syntax error names ``where``, line and column, and a layer
    of another fork is named with its type and the fork (:mod:`caffetool.nets.forks`)."""
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as e:
        if (refusal := forks.unknown_field(e, text, where, message)) is not None:
            raise refusal from None
        line, column = e.GetLine(), e.GetColumn()
        detail = str(e).split(" : ", 1)[-1] if " : " in str(e) else str(e)
        at = f"{where}:{line}:{column}" if line else where
        raise NetError(f"{at}: {detail}") from None
    forks.check(message, text, where)
    return message


# Caffe's two kinds of prototxt, by message name: a file of the other kind is named as such.
KINDS = {"NetParameter": "a net", "SolverParameter": "a solver"}


def read(path: Path, message: M, flag: str | None = None) -> M:
    """The prototxt at ``path`` parsed into ``message``; a net given where a solver goes (or the
    other way round) is named as that, with ``flag`` when the path came from one."""
    text = read_text(path)
    try:
        return parse(text, message, str(path))
    except UnsupportedLayer:
        raise  # a net of another fork, read as a net: nothing to say about the kind of file
    except NetError:
        wanted = KINDS.get(type(message).__name__)
        for name, kind in KINDS.items():
            other = getattr(sys.modules[type(message).__module__], name, None)
            if wanted and kind != wanted and other is not None and _parses(text, other()):
                raise NetError(f"{flag + ' ' if flag else ''}{path} is {kind} prototxt, not {wanted}; "
                               f"give {wanted} here") from None
        raise


def _parses(text: str, message: Message) -> bool:
    try:
        text_format.Parse(text, message)
    except text_format.ParseError:
        return False
    return True


def read_text(path: Path) -> str:
    """The text of the prototxt at ``path``: a readable text file that says something.

    Cheap enough to call on a ``--net`` flag before any slow work, so a wrong file is named first.
    """
    try:
        text = Path(path).read_text()
    except UnicodeDecodeError:
        raise NetError(f"{path} is not a text file; a prototxt is text (a binary .caffemodel goes in --weights)") from None
    except OSError as e:
        raise NetError(f"cannot read {path}: {e.strerror}") from None
    if not text.strip():
        raise NetError(f"{path} is empty; a prototxt describes a net or a solver")
    return text


def to_text(message: Message) -> str:
    """The message in protobuf text format, as Caffe's own prototxt files are written."""
    return text_format.MessageToString(message)


def round_trip(message: Message, name: str) -> str:
    """The text of ``message``, checked to parse back into an equal message."""
    text = to_text(message)
    again = parse(text, type(message)(), name)
    if again != message:
        raise NetError(f"{name} does not survive a text_format round trip")
    return text
