"""A run's manifest: made in one place, written whole, read with clear errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from caffetool.errors import RunError
from caffetool.runs import rundir, runrecord
from caffetool.runs.folder import NAMES, RunFolder

from .smalldisk import small_disk


def manifest(**entries: object) -> runrecord.Manifest:
    return runrecord.Manifest.from_dict(entries)


def test_a_full_disk_keeps_the_previous_manifest(tmp_path):
    with small_disk(tmp_path / "disk", "256k") as disk:
        run = rundir.claim(disk, "r")
        runrecord.write(run, manifest(name="r", status="running"))
        with pytest.raises(RunError) as err:
            runrecord.write(run, manifest(name="r", status="finished", log="x" * (1 << 20)))
        assert str(err.value) == f"cannot write {RunFolder(run).manifest}: No space left on device"
        assert runrecord.read(run).as_dict() == {"name": "r", "status": "running"}
        assert sorted(p.name for p in run.iterdir()) == [NAMES["manifest"]]


def test_an_unreadable_manifest_is_a_run_error(tmp_path):
    run = rundir.claim(tmp_path, "r")
    RunFolder(run).manifest.write_text("{not json")
    with pytest.raises(RunError, match=r"manifest.json is unreadable"):
        runrecord.read(run)
    runrecord.write(run, manifest(when=tmp_path))  # non-JSON values are written as text
    assert json.loads(RunFolder(run).manifest.read_text()) == {"when": str(tmp_path)}


def test_entries_are_fields_and_unknown_ones_are_kept_as_they_were(tmp_path):
    run = rundir.claim(tmp_path, "r")
    written = {"name": "r", "status": "finished", "final": {"iteration": 10}, "note": {"by": "a user"}, "tests": []}
    RunFolder(run).manifest.write_text(json.dumps(written))
    read = runrecord.read(run)
    assert (read.name, read.status, read.final, read.tests, read.extra) == (
        "r", "finished", {"iteration": 10}, [], {"note": {"by": "a user"}})
    read.set(iterations=10, sampled_by="another tool")
    runrecord.write(run, read)
    assert json.loads(RunFolder(run).manifest.read_text()) == {  # an empty entry is left out
        "name": "r", "status": "finished", "iterations": 10, "final": {"iteration": 10}, "note": {"by": "a user"},
        "sampled_by": "another tool"}
    RunFolder(run).manifest.write_text(json.dumps({"name": 3, "caffe_command": ["caffe", "-weights=w.caffemodel"]}))
    assert runrecord.read(run).caffe_flag("weights") == "w.caffemodel" and runrecord.read(run).caffe_flag("gpu") is None


def test_a_record_writes_the_whole_manifest_at_every_change(engine, tmp_path):
    run = rundir.claim(tmp_path, "r")
    data = runrecord.new(engine.record(), engine.gpus, run, "lenet", {"name": "its data"},
                         {"gpu": False, "label": "CPU", "flag": []}, {"OMP_NUM_THREADS": "2"}, runrecord.now())
    assert (data.name, data.status, data.model) == ("r", "setting-up", "lenet")
    assert data.engine["prefix"] == str(engine.prefix) and data.threads == {"OMP_NUM_THREADS": "2"}
    runrecord.write(run, data)
    record = runrecord.Record(run, data)
    record.update(status="running")
    assert runrecord.read(run) == data and data.status == "running"
    record.update(status="finished", iterations=10)
    assert runrecord.read(run).status == "finished" and record.data.iterations == 10


def test_every_writer_changes_the_manifest_on_disk_not_its_own_old_copy(tmp_path):
    run = rundir.claim(tmp_path, "r")
    runrecord.write(run, manifest(name="r", status="running"))
    trainer = runrecord.Record(run, runrecord.read(run))
    runrecord.update(run, lambda m: m.tests.append({"batches": 2}))  # train.test meanwhile
    trainer.update(status="finished", iterations=10)
    assert runrecord.read(run).as_dict() == {"name": "r", "status": "finished", "iterations": 10,
                                             "tests": [{"batches": 2}]}
    assert trainer.data == runrecord.read(run)


def test_writers_in_many_processes_lose_nothing(tmp_path):
    run = rundir.claim(tmp_path, "r")
    runrecord.write(run, manifest(name="r"))
    script = ("import sys; from pathlib import Path; from caffetool.runs import runrecord\n"
              "for i in range(20):\n"
              "    runrecord.update(Path(sys.argv[1]), lambda m: m.tests.append(sys.argv[2] + str(i)))\n")
    writers = [subprocess.Popen([sys.executable, "-c", script, str(run), w]) for w in "abcd"]
    assert [w.wait(timeout=120) for w in writers] == [0, 0, 0, 0]
    assert sorted(runrecord.read(run).tests) == sorted(f"{w}{i}" for w in "abcd" for i in range(20))
