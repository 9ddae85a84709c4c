"""Who trains a run: owners recorded, recognised when gone (with real processes), stale runs settled."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from caffetool.errors import RunError
from caffetool.runs import ownership, runrecord
from caffetool.runs.folder import RunFolder

from .smalldisk import small_disk


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A live process that is not this one."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield child
    child.kill()
    child.wait()


def ended_process() -> dict:
    """The owner record of a process that has ended."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    record = {**ownership.me(), "pid": child.pid, "start": ownership.start_ticks(child.pid)}
    child.kill()
    child.wait()
    return record


def write_run(tmp_path: Path, **manifest: object) -> Path:
    run = tmp_path / "r1"
    run.mkdir()
    runrecord.write(run, runrecord.Manifest.from_dict({"name": "r1", **manifest}))
    return run


def test_this_process_is_alive_as_recorded():
    me = ownership.me()
    assert me["pid"] == os.getpid() and me["host"] == socket.gethostname()
    assert me["start"] == ownership.start_ticks(os.getpid()) and me["boot"]
    assert ownership.alive(me)


def test_an_ended_process_is_gone(sleeper):
    assert not ownership.alive(ended_process())
    live = {**ownership.me(), "pid": sleeper.pid, "start": ownership.start_ticks(sleeper.pid)}
    assert ownership.alive(live)
    assert not ownership.alive({**live, "start": live["start"] - 1})  # the pid now belongs to another process
    assert not ownership.alive({**live, "boot": "another-boot"})


def test_what_cannot_be_checked_counts_as_alive():
    assert ownership.alive(None)
    assert ownership.alive({**ended_process(), "host": "another-host"})


def test_a_running_run_whose_owner_is_gone_is_settled_as_interrupted(tmp_path):
    run = write_run(tmp_path, status="running", owner=ended_process())
    (run / ownership.ROOM).write_bytes(bytes(10))
    settled = ownership.settle(run)
    assert settled.status == "interrupted" and settled.exit_code is None
    assert settled.message == (f"the process that was training it (pid {settled.owner['pid']}) ended without "
                                  "recording an outcome; continue from its newest complete snapshot with "
                                  "`caffetool train.resume r1`")
    assert json.loads(RunFolder(run).manifest.read_text()) == settled.as_dict()
    assert not (run / ownership.ROOM).exists()


def test_live_and_finished_runs_are_left_alone(tmp_path, sleeper):
    live = {**ownership.me(), "pid": sleeper.pid, "start": ownership.start_ticks(sleeper.pid)}
    run = write_run(tmp_path, status="running", owner=live)
    assert ownership.settle(run).status == "running"
    runrecord.write(run, runrecord.Manifest(name="r1", status="finished", owner=ended_process()))
    assert ownership.settle(run).status == "finished"


def test_a_run_another_live_process_trains_is_not_taken(tmp_path, sleeper):
    live = {**ownership.me(), "pid": sleeper.pid, "start": ownership.start_ticks(sleeper.pid)}
    manifest = runrecord.Manifest(status="running", owner=live)
    with pytest.raises(RunError, match=rf"^run r1 is being trained by process {sleeper.pid} on "
                                       rf"{socket.gethostname()}; wait for it to end or stop it first$"):
        ownership.take(tmp_path / "r1", manifest)
    manifest.status = "interrupted"
    ownership.take(tmp_path / "r1", manifest)
    assert manifest.owner["pid"] == os.getpid()


def test_room_for_the_record_is_kept_where_there_is_room(tmp_path):
    ownership.keep_room(tmp_path)
    assert (tmp_path / ownership.ROOM).stat().st_size == ownership.ROOM_BYTES
    ownership.give_back_room(tmp_path)
    assert not (tmp_path / ownership.ROOM).exists()
    with small_disk(tmp_path / "disk", "256k") as disk:
        ownership.keep_room(disk)
        assert list(disk.iterdir()) == []


def test_a_manifest_that_is_not_an_object_is_refused(tmp_path):
    run = tmp_path / "r1"
    run.mkdir()
    RunFolder(run).manifest.write_text("[1, 2]")
    with pytest.raises(RunError, match=r"manifest.json is not a run manifest \(a JSON object\)$"):
        ownership.settle(run)
