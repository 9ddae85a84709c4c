"""The runner's parts without Caffe: the supervisor's states against a real process, the child dying
with its parent, and progress lines where no terminal shows a bar."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest

from caffetool.runs.logparse import LogParser, Metrics
from caffetool.train import progress, runner

# A stand-in for caffe's signal handling: it reports each signal it gets on stdout.
LISTENER = textwrap.dedent("""
    import signal, sys, time
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda n, f: print(signal.Signals(n).name, flush=True))
    print("ready", flush=True)
    time.sleep(60)
""")


def glog(message: str, second: int = 0) -> str:
    return f"I1122 10:00:{second:02d}.000000  4242 solver.cpp:218] {message}\n"


@pytest.fixture
def supervisor() -> Iterator[runner.Supervisor]:
    child = subprocess.Popen([sys.executable, "-c", LISTENER], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "ready\n"
    watched = runner.Supervisor(child, LogParser(year=2024))
    yield watched
    child.kill()
    child.wait()


def received(s: runner.Supervisor) -> str:
    return s.process.stdout.readline().strip()


def test_phases_from_start_to_a_snapshot_then_stop(supervisor):
    assert supervisor.phase is runner.Phase.STARTING
    supervisor.feed(glog("Solving LeNet"))
    supervisor.feed(glog("Iteration 0, loss = 2.3"))
    assert supervisor.phase is runner.Phase.TRAINING and supervisor.stop is None
    supervisor.interrupt()
    assert received(supervisor) == "SIGINT"
    assert supervisor.phase is runner.Phase.SNAPSHOTTING and supervisor.stop is runner.Stop.INTERRUPTED
    supervisor.feed(glog("Snapshotting to binary proto file snapshots/lenet_iter_7.caffemodel", 1))
    assert supervisor.phase is runner.Phase.SNAPSHOTTING  # the weights alone cannot be resumed from
    supervisor.feed(glog("Snapshotting solver state to binary proto file snapshots/lenet_iter_7.solverstate", 1))
    assert received(supervisor) == "SIGHUP"
    assert supervisor.phase is runner.Phase.STOPPING
    supervisor.interrupt()  # nothing more to ask
    outcome = supervisor.outcome(0, {}, 1.0)
    assert (outcome.status, outcome.message) == (
        "interrupted", "interrupted at iteration 7 (snapshot snapshots/lenet_iter_7.solverstate); "
        "continue with `caffetool train.resume RUN`")


def test_a_second_interrupt_stops_without_the_snapshot(supervisor):
    supervisor.interrupt()
    supervisor.interrupt()
    assert sorted([received(supervisor), received(supervisor)]) == ["SIGHUP", "SIGINT"]  # both pending: any order
    assert supervisor.phase is runner.Phase.STOPPING


def test_a_nan_loss_kills_at_once(supervisor):
    supervisor.feed(glog("Solving LeNet"))
    supervisor.feed(glog("Iteration 10, loss = 0.5"))
    supervisor.feed(glog("Iteration 20, loss = nan", 1))
    supervisor.feed(glog("Iteration 30, loss = nan", 2))
    assert supervisor.process.wait(10) == -signal.SIGKILL
    assert supervisor.stop is runner.Stop.DIVERGED and supervisor.phase is runner.Phase.STOPPING
    assert supervisor.outcome(-9, {}, 1.0).message.startswith(
        "the loss became NaN or infinite at iteration 20; the last finite loss was at iteration 10")


def test_a_failure_to_record_kills_and_says_why(supervisor):
    supervisor.feed(glog("Solving LeNet"))
    supervisor.feed(glog("Iteration 10, loss = 0.5"))
    supervisor.fail("cannot write caffe.log: No space left on device")
    supervisor.fail("a second reason is not the cause")
    assert supervisor.process.wait(10) == -signal.SIGKILL
    outcome = supervisor.outcome(-9, {}, 1.0)
    assert (outcome.status, outcome.message) == (
        "failed", "cannot write caffe.log: No space left on device; Caffe was stopped at iteration 10. "
        "Once that is fixed, continue with `caffetool train.resume RUN`")


def test_the_child_dies_with_its_parent():
    """A parent killed with SIGKILL takes its child along: the kernel sends the child SIGKILL."""
    parent_code = textwrap.dedent("""
        import subprocess, sys, time
        from caffetool.train.runner import dies_with_parent
        child = subprocess.Popen(["sleep", "60"], process_group=0, preexec_fn=dies_with_parent())
        print(child.pid, flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    try:
        os.kill(child, 0)  # alive, in a process group of its own, as the runner starts Caffe
        assert os.getpgid(child) == child
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and _exists(child):
            time.sleep(0.05)
        assert not _exists(child)
    finally:
        if _exists(child):
            os.kill(child, signal.SIGKILL)


def _exists(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (a zombie has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def metrics(iteration: int, loss: float = 0.5, accuracy: float | None = None) -> Metrics:
    m = Metrics(train=[{"NumIters": iteration, "loss": loss}])
    if accuracy is not None:
        m.test[0] = [{"NumIters": iteration, "accuracy": accuracy}]
    return m


def test_progress_lines_every_five_percent():
    out, now = io.StringIO(), [0.0]
    lines = progress.ProgressLines(1000, out=out, clock=lambda: now[0])
    for iteration in range(0, 1001, 20):
        now[0] = iteration / 50  # 50 it/s
        lines.show(metrics(iteration, accuracy=0.8 if iteration >= 500 else None))
    printed = out.getvalue().splitlines()
    assert len(printed) == 20
    assert printed[0] == "iteration 60/1000 (6%): loss 0.5000, 50.0 it/s, ETA 00:18"
    assert printed[9] == "iteration 500/1000 (50%): loss 0.5000, test accuracy 0.8000, 50.0 it/s, ETA 00:10"
    assert printed[-1] == "iteration 1000/1000 (100%): loss 0.5000, test accuracy 0.8000, 50.0 it/s, ETA 00:00"


def test_progress_lines_of_a_resumed_run_start_where_it_resumed():
    out, now = io.StringIO(), [0.0]
    lines = progress.ProgressLines(200, done=140, out=out, clock=lambda: now[0])
    lines.show(metrics(140))
    now[0] = 2.0
    lines.show(metrics(150))
    assert out.getvalue() == "iteration 150/200 (75%): loss 0.5000, 5.0 it/s, ETA 00:10\n"


def test_a_caffe_killed_by_a_signal_is_named():
    child = subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGBUS)"])
    watched = runner.Supervisor(child, LogParser(year=2024))
    watched.feed(glog("Solving LeNet"))
    outcome = watched.outcome(child.wait(10), {}, 1.0)
    assert outcome.status == "failed"
    assert outcome.message.startswith("caffe train ended (killed by SIGBUS)\nlast log lines:\n  I1122 ")
