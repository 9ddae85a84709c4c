"""The process that trains a run: recorded in the manifest, checked by every later command.

While ``train`` or ``train.resume`` watches Caffe, the run's manifest says ``running`` and names
its owner: host, boot, pid and the pid's start time (``/proc/<pid>/stat`` field 22, clock ticks
since boot), because after the owner dies its pid may be given to an unrelated process. A later
command that finds ``running`` (or ``setting-up``) with the owner gone — killed with SIGKILL, out
of memory, the machine rebooted — marks the run ``interrupted``, resumable from its newest
complete snapshot, so no run says ``running`` for ever.

The owner also keeps a little room on the run's disk (:data:`ROOM`, a file of
:data:`ROOM_BYTES`) from the start of training, given back just before the outcome is recorded: a
run that fails because the disk is full can still write the manifest that says so.

Limits: an owner on another host (runs on a shared file system) cannot be checked and counts as
alive; so does a manifest that names no owner (written before owners were recorded).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from caffetool.errors import RunError
from caffetool.runs import runrecord

ACTIVE = ("setting-up", "running")
ROOM = ".room-for-the-record"
ROOM_BYTES = 1 << 20
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def me() -> dict:
    """This process, as a manifest records its owner."""
    return {"host": socket.gethostname(), "boot": _boot_id(), "pid": os.getpid(), "start": start_ticks(os.getpid())}


def alive(owner: dict | None) -> bool:
    """Whether the process ``owner`` describes still runs (``True`` when this cannot be told)."""
    if not isinstance(owner, dict) or owner.get("host") != socket.gethostname():
        return True
    if owner.get("boot") and owner["boot"] != _boot_id():
        return False
    pid = owner.get("pid")
    if not isinstance(pid, int):
        return True
    ticks = start_ticks(pid)
    return ticks is not None and (owner.get("start") is None or ticks == owner["start"])


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot; ``None`` if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or ')': split after the last.
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[19])


def settle(run_dir: Path) -> runrecord.Manifest:
    """The run's manifest, first marked ``interrupted`` if it says it is active but its owner is gone.

    The correction is written back (under the run's lock, to the manifest as it is then) when the
    run directory is writable; either way the manifest returned tells the truth.
    """
    manifest = runrecord.read(run_dir)
    if not _orphaned(manifest):
        return manifest
    give_back_room(run_dir)
    try:
        return runrecord.update(run_dir, lambda current: _mark_interrupted(run_dir, current))
    except RunError:
        _mark_interrupted(run_dir, manifest)  # a read-only or full disk: the caller still gets the truth
        return manifest


def own(run_dir: Path) -> runrecord.Manifest:
    """The run's manifest with this process recorded as its owner, settled, checked and written in
    one step under the run's lock, so two commands never both take a run; refused while another
    live process trains it."""
    def settled_and_taken(manifest: runrecord.Manifest) -> None:
        if _orphaned(manifest):
            give_back_room(run_dir)
            _mark_interrupted(run_dir, manifest)
        take(run_dir, manifest)

    return runrecord.update(run_dir, settled_and_taken)


def take(run_dir: Path, manifest: runrecord.Manifest) -> None:
    """Make this process the owner in ``manifest``; refused while another live process trains it."""
    current = manifest.owner
    if manifest.status in ACTIVE and current and current.get("pid") != os.getpid() and alive(current):
        raise RunError(f"run {run_dir.name} is being trained by process {current.get('pid')} on "
                       f"{current.get('host')}; wait for it to end or stop it first")
    manifest.owner = me()


def _orphaned(manifest: runrecord.Manifest) -> bool:
    return manifest.status in ACTIVE and not alive(manifest.owner or None)


def _mark_interrupted(run_dir: Path, manifest: runrecord.Manifest) -> None:
    """Record in ``manifest`` that its run's owner ended without an outcome, if it still says so."""
    if not _orphaned(manifest):
        return
    pid = manifest.owner.get("pid")
    manifest.set(status="interrupted", exit_code=None, message=(
        f"the process that was training it (pid {pid}) ended without recording an outcome; "
        f"continue from its newest complete snapshot with `caffetool train.resume {run_dir.name}`"))


def keep_room(run_dir: Path) -> None:
    """Set aside :data:`ROOM_BYTES` for the final record; without that much free, start regardless."""
    try:
        with open(run_dir / ROOM, "wb") as f:
            f.write(bytes(ROOM_BYTES))  # real bytes: a sparse file would keep no room at all
    except OSError:
        give_back_room(run_dir)


def give_back_room(run_dir: Path) -> None:
    """Free the room kept by :func:`keep_room`, if any."""
    (run_dir / ROOM).unlink(missing_ok=True)


def _boot_id() -> str | None:
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return None
