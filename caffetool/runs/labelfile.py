"""A run's ``labels.txt``: the class names, one a line, read the same way by every command.

An empty file (or one of blank lines) names no class: it is refused, not taken for "no names",
so ``evaluate`` and the demo agree on it.
"""

from __future__ import annotations

from pathlib import Path

from caffetool.errors import ConfigError, DataError
from caffetool.runs.folder import NAMES

FILE = NAMES["labels"]
DEFAULT_TOP = 5  # the k of a top-k accuracy when --top is not given


def read(path: Path) -> list[str]:
    """The class names in ``path``, one a line, blank lines skipped."""
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise DataError(f"{path} is not a text file; {FILE} holds one class name a line") from None
    except OSError as e:
        raise DataError(f"{path} cannot be read ({e.strerror or e})") from None
    names = [line.strip() for line in text.splitlines() if line.strip()]
    if not names:
        raise DataError(f"{path} names no class; {FILE} holds one class name a line (or delete it: the classes "
                        "are then shown as numbers)")
    return names


def read_if_there(path: Path) -> list[str] | None:
    """:func:`read`, or None where the run has no ``labels.txt``."""
    return read(path) if path.exists() else None


def top_k(top: int | None, classes: int) -> int:
    """The k of a top-k over ``classes`` classes: :data:`DEFAULT_TOP` (or all of fewer) when not
    given; a ``--top`` of more classes than the net tells apart is refused, not silently lowered."""
    if top is None:
        return min(DEFAULT_TOP, classes)
    if top > classes:
        raise ConfigError(f"--top {top} is more than the {classes} classes the net tells apart; "
                          f"give --top {classes} or less")
    return top
