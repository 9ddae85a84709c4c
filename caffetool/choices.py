"""What a user typed, turned into a value the library can use — or one ``ConfigError`` that says why not.

Four kinds of value come in as text: one of a fixed set of names (``--type adam``, ``--mode GPU``),
a number (``--base-lr 0.01``, ``--max-iter 500``, ``--port 8080``), a place (``--data-dir``,
``--plot FILE``, ``--images FILE``) and words for another command (``--args "-k engine"``). All are
checked here, once, so every flag refuses bad input with the same wording, names the flag, and
never reaches a Python traceback.

Names are matched without regard to case and the canonical spelling is returned, because Caffe
itself is case-sensitive (``type: "Adam"``) while people type ``adam``. Numbers reject what Caffe
cannot use: text, fractions where a whole number is meant, NaN and infinities; a count (a batch
size, a number of iterations) must also be 1 or more and fit the 32-bit fields of Caffe's messages.
A :class:`Limit` declares the range of one setting with the words that describe it; ranges that
belong to one setting (a momentum below 1) are declared where the setting is. A folder or file to
write is checked before any work starts: a file given as a folder, or a read-only mount, would
otherwise fail only after a download or a build. Checking is not reserving: a place that changes
between the check and the write still fails there, with the writer's own error.
"""

from __future__ import annotations

import math
import os
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from caffetool.errors import ConfigError

INT32_MAX = 2**31 - 1  # Caffe's int32/uint32 protobuf fields and its blob size limit (INT_MAX)


def choose(value: str, options: Iterable[str], flag: str, also: str = "") -> str:
    """The canonical spelling of ``value`` among ``options``, ignoring case.

    ``flag`` is how the user named the option (``--type``, or ``--dataset`` for a data set), so the
    refusal can point at what to change and list what would have been accepted; ``also`` names
    another way out ("or give --gpu-memory 12GiB").
    """
    options = list(options)
    wanted = str(value).strip().lower()
    for option in options:
        if option.lower() == wanted:
            return option
    other = f" ({also})" if also else ""
    raise ConfigError(f"unknown {flag} {value!r}; choose one of: {', '.join(options)}{other}")


@dataclass(frozen=True)
class Limit:
    """The values one setting may take, and the words that say so in a refusal.

    ``kind`` is also how the setting's text is read, so a whole-number setting never silently
    loses a fraction.
    """

    what: str
    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    kind: type = float

    def admits(self, value: object) -> bool:
        """Whether ``value`` is a number of the right kind inside the range."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return False
        if self.kind is int and not isinstance(value, int):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def describe(self) -> str:
        """The range in words: "above 0", "of 0 or more", "from 1 to 65535", "above 0 and at most 1024"."""
        low, high = _show(self.low), _show(self.high)
        if math.isinf(self.low) and math.isinf(self.high):
            return "any finite number"
        if math.isinf(self.high):
            return f"above {low}" if self.low_open else f"of {low} or more"
        if self.low_open:
            return f"above {low} and {'below' if self.high_open else 'at most'} {high}"
        return f"from {low} to {'just below ' if self.high_open else ''}{high}"

    def refusal(self, flag: str, value: object) -> ConfigError:
        """The error for a ``value`` of ``flag`` outside the range."""
        return ConfigError(f"{flag} must be {self.what} {self.describe()}, got {value}")


def _show(x: float) -> str:
    return str(int(x)) if math.isfinite(x) and float(x).is_integer() else str(x)


PORT = Limit("a TCP port", 1, 65535, kind=int)
SECONDS = Limit("a number of seconds", 0, low_open=True)


def bounded(value: object, flag: str, limit: Limit) -> int | float | None:
    """``value`` (a flag's text, a number, or None when not given) read as ``limit.kind`` and checked."""
    converted = number(value, flag, limit.kind)
    if converted is not None and not limit.admits(converted):
        raise limit.refusal(flag, converted)
    return converted


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
    except OverflowError:  # an int past a float's range
        as_float = math.inf
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


def shell_words(value: str, flag: str) -> list[str]:
    """``value`` split as a shell would (``--args "--gpu all --max-iter 500"``); unbalanced quotes refused."""
    try:
        return shlex.split(value)
    except ValueError as e:
        raise ConfigError(f"{flag} {value!r}: {str(e).lower()}") from None


def writable_folder(value: str | os.PathLike[str], flag: str = "", setting: str = "") -> Path:
    """``value`` as an absolute folder that results can be written in (created later if missing).

    The folder, or the nearest of its parents that exists, must be a folder this process may write
    to. ``flag`` and ``setting`` (its ``invoke.yaml`` key, "data.dir") are how a user sets it; the
    refusal names both, or the setting alone for a task that has no flag for it.
    """
    path = Path(value).expanduser().absolute()
    if flag:
        fix = f"give a folder you can write to with {flag}" + (f" (or {setting} in invoke.yaml)" if setting else "")
    else:
        variable = "INVOKE_" + setting.replace(".", "_").upper()
        if variable in os.environ:  # the variable overrides the file: name what set it
            flag, fix = variable, f"set {variable} (or unset it and set {setting} in invoke.yaml) to a folder you can write to"
        else:
            fix = f"set {setting} in invoke.yaml (or {variable}) to a folder you can write to"
    _refuse_unwritable(path, path, flag or setting, fix)
    return path


def output_file(value: str | os.PathLike[str], flag: str) -> Path:
    """``value`` as an absolute file path that can be written: not a folder, in a writable folder."""
    path = Path(value).expanduser().absolute()
    if path.is_dir():
        raise ConfigError(f"{flag} {path} is a folder; give a file name")
    _refuse_unwritable(path.parent, path, flag, f"give {flag} a file in a folder you can write to")
    return path


def nearest_existing(path: Path) -> Path:
    """``path``, or the nearest of its parents that exists: where a folder still to be made will be made."""
    return next((p for p in (path, *path.parents) if os.path.lexists(p)), Path(path.anchor or "/"))


def unwritable(folder: Path) -> tuple[Path, str] | None:
    """Why nothing can be written in ``folder`` (made first where missing): the nearest part of it that
    exists and what is wrong with it ("is a file, not a folder", "is on a read-only file system", "is
    not writable by this user"); None where it can be. The one check of every folder caffetool writes in."""
    existing = nearest_existing(folder)
    if not existing.is_dir():
        return existing, "is a file, not a folder"
    if os.statvfs(existing).f_flag & os.ST_RDONLY:
        return existing, "is on a read-only file system"
    if not os.access(existing, os.W_OK | os.X_OK):
        return existing, "is not writable by this user"
    return None


def _refuse_unwritable(folder: Path, given: Path, flag: str, fix: str) -> None:
    """Refuse ``folder`` when its nearest existing part is a file or cannot be written."""
    if (found := unwritable(folder)) is not None:
        blocker, why = found
        named = f"{flag} {given}" if blocker == given else f"{flag} {given}: {blocker}"
        raise ConfigError(f"{named} {why}; {fix}")


def input_file(value: str | os.PathLike[str], flag: str) -> Path:
    """``value`` as a file that exists and can be read."""
    path = Path(value).expanduser()
    if not path.exists():
        raise ConfigError(f"{flag} {path} does not exist")
    if path.is_dir():
        raise ConfigError(f"{flag} {path} is a folder; give a file")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"{flag} {path} cannot be read (permission denied)")
    return path
