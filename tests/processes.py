"""Stopping what a test started: one helper for every child process the tests run."""

from __future__ import annotations

import os
import signal
import subprocess


def stop(child: subprocess.Popen, grace: float = 10, group: bool = False) -> None:
    """End ``child`` if it still runs: SIGTERM, ``grace`` seconds to finish, then SIGKILL; reaped
    either way. ``group``: the child leads a session of its own (``start_new_session``), and its
    whole process group is killed at the end, grandchildren (a ``caffe``) included."""
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    if group:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    elif child.poll() is None:
        child.kill()
    child.wait()
