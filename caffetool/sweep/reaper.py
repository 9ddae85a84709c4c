"""A local Ray's processes ended with the sweep that started them, however the sweep ends.

Ray's own fate-sharing covers the daemons a driver starts (``gcs_server`` and ``raylet`` die with
it), not what those start: after a SIGKILL of the sweep, Ray's dashboard and runtime-env agents live
on for about a minute, and a trial's Caffe until its worker notices. A signal sent to the sweep's
whole process group (``kill -TERM -PGID``, a terminal closing) kills the daemons under the running
trials. The reaper is a small process in a session of its own, which such a signal does not reach:
while the sweep runs it follows the local Ray's process tree (children are found under parents it
already knows, so an orphan handed to ``init`` stays known), and when the sweep's pipe closes (at its
end, or at its death) it ends every process of that tree still running: SIGTERM, then SIGKILL after
:data:`GRACE` seconds. A process is known by its pid and start time, so a reused pid is never
signalled.

    python -m caffetool.sweep.reaper ROOT_PID...   # stdin: the sweep's end of a pipe
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
from typing import Any

GRACE = 3.0  # seconds between SIGTERM and SIGKILL
INTERVAL = 0.5  # seconds between looks at the process tree


def start(roots: list[int]) -> subprocess.Popen:
    """The reaper of the processes ``roots`` and everything they start; closing its stdin ends them."""
    return subprocess.Popen([sys.executable, "-m", "caffetool.sweep.reaper", *map(str, roots)],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, close_fds=True)


def finish(reaper: subprocess.Popen) -> None:
    """Close the reaper's pipe and wait while it ends what is left of the tree."""
    try:
        if reaper.stdin is not None:
            reaper.stdin.close()
        reaper.wait(timeout=GRACE + 5)
    except (OSError, subprocess.TimeoutExpired):
        pass


def follow(known: dict[int, Any]) -> None:
    """Add the children of every known process still running to ``known``."""
    import psutil  # noqa: PLC0415

    for process in list(known.values()):
        try:
            for child in process.children(recursive=True):
                known.setdefault(child.pid, child)
        except psutil.Error:
            continue


def end(known: dict[int, Any]) -> None:
    """SIGTERM every process of ``known`` (pid: ``psutil.Process``) still running, SIGKILL after :data:`GRACE`."""
    import psutil  # noqa: PLC0415

    running = [p for p in known.values() if p.is_running()]  # is_running compares the start time too
    for process in running:
        try:
            process.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(running, timeout=GRACE)
    for process in alive:
        try:
            process.kill()
        except psutil.Error:
            pass


def main(roots: list[int]) -> None:
    import psutil  # noqa: PLC0415

    known: dict[int, Any] = {}
    for pid in roots:
        try:
            known[pid] = psutil.Process(pid)
        except psutil.Error:
            continue
    fd = sys.stdin.fileno()
    while True:
        follow(known)
        ready, _, _ = select.select([fd], [], [], INTERVAL)
        if ready and not os.read(fd, 4096):
            break
    end(known)


if __name__ == "__main__":
    main([int(pid) for pid in sys.argv[1:]])
