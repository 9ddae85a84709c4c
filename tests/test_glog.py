"""glog lines: the prefix's parts, Caffe's FATAL line and its display lines, from the real binary."""

from __future__ import annotations

import datetime as dt
import subprocess

import pytest

from caffetool import glog
from caffetool.engine import smoke
from caffetool.engine.locate import caffe_env


def test_a_line_is_read_into_its_parts():
    line = glog.parse("W20261122 10:01:02.123456  4242 solver.cpp:218] Iteration 5, lr = 0.01  ")
    assert line == glog.Line("W", 2026, 11, 22, 10, 1, 2, 123456, 4242, "solver.cpp:218", "Iteration 5, lr = 0.01")
    assert line.time() == dt.datetime(2026, 11, 22, 10, 1, 2, 123456)
    assert line.located() == "solver.cpp:218: Iteration 5, lr = 0.01"


def test_older_glog_has_no_year_and_the_caller_gives_one():
    line = glog.parse("I1122 10:01:02.5 7 net.cpp:1] x")
    assert (line.year, line.month, line.day, line.microsecond) == (None, 11, 22, 500000)
    assert line.time(2024) == dt.datetime(2024, 11, 22, 10, 1, 2, 500000)


@pytest.mark.parametrize("text", [
    "", "Iteration 5, loss = 1", "*** Check failure stack trace: ***", "    @     0x7f google::LogMessage::Fail()",
    "X1122 10:00:00.000000 7 a.cpp:1] unknown severity", "I1122 10:00:00 7 a.cpp:1] no fraction",
    "Traceback (most recent call last):",
])
def test_anything_else_is_not_a_glog_line(text):
    assert glog.parse(text) is None


def test_an_impossible_time_parses_but_has_no_time():
    line = glog.parse("I1122 99:99:99.0 1 x.cpp:1] Iteration 5, loss = 1")
    assert line is not None and line.time(2026) is None


def test_the_fatal_line_of_a_real_check_failure(engine, tmp_path):
    done = subprocess.run([str(engine.caffe), "train", "-solver=missing.prototxt"], cwd=tmp_path,
                          capture_output=True, text=True, env=caffe_env())
    assert done.returncode != 0
    fatal = glog.fatal(done.stderr)
    assert fatal.severity == "F" and fatal.where.startswith("io.cpp:")
    assert fatal.message == "Check failed: fd != -1 (-1 vs. -1) File not found: missing.prototxt"
    assert "*** Check failure stack trace: ***" in done.stderr  # what follows the F line is skipped


def test_no_fatal_line_gives_none():
    assert glog.fatal("I1122 10:00:00.000000 7 a.cpp:1] fine\nE1122 10:00:00.000000 7 a.cpp:2] an error\n") is None


def test_the_last_fatal_line_wins():
    text = "F1122 10:00:00.000000 7 a.cpp:1] first\nF1122 10:00:00.000000 7 b.cpp:2] second\n"
    assert glog.fatal(text).located() == "b.cpp:2: second"
    assert glog.fatal(text.splitlines()).located() == "b.cpp:2: second"


def test_losses_of_a_real_training(engine, tmp_path):
    (tmp_path / "net.prototxt").write_text(smoke.NET)
    (tmp_path / "solver.prototxt").write_text(smoke.SOLVER.format(net="net.prototxt", iterations=20))
    done = subprocess.run([str(engine.caffe), "train", "-solver=solver.prototxt"], cwd=tmp_path,
                          capture_output=True, text=True, env=caffe_env())
    assert done.returncode == 0, done.stderr[-1000:]
    losses = glog.losses(done.stderr)
    assert [i for i, _ in losses] == list(range(20)) + [20]  # display: 1, and the final line
    assert losses[-1][1] < losses[0][1]


def test_losses_skip_what_is_not_a_number():
    text = ("I1122 10:00:00.000000 7 solver.cpp:1] Iteration 1 (5.5 iter/s, 0.2s/1 iters), loss = 0.5\n"
            "I1122 10:00:00.000000 7 solver.cpp:1] Iteration 2, loss = garbage\n"
            "Iteration 3, loss = 0.25\n"
            "I1122 10:00:00.000000 7 solver.cpp:1] Iteration 4, loss = nan\n")
    losses = glog.losses(text)
    assert losses[0] == (1, 0.5) and losses[1][0] == 4 and len(losses) == 2
