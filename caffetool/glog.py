"""Caffe's log lines as Google glog writes them, read into their parts.

Every line Caffe logs starts with glog's prefix::

    I1122 10:00:00.123456  4242 solver.cpp:218] Iteration 100 (81.3 iter/s, 1.23s/100 iters), loss = 0.25
    ^severity ^date ^time           ^thread ^file:line] ^message

The severity is one of ``I``, ``W``, ``E``, ``F``; older glog writes the date as ``MMDD``, newer
as ``YYYYMMDD``. A ``CHECK`` that fails logs one ``F`` line (``Check failed: ...``) and aborts, so
the last ``F`` line is what Caffe refused. Only the line shapes are known here: what a run's lines
add up to (rows of metrics) is :mod:`caffetool.runs.logparse`'s job. Lines without the prefix
(Python tracebacks, glog's own stack dumps) are not glog lines and give ``None``; a Python
layer's exception is found by :func:`python_error`, a stack dump's lines by :data:`STACK_DUMP`.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

PREFIX = re.compile(
    r"^(?P<severity>[IWEF])(?P<date>\d{8}|\d{4}) (?P<hour>\d\d):(?P<minute>\d\d):(?P<second>\d\d)\.(?P<fraction>\d+)"
    r" +(?P<thread>\d+) (?P<where>[^\]\s]+)\] ?(?P<message>.*?)\s*$")
# The solver's display line; the rate in parentheses appears in Caffe versions since 2017.
ITERATION = re.compile(r"^Iteration (\d+)(?: \(([-+.\deE]+|[-+]?(?:inf|nan)) iter/s, [^)]*\))?, loss = (\S+)$")
FATAL = "F"
# The last line of a Python exception that a Python layer raised inside Caffe (Boost.Python prints
# it, then Caffe aborts with SIGABRT and glog's stack dump): "ModuleNotFoundError: No module named 'x'".
PYTHON_ERROR = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception): .*$")
# glog's stack dump after a signal: "*** SIGABRT (@0x..) received by PID ..." and "    @ 0x... fn".
STACK_DUMP = re.compile(r"^\s*(?:\*\*\* |@ +0x)")


@dataclass(frozen=True)
class Line:
    """One glog line. ``year`` is ``None`` where the prefix carries only ``MMDD``."""

    severity: str
    year: int | None
    month: int
    day: int
    hour: int
    minute: int
    second: int
    microsecond: int
    thread: int
    where: str
    message: str

    def time(self, year: int | None = None) -> dt.datetime | None:
        """The timestamp, with ``year`` standing in for a missing one; ``None`` if no such time."""
        try:
            return dt.datetime(self.year or year or dt.date.today().year, self.month, self.day,
                               self.hour, self.minute, self.second, self.microsecond)
        except ValueError:
            return None

    def located(self) -> str:
        """``file:line: message``, the way compilers point at a line, for error messages."""
        return f"{self.where}: {self.message}"


def parse(text: str) -> Line | None:
    """The parts of one glog line, or ``None`` for anything else."""
    match = PREFIX.match(text)
    if not match:
        return None
    g = match.groupdict()
    date = g["date"]
    year, month, day = (int(date[:4]), int(date[4:6]), int(date[6:])) if len(date) == 8 \
        else (None, int(date[:2]), int(date[2:]))
    return Line(g["severity"], year, month, day, int(g["hour"]), int(g["minute"]), int(g["second"]),
                int(g["fraction"][:6].ljust(6, "0")), int(g["thread"]), g["where"], g["message"])


def lines(text: str | Iterable[str]) -> Iterator[Line]:
    """The glog lines of a text (or of lines, such as an open file), skipping everything else."""
    for raw in text.splitlines() if isinstance(text, str) else text:
        if (line := parse(raw)) is not None:
            yield line


def fatal(text: str | Iterable[str]) -> Line | None:
    """The last ``F`` line: why Caffe aborted (usually ``Check failed: ...``), or ``None``."""
    last = None
    for line in lines(text):
        if line.severity == FATAL:
            last = line
    return last


def losses(text: str | Iterable[str]) -> list[tuple[int, float]]:
    """``(iteration, loss)`` of each display line of ``caffe train``; unreadable losses skipped."""
    found = []
    for line in lines(text):
        if (it := ITERATION.match(line.message)) is not None:
            try:
                found.append((int(it.group(1)), float(it.group(3))))
            except ValueError:
                continue
    return found


def python_error(text: str | Iterable[str]) -> str | None:
    """The first Python exception Caffe's output shows (``ModuleNotFoundError: No module named 'x'``)."""
    for raw in text.splitlines() if isinstance(text, str) else text:
        if PYTHON_ERROR.match(raw.rstrip()):
            return raw.rstrip()
    return None
