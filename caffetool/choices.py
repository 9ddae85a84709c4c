"""What a user typed, turned into a value the library can use — or one ``ConfigError`` that says why not.

Two kinds of value come in as text: one of a fixed set of names (``--solver adam``, ``--mode GPU``)
and a number (``--base-lr 0.01``, ``--max-iter 500``). Both are checked here, once, so every flag
refuses bad input with the same wording, names the flag, and never reaches a Python traceback.

Names are matched without regard to case and the canonical spelling is returned, because Caffe
itself is case-sensitive (``type: "Adam"``) while people type ``adam``. Numbers reject what Caffe
cannot use: text, fractions where a whole number is meant, NaN and infinities; a count (a batch
size, a number of iterations) must also be 1 or more and fit the 32-bit fields of Caffe's messages.
Ranges that depend on the setting (a momentum below 1) are declared where the setting is.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from caffetool.errors import ConfigError

INT32_MAX = 2**31 - 1  # Caffe's int32/uint32 protobuf fields and its blob size limit (INT_MAX)


def choose(value: str, options: Iterable[str], flag: str) -> str:
    """The canonical spelling of ``value`` among ``options``, ignoring case.

    ``flag`` is how the user named the option (``--solver``, or ``--dataset`` for a data set), so the
    refusal can point at what to change and list what would have been accepted.
    """
    options = list(options)
    wanted = str(value).strip().lower()
    for option in options:
        if option.lower() == wanted:
            return option
    raise ConfigError(f"unknown {flag} {value!r}; choose one of: {', '.join(options)}")


def number(value: object, flag: str, kind: type = float, minimum: float | None = None,
           maximum: float | None = None) -> int | float | None:
    """``value`` (a flag's text, a number, or None when the flag was not given) as ``kind``.

    None and "" stay None so callers can fall back to a configured or preset default.
    """
    if value is None or value == "":
        return None
    converted = _convert(value, flag, kind)
    if minimum is not None and converted < minimum:
        raise ConfigError(f"{flag} must be at least {minimum}, got {converted}")
    if maximum is not None and converted > maximum:
        raise ConfigError(f"{flag} must be at most {maximum}, got {converted}")
    return converted


def count(value: object, flag: str) -> int | None:
    """A batch size, an iteration count, a number of classes: a whole number Caffe can hold, 1 or more."""
    return number(value, flag, int, minimum=1, maximum=INT32_MAX)


def _convert(value: object, flag: str, kind: type) -> int | float:
    """Text or a number → ``kind``; ``1.5`` for a count is refused rather than truncated to 1."""
    if isinstance(value, bool):
        raise ConfigError(f"{flag} {value!r} is not a number")
    try:
        as_float = float(value)  # accepts "1e3" and "500" alike
    except (TypeError, ValueError):
        raise ConfigError(f"{flag} {value!r} is not a number") from None
    if not math.isfinite(as_float):
        raise ConfigError(f"{flag} {value!r} is not a finite number")
    if kind is float:
        return as_float
    whole = _whole(value, as_float)
    if whole is None:
        raise ConfigError(f"{flag} {value!r} is not a whole number")
    return whole


def _whole(value: object, as_float: float) -> int | None:
    """``value`` as an exact integer, or None for a fraction; big integers keep every digit."""
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        return int(as_float) if as_float.is_integer() else None
