"""Running the real ``caffe`` binary on a run directory, watched line by line.

The binary runs in its own session with the run directory as working directory; its glog output
goes to ``caffe.log`` unchanged and through the log parser, which drives a progress bar and the
live metrics files. Three ways a run ends besides finishing:

* the loss turns NaN or infinite: Caffe is stopped at once (it would go on for nothing);
* Ctrl-C or SIGTERM: Caffe gets SIGINT, which ``-sigint_effect snapshot`` turns into a snapshot;
  once the snapshot is in the log, SIGHUP (``-sighup_effect stop``) ends the run cleanly, so it
  can be resumed from that snapshot (a second Ctrl-C stops at once);
* Caffe dies (non-zero exit, glog FATAL): its FATAL line and last log lines are reported.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from caffetool.engine import EngineInfo
from caffetool.engine.locate import caffe_env
from caffetool.train.logparse import LogParser, Metrics
from caffetool.train.sampler import Sampler

LOG = "caffe.log"


@dataclass
class RunOutcome:
    status: str  # finished, failed, interrupted, diverged
    exit_code: int | None
    metrics: Metrics
    message: str
    samples: dict
    seconds: float


def caffe_train_argv(engine: EngineInfo, solver: str, gpu_flag: list[str], weights: str | None = None,
                     snapshot: str | None = None) -> list[str]:
    argv = [str(engine.caffe), "train", f"-solver={solver}", "-sigint_effect=snapshot", "-sighup_effect=stop"]
    if weights:
        argv.append(f"-weights={weights}")
    if snapshot:
        argv.append(f"-snapshot={snapshot}")
    if gpu_flag:
        argv.append(f"{gpu_flag[0]}={gpu_flag[1]}")
    return argv


def run(argv: list[str], run_dir: Path, max_iter: int, progress: bool = True,
        on_update: Callable[[Metrics, bool], None] | None = None, update_every: float = 60.0,
        parser: LogParser | None = None) -> RunOutcome:
    """Run ``argv`` in ``run_dir``, appending to caffe.log; ``on_update(metrics, final)`` refreshes outputs."""
    parser = parser or LogParser()
    tail: deque[str] = deque(maxlen=12)
    bar = _bar(max_iter) if progress else None
    start = time.monotonic()
    interrupted = diverged = stopping = False
    snapshots_before = 0
    last_update = start
    tests_seen = 0
    with open(run_dir / LOG, "a") as log:
        process = subprocess.Popen(argv, cwd=run_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, errors="replace", env=caffe_env(), start_new_session=True)
        sampler = Sampler(process.pid)
        sampler.start()
        assert process.stdout is not None
        while True:
            try:
                line = process.stdout.readline()
                if not line:
                    break
                log.write(line)
                tail.append(line.rstrip())
                parser.feed(line)
                m = parser.metrics
                if m.diverged_at is not None and not diverged:
                    diverged = True
                    process.kill()  # nothing worth saving after a NaN
                if interrupted and not stopping and len(m.snapshots) > snapshots_before and \
                        m.snapshots[-1].endswith(".solverstate"):
                    stopping = True
                    _signal(process, signal.SIGHUP)  # snapshot written: now stop
                if bar is not None:
                    _show(bar, m)
                tests = sum(len(r) for r in m.test.values())
                now = time.monotonic()
                if on_update and (tests != tests_seen and now - last_update >= update_every):
                    tests_seen, last_update = tests, now
                    on_update(m, False)
            except KeyboardInterrupt:
                if not interrupted:
                    interrupted = True
                    snapshots_before = len(parser.metrics.snapshots)
                    _signal(process, signal.SIGINT)  # Caffe snapshots at its next iteration
                elif not stopping:
                    stopping = True
                    _signal(process, signal.SIGHUP)  # asked twice: stop without waiting
        code = process.wait()
        samples = sampler.stop()
    if bar is not None:
        bar.close()
    metrics = parser.feed_all([])
    if on_update:
        on_update(metrics, True)
    return _outcome(code, metrics, interrupted, diverged, list(tail), samples, time.monotonic() - start)


def _signal(process: subprocess.Popen, sig: int) -> None:
    if process.poll() is None:
        os.kill(process.pid, sig)


def _outcome(code: int, m: Metrics, interrupted: bool, diverged: bool, tail: list[str],
             samples: dict, seconds: float) -> RunOutcome:
    if diverged:
        good = f"; the last finite loss was at iteration {m.last_good}" if m.last_good is not None else ""
        return RunOutcome("diverged", code, m, f"the loss became NaN or infinite at iteration {m.diverged_at}"
                          f"{good}: training was stopped. Lower the learning rate (--base-lr) and retry.",
                          samples, seconds)
    if interrupted:
        snap = next((s for s in reversed(m.snapshots) if s.endswith(".solverstate")), None)
        at = int(snap.rsplit("_iter_", 1)[1].split(".")[0]) if snap and "_iter_" in snap else m.iteration
        where = f"snapshot {snap}" if snap else "no snapshot"
        return RunOutcome("interrupted", code, m, f"interrupted at iteration {at} ({where}); "
                          "continue with `invoke train.resume RUN`", samples, seconds)
    if code != 0 or m.fatal:
        fatal = f"Caffe stopped: {m.fatal}" if m.fatal else f"caffe exited with status {code}"
        return RunOutcome("failed", code, m, fatal + "\nlast log lines:\n  " + "\n  ".join(tail[-6:]),
                          samples, seconds)
    return RunOutcome("finished", code, m, "finished", samples, seconds)


def _bar(total: int):
    from tqdm import tqdm  # noqa: PLC0415

    return tqdm(total=total, unit="it", desc="caffe train", dynamic_ncols=True, disable=None)  # off unless a TTY


def _show(bar, m: Metrics) -> None:
    if m.iteration > bar.n:
        bar.update(m.iteration - bar.n)
    post = {}
    if (loss := m.latest("loss", -1)) is not None:
        post["loss"] = f"{loss:.4f}"
    if m.train and m.train[-1].get("LearningRate") is not None:
        post["lr"] = f"{m.train[-1]['LearningRate']:.2e}"
    if (acc := m.latest("accuracy")) is not None:
        post["test acc"] = f"{acc:.4f}"
    if post:
        bar.set_postfix(post, refresh=False)
