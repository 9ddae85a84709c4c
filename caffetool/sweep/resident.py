"""A Ray left running on this machine between sweeps: started once, attached to by each sweep.

A sweep without ``--address`` starts a Ray of its own and stops it at its end: about four seconds
of a short sweep's wall time. ``caffetool ray.start`` pays that once: it runs Ray's own
``ray start --head`` (Ray's launcher: the daemons live on after the command returns), which writes
the cluster's address where ``ray.init(address="auto")`` looks for it (``ray_current_cluster`` in
Ray's temporary folder, ``$RAY_TMPDIR/ray`` or ``/tmp/ray``), so ``caffetool sweep --address auto``
attaches in a fraction of a second and leaves it running. ``caffetool ray.stop`` ends that Ray
alone: every process of its session (they all carry the session's name on their command line),
and what they started (workers, a trial's Caffe), SIGTERM then SIGKILL (:mod:`caffetool.sweep.reaper`).
Ray's own ``ray stop`` ends every Ray of the user on the machine, a running sweep's included.

The head's session is recorded beside Ray's address file (:data:`RECORD`) as ``ray.start`` starts
it: Ray's ``session_latest`` link names the newest session in the folder, which is a local sweep's
own Ray as soon as one starts, so it cannot say later which session is the resident one. A head
started with Ray's own ``ray start`` has no record; its session is the newest one.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from caffetool.choices import Limit, bounded
from caffetool.errors import RunError
from caffetool.fsio import write_atomic

START_TIMEOUT = 120.0  # seconds `ray start` may take (a loaded machine, a first start)
CPUS = Limit("a number of CPUs", 0, 1024, kind=int)
GPUS = Limit("a number of GPUs", 0, 64, kind=int)
RECORD = "caffetool_resident.json"  # beside Ray's address file: the head's address and session


@dataclass
class Head:
    """The resident Ray as its address file names it."""

    address: str  # HOST:PORT of its GCS
    session: Path  # its session folder: logs, sockets


def found() -> Head | None:
    """The Ray ``--address auto`` would attach to, if its GCS answers."""
    temp, named = _named()
    if named is None or not _named_answers(named):
        return None
    return Head(named, temp / _recorded_session(temp, named))


def stale() -> tuple[Path, str] | None:
    """Ray's address file and what it names, where nothing answers there (a Ray killed with -9, a
    reboot): ``ray.init(address="auto")`` would retry it for minutes."""
    from ray._common.utils import get_ray_address_file  # noqa: PLC0415

    temp, named = _named()
    if named is None or _named_answers(named):
        return None
    return Path(get_ray_address_file(str(temp))), named


def _named() -> tuple[Path, str | None]:
    """Ray's temporary folder and the address its address file names (None: no file)."""
    from ray._common.utils import get_default_ray_temp_dir, get_ray_address_file  # noqa: PLC0415

    temp = Path(get_default_ray_temp_dir())
    try:
        return temp, Path(get_ray_address_file(str(temp))).read_text().strip()
    except OSError:
        return temp, None


def _named_answers(address: str) -> bool:
    host, _, port = address.rpartition(":")
    return bool(host) and port.isdigit() and _answers(host, int(port))


def _recorded_session(temp: Path, address: str) -> str:
    """The session of the head at ``address``: the one ``ray.start`` recorded, else the one its GCS
    server names on its command line (a head started by ``ray start --head``). Never merely the
    newest session: that may be a sweep's own Ray, started later, which ``ray.stop`` must not end."""
    record = _read_record(temp)
    session = record.get("session")
    if record.get("address") == address and isinstance(session, str) and (temp / session).is_dir():
        return session
    served = _served_session(address)
    if served is None:
        raise RunError(f"the Ray at {address} (named in Ray's address file in {temp}) runs no GCS server of this "
                       "user on this machine; stop it where it runs, with `ray stop`")
    return served


def _served_session(address: str) -> str | None:
    """The session named on the command line of the GCS server of this user that listens on
    ``address``'s port (its ``--gcs_server_port`` may be 0, a port chosen as it started)."""
    import psutil  # noqa: PLC0415

    port = int(address.rpartition(":")[2])
    for process in psutil.process_iter(["name", "cmdline", "uids"]):
        try:
            if process.info["name"] != "gcs_server" or (process.info["uids"] and process.info["uids"].real != os.getuid()):
                continue
            listening = any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
                            for c in process.net_connections(kind="tcp"))
            args = process.info["cmdline"] or []
        except psutil.Error:
            continue
        named = [a.split("=", 1)[1] for a in args if a.startswith("--session-name=")]
        if listening and named:
            return named[0]
    return None


def _read_record(temp: Path) -> dict[str, Any]:
    try:
        record = json.loads((temp / RECORD).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _record(head: Head) -> None:
    """Note the head's session for :func:`found`."""
    try:
        write_atomic(head.session.parent / RECORD, json.dumps({"address": head.address, "session": head.session.name}))
    except OSError:
        pass  # found() then reads the session from the GCS server's command line


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2.0):
            return True
    except OSError:
        return False


def start(cpus: Any = None, gpus: Any = None, say: Callable[[str], None] = print) -> Head:
    """``ray start --head`` on this machine, unless one already runs here (then that one)."""
    if (head := found()) is not None:
        say(f"Ray already runs here at {head.address} (session {head.session.name}); `caffetool ray.stop` stops it")
        return head
    command = [str(Path(sys.executable).parent / "ray"), "start", "--head", "--port", str(_free_port()),
               "--disable-usage-stats", "--include-dashboard=false"]
    if (n := bounded(cpus, "--cpus", CPUS)) is not None:
        command += ["--num-cpus", str(n)]
    if (n := bounded(gpus, "--gpus", GPUS)) is not None:
        command += ["--num-gpus", str(n)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=START_TIMEOUT,
                              start_new_session=True)  # its daemons outlive this command and its terminal
    except FileNotFoundError:
        raise RunError(f"Ray's launcher {command[0]} is missing; reinstall caffetool's dependencies "
                       "(pip install 'ray[tune]')") from None
    except subprocess.TimeoutExpired:
        stop(lambda _: None)
        raise RunError(f"`ray start --head` did not finish in {START_TIMEOUT:.0f} s; nothing was left running") from None
    head = found()
    if done.returncode != 0 or head is None:
        lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        raise RunError(f"`ray start --head` failed (exit {done.returncode}): "
                       f"{lines[-1].strip() if lines else 'no output'}")
    _record(head)
    say(f"Ray runs at {head.address} (session {head.session.name}): sweeps attach to it with --address auto; "
        "`caffetool ray.stop` stops it")
    return head


def stop(say: Callable[[str], None] = print) -> int:
    """End the resident Ray (its session's processes and their children); how many processes ended."""
    from caffetool.sweep import reaper  # noqa: PLC0415

    head = found()
    if head is None:
        say("no Ray runs here (`caffetool ray.start` starts one)")
        return 0
    known = _session_processes(head.session.name)
    reaper.follow(known)
    reaper.end(known)
    _forget(head)
    say(f"stopped the Ray at {head.address}: {len(known)} process(es)")
    return len(known)


def _session_processes(session: str) -> dict[int, Any]:
    """Every process of this user whose command line names ``session``."""
    import psutil  # noqa: PLC0415

    mine = {}
    for process in psutil.process_iter(["cmdline", "uids"]):
        try:
            if process.info["uids"] and process.info["uids"].real != os.getuid():
                continue
            if process.pid != os.getpid() and any(session in arg for arg in process.info["cmdline"] or ()):
                mine[process.pid] = process
        except psutil.Error:
            continue
    return mine


def _forget(head: Head) -> None:
    """Remove the address file, so ``--address auto`` no longer points at the stopped Ray, and the
    record of its session."""
    from ray._common.utils import get_ray_address_file  # noqa: PLC0415

    temp = head.session.parent
    address_file = Path(get_ray_address_file(str(temp)))
    try:
        if address_file.read_text().strip() == head.address:
            address_file.unlink()
    except OSError:
        pass
    if _read_record(temp).get("address") == head.address:
        (temp / RECORD).unlink(missing_ok=True)


def _free_port() -> int:
    """A port nothing listens on now, for the head's GCS (Ray's default, 6379, may be another Ray's)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]
