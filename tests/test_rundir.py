"""Run directories: claimed once, released on a failed setup, manifests complete or untouched."""

from __future__ import annotations

import json

import pytest

from caffetool.errors import ConfigError, RunError
from caffetool.train import rundir

from .smalldisk import small_disk


def test_claim_makes_a_named_run_once(tmp_path):
    assert rundir.claim(tmp_path / "runs", "a") == tmp_path / "runs" / "a"
    with pytest.raises(ConfigError, match=r"already exists; choose another --name \(or `caffetool train.resume a`"):
        rundir.claim(tmp_path / "runs", "a")


def test_a_file_as_runs_directory_is_refused_by_name(tmp_path):
    runs = tmp_path / "runs"
    runs.write_text("not a folder")
    with pytest.raises(RunError) as err:
        rundir.claim(runs, None)
    assert str(err.value) == (f"cannot create the runs directory {runs} (File exists); "
                              "choose another with --runs-dir or runs.dir")


def test_a_failed_setup_releases_the_run_and_a_good_one_keeps_it(tmp_path):
    run = rundir.claim(tmp_path, "bad")
    with pytest.raises(KeyboardInterrupt):
        with rundir.released_on_failure(run):
            (run / "train_val.prototxt").write_text("half")
            raise KeyboardInterrupt
    assert not run.exists()
    good = rundir.claim(tmp_path, "good")
    with rundir.released_on_failure(good):
        (good / "train_val.prototxt").write_text("whole")
    assert (good / "train_val.prototxt").exists()


def test_a_full_disk_keeps_the_previous_manifest(tmp_path):
    with small_disk(tmp_path / "disk", "256k") as disk:
        run = rundir.claim(disk, "r")
        rundir.write_manifest(run, {"name": "r", "status": "running"})
        with pytest.raises(RunError) as err:
            rundir.write_manifest(run, {"name": "r", "status": "finished", "log": "x" * (1 << 20)})
        assert str(err.value) == f"cannot write {run / rundir.MANIFEST}: No space left on device"
        assert rundir.read_manifest(run) == {"name": "r", "status": "running"}
        assert sorted(p.name for p in run.iterdir()) == [rundir.MANIFEST]


def test_an_unknown_or_unreadable_run_is_a_run_error(tmp_path):
    with pytest.raises(RunError, match=r"^no run 'nope'"):
        rundir.find(tmp_path, "nope")
    run = rundir.claim(tmp_path, "r")
    (run / rundir.MANIFEST).write_text("{not json")
    with pytest.raises(RunError, match=r"manifest.json is unreadable"):
        rundir.read_manifest(run)
    rundir.write_manifest(run, {"when": tmp_path})  # non-JSON values are written as text
    assert json.loads((run / rundir.MANIFEST).read_text()) == {"when": str(tmp_path)}
