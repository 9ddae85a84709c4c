"""Parsing Caffe's glog output, live (line by line) or after the fact, from any Caffe log.

Rows are keyed as Caffe's ``tools/extra/parse_log.py`` keys them (``NumIters``, ``Seconds``,
``LearningRate``, then each net output by name, whatever the net calls its outputs), train rows
apart from the rows of each test net (``Testing net (#k)``), however many the solver has. A train
row also holds the iteration line's loss (``smoothed_loss``: Caffe's weighted sum of the losses,
averaged over ``average_loss``) and its speed (``iter_per_s``; not on the first display line of a
session, whose figure Caffe computes from an unset counter).
``Seconds`` count from the ``Solving`` line; a resumed run (a second ``Solving``) continues the
count instead of restarting it. glog's prefix (read by :mod:`caffetool.glog`) carries the date as
``MMDD`` (older glog) or ``YYYYMMDD``; without a year, a month that goes backwards means the year
rolled over. Lines that do not parse are skipped: a truncated or garbled log gives the rows that
are whole. A file with no glog line at all (empty, binary, another format) is refused rather than
read as a log of nothing.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from caffetool import glog
from caffetool.errors import RunError
from caffetool.glog import ITERATION
from caffetool.runs import snapshots

SOLVING = re.compile(r"^Solving (.*)$")
LEARNING_RATE = re.compile(r"^Iteration (\d+), lr = (\S+)$")
TESTING = re.compile(r"^Iteration (\d+), Testing net \(#(\d+)\)$")
OUTPUT = re.compile(r"^\s*(Train|Test) net output #(\d+): (\S+) = (\S+)")
SNAPSHOT = re.compile(r"^Snapshotting (?:solver state )?to binary proto file (.+)$")  # a path may hold spaces
RESUMING = re.compile(r"^Resuming from (.+)$")
THREADS = re.compile(r"^Threads: (\d+) \(")  # the engine re-sized its team (patch 0009)
DONE = "Optimization Done."
EVENTS = (SOLVING, ITERATION, LEARNING_RATE, TESTING, OUTPUT, SNAPSHOT, RESUMING)
# The keys of a row that are not net outputs.
ROW_KEYS = ("NumIters", "Seconds", "LearningRate", "smoothed_loss", "iter_per_s")


def outputs(rows: list[dict]) -> list[str]:
    """The net outputs ``rows`` hold, in the order Caffe first logged them."""
    return list(dict.fromkeys(k for row in rows for k in row if k not in ROW_KEYS))


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


@dataclass
class Metrics:
    net_name: str | None = None
    train: list[dict] = field(default_factory=list)
    test: dict[int, list[dict]] = field(default_factory=dict)
    started: dt.datetime | None = None
    last_time: dt.datetime | None = None
    done: bool = False
    fatal: str | None = None
    python_error: str | None = None  # an exception a Python layer raised (then Caffe aborts)
    snapshots: list[str] = field(default_factory=list)
    resumed_from: list[str] = field(default_factory=list)
    diverged_at: int | None = None  # first iteration whose loss was NaN or infinite
    last_good: int | None = None  # last iteration with a finite loss
    iter_per_s: float | None = None
    testing_seconds: float = 0.0
    threads: list[tuple[int, int]] = field(default_factory=list)  # (iteration, threads) of each re-sizing

    @property
    def iteration(self) -> int:
        """The furthest iteration the log shows: display lines, tests or snapshots."""
        seen = [r["NumIters"] for r in self.train[-1:]]
        seen += [rows[-1]["NumIters"] for rows in self.test.values() if rows]
        seen += [i for s in self.snapshots if (i := snapshots.iteration_of(s)) is not None]
        return max(seen, default=0)

    def latest(self, key: str, net: int = 0) -> float | None:
        rows = self.train if net < 0 else self.test.get(net, [])
        for row in reversed(rows):
            if key in row:
                return row[key]
        return None

    def train_loss(self) -> float | None:
        """The last train row's loss: its output named ``loss``, else Caffe's smoothed loss (all that
        the line of a run's final iteration has: ``Iteration 300, loss = 0.57``)."""
        if not self.train:
            return None
        row = self.train[-1]
        return row["loss"] if row.get("loss") is not None else row.get("smoothed_loss")

    def add_test(self, net: int, row: dict) -> bool:
        """Adds a test row measured outside the log (``caffe test``), in iteration order; a row for
        an iteration the net already has is not added (``False``)."""
        rows = self.test.setdefault(net, [])
        if any(r["NumIters"] == row["NumIters"] for r in rows):
            return False
        rows.append(row)
        rows.sort(key=lambda r: r["NumIters"])
        return True


class LogParser:
    """Feed glog lines one at a time; ``metrics`` is always up to date."""

    def __init__(self, year: int | None = None) -> None:
        self.metrics = Metrics()
        self.glog_lines = 0
        self.year = year or dt.date.today().year
        self._month = 0
        self._session_start: dt.datetime | None = None
        self._offset = 0.0
        self._last_seconds = 0.0
        self._lr: float | None = None
        self._pending: dict | None = None
        self._test_row: dict | None = None
        self._test_started: float | None = None
        self._test_last: float | None = None
        self._speed_known = False  # the first display line of a session has no real iter/s

    def feed_all(self, lines: Iterable[str]) -> Metrics:
        for line in lines:
            self.feed(line)
        self._flush()
        return self.metrics

    def feed(self, line: str) -> None:
        parsed = glog.parse(line)
        if parsed is None:
            if self.metrics.python_error is None and glog.PYTHON_ERROR.match(line.rstrip()):
                self.metrics.python_error = line.rstrip()
            return
        self.glog_lines += 1
        when = self._time(parsed)
        if when is None:
            return
        m = self.metrics
        m.last_time = when
        message = parsed.message
        if parsed.severity == glog.FATAL:
            m.fatal = m.fatal or message
            return
        if solving := SOLVING.match(message):
            self._flush()
            if self._session_start is not None:
                self._offset = self._last_seconds  # a resumed run continues the count, gap excluded
            self._session_start = when
            self._speed_known = False
            m.started = m.started or when
            m.net_name = m.net_name or solving.group(1)
            return
        if self._session_start is None:
            return
        self._last_seconds = self._seconds(when)
        self._dispatch(message, self._last_seconds)

    def _dispatch(self, message: str, seconds: float) -> None:
        m = self.metrics
        if (out := OUTPUT.match(message)) and out.group(1) == "Test":
            value = _number(out.group(4))
            if self._test_row is not None and value is not None:
                self._test_row[out.group(3)] = value
                self._test_last = seconds
            return
        if any(p.match(message) for p in EVENTS) or message.strip() == DONE:
            self._close_test()  # a test ends with the solver's next event (not a prefetch thread's line)
        if it := ITERATION.match(message):
            self._flush()
            loss = _number(it.group(3))
            if loss is None:
                return
            self._pending = {"NumIters": int(it.group(1)), "Seconds": seconds, "LearningRate": self._lr,
                             "smoothed_loss": loss}
            if it.group(2):
                m.iter_per_s = _number(it.group(2))
                if self._speed_known and m.iter_per_s is not None:
                    self._pending["iter_per_s"] = m.iter_per_s
                self._speed_known = True
            self._check_finite(int(it.group(1)), loss)
        elif lr := LEARNING_RATE.match(message):
            self._lr = _number(lr.group(2))
            if self._pending is not None and self._pending["NumIters"] == int(lr.group(1)):
                self._pending["LearningRate"] = self._lr
                self._flush()
        elif testing := TESTING.match(message):
            self._flush()
            self._test_row = {"NumIters": int(testing.group(1)), "Seconds": seconds,
                              "LearningRate": self._lr, "_net": int(testing.group(2))}
            self._test_started = self._test_last = seconds
        elif out:  # a train net output
            value = _number(out.group(4))
            if value is not None and self._pending is not None:
                self._pending[out.group(3)] = value
                self._check_finite(self._pending["NumIters"], value)
        elif snap := SNAPSHOT.match(message):
            m.snapshots.append(snap.group(1))
        elif resumed := RESUMING.match(message):
            m.resumed_from.append(resumed.group(1))
        elif threads := THREADS.match(message):
            under_way = [row["NumIters"] for row in (self._pending, self._test_row) if row is not None]
            m.threads.append((max([m.iteration, *under_way]), int(threads.group(1))))
        elif message.strip() == DONE:
            self._flush()
            m.done = True

    def _close_test(self) -> None:
        if self._test_row is None:
            return
        row = self._test_row
        net = row.pop("_net")
        self.metrics.test.setdefault(net, []).append(row)
        self.metrics.testing_seconds += max(0.0, (self._test_last or 0.0) - (self._test_started or 0.0))
        self._test_row = None

    def _check_finite(self, iteration: int, value: float) -> None:
        m = self.metrics
        if not math.isfinite(value):
            if m.diverged_at is None:
                m.diverged_at = iteration
        elif m.diverged_at is None:
            m.last_good = iteration

    def _flush(self) -> None:
        if self._pending is not None:
            self.metrics.train.append(self._pending)
            self._pending = None
        self._close_test()

    def _seconds(self, when: dt.datetime) -> float:
        assert self._session_start is not None
        return round(self._offset + (when - self._session_start).total_seconds(), 6)

    def _time(self, line: glog.Line) -> dt.datetime | None:
        if line.year is None and line.month < self._month:
            self.year += 1  # December → January: the year rolled over
        self._month = line.month
        return line.time(self.year)


def parse_file(path: str | Path, year: int | None = None) -> Metrics:
    """The metrics of a Caffe log file; a file that is no Caffe log raises :class:`RunError`."""
    path = Path(path)
    parser = LogParser(year)
    try:
        with open(path, errors="replace") as f:
            metrics = parser.feed_all(f)
    except FileNotFoundError:
        raise RunError(f"{path} does not exist; give a Caffe log file (a run's caffe.log)") from None
    except IsADirectoryError:
        raise RunError(f"{path} is a directory; give a Caffe log file (a run's caffe.log)") from None
    except OSError as e:
        raise RunError(f"{path} cannot be read: {e.strerror}") from None
    if parser.glog_lines == 0:
        why = "it is empty" if path.stat().st_size == 0 else "it has no glog line (I0101 10:00:00.000000 ...)"
        raise RunError(f"{path} is not a Caffe log: {why}")
    return metrics
