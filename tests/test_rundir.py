"""Run directories: claimed once, released on a failed setup, manifests complete or untouched."""

from __future__ import annotations

import pytest

from caffetool.errors import ConfigError, RunError
from caffetool.runs import rundir


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


def test_an_unknown_or_unreadable_run_is_a_run_error(tmp_path):
    with pytest.raises(RunError, match=r"^no run 'nope'"):
        rundir.folder_of(tmp_path, "nope")
