"""Atomic files and staged folders: complete or absent, even on a full disk or under SIGKILL."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from caffetool import fsio
from caffetool.errors import ConfigError, DataError

from .conftest import PROJECT
from .smalldisk import small_disk

# A child that builds inside staged_dir(FINAL), says so, and waits to be killed mid-build.
BUILD_AND_WAIT = """
import sys, time
from pathlib import Path
from caffetool import fsio
with fsio.staged_dir(Path(sys.argv[1])) as built:
    (built / "half").write_text("half-built")
    print("building", flush=True)
    time.sleep(120)
"""

# A child that swaps a new folder into FINAL by the two-rename fallback and is killed between
# the renames (an audit hook sends SIGKILL as the second one starts). Every file system this
# suite runs on has RENAME_EXCHANGE, so the child runs the fallback itself.
KILLED_BETWEEN_RENAMES = """
import os, signal, sys
from pathlib import Path
from caffetool import fsio
final = Path(sys.argv[1])

def kill_at_second_rename(event, args):
    if event == "os.rename" and Path(os.fsdecode(args[1])) == final:
        os.kill(os.getpid(), signal.SIGKILL)

with fsio.staging_folder(final) as staging:
    built = staging / "built"
    built.mkdir()
    (built / "version").write_text("new")
    sys.addaudithook(kill_at_second_rename)
    fsio._rename_aside_then_in(built, final, staging)
"""


def child(script: str, *args: object) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script, *map(str, args)], cwd=PROJECT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_write_atomic_writes_text_and_bytes_with_a_plain_writes_permissions(tmp_path):
    previous = os.umask(0o022)
    try:
        fsio.write_atomic(tmp_path / "a.txt", "héllo\n")
        fsio.write_atomic(tmp_path / "sub" / "b.bin", b"\x00\x01")
    finally:
        os.umask(previous)
    assert (tmp_path / "a.txt").read_text() == "héllo\n"
    assert (tmp_path / "sub" / "b.bin").read_bytes() == b"\x00\x01"
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o644
    assert listing(tmp_path) == ["a.txt", "sub"] and listing(tmp_path / "sub") == ["b.bin"]


def test_atomic_file_keeps_the_suffix_and_replaces_the_old_file(tmp_path):
    target = tmp_path / "plot.png"
    target.write_text("old")
    with fsio.atomic_file(target) as tmp:
        assert tmp.parent == tmp_path and tmp.suffix == ".png" and tmp.name.startswith(".plot.tmp-")
        tmp.write_text("new")
        assert target.read_text() == "old"
    assert target.read_text() == "new"
    assert listing(tmp_path) == ["plot.png"]


def test_a_failing_atomic_file_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "manifest.json"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="writer failed"):
        with fsio.atomic_file(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("writer failed")
    assert target.read_text() == "old"
    assert listing(tmp_path) == ["manifest.json"]


def test_a_full_disk_keeps_the_old_file_and_names_the_failure(tmp_path):
    with small_disk(tmp_path / "disk", "256k") as disk:
        target = disk / "metrics.json"
        target.write_text("old")
        with pytest.raises(DataError) as err:
            fsio.write_atomic(target, b"x" * (1 << 20), DataError)
        assert str(err.value) == f"cannot write {target}: No space left on device"
        assert target.read_text() == "old"
        assert listing(disk) == ["metrics.json"]
        with pytest.raises(OSError):  # without an error class the OSError itself
            fsio.write_atomic(target, b"x" * (1 << 20))
        assert listing(disk) == ["metrics.json"]


def test_a_file_where_a_folder_should_be_is_named(tmp_path):
    (tmp_path / "runs").write_text("not a folder")
    with pytest.raises(DataError) as err:
        fsio.write_atomic(tmp_path / "runs" / "a" / "x.json", "{}", DataError)
    assert str(err.value) == f"cannot write {tmp_path}/runs/a/x.json: {tmp_path}/runs is a file, not a folder"
    with pytest.raises(DataError, match=f"^cannot write {tmp_path}/runs/db: {tmp_path}/runs is a file"):
        with fsio.staged_dir(tmp_path / "runs" / "db", DataError):
            pass


def test_staged_dir_appears_complete_and_leaves_no_staging(tmp_path):
    final = tmp_path / "data" / "set"
    with fsio.staged_dir(final) as built:
        (built / "records").write_text("all")
        assert not final.exists()
        assert [p.name.startswith(".set.staging-") for p in fsio.staging_folders(final)] == [True]
    assert listing(final) == ["records"]
    assert listing(tmp_path / "data") == ["set"]


def test_staged_dir_replaces_an_existing_folder_whole(tmp_path):
    final = tmp_path / "set"
    final.mkdir()
    (final / "old-only").write_text("old")
    with fsio.staged_dir(final) as built:
        (built / "new-only").write_text("new")
        assert listing(final) == ["old-only"]
    assert listing(final) == ["new-only"]
    assert listing(tmp_path) == ["set"]


@pytest.mark.parametrize("existing", [False, True])
def test_a_failing_staged_dir_changes_nothing(tmp_path, existing):
    final = tmp_path / "set"
    if existing:
        final.mkdir()
        (final / "old").write_text("old")
    with pytest.raises(KeyboardInterrupt):
        with fsio.staged_dir(final) as built:
            (built / "half").write_text("half")
            raise KeyboardInterrupt
    assert listing(tmp_path) == (["set"] if existing else [])
    if existing:
        assert listing(final) == ["old"]


def test_a_build_killed_midway_leaves_a_stale_folder_the_next_call_removes(tmp_path):
    final = tmp_path / "set"
    proc = child(BUILD_AND_WAIT, final)
    try:
        assert proc.stdout.readline() == "building\n", proc.stderr.read()
        fsio.remove_stale(final)  # its owner is alive: left alone
        assert len(fsio.staging_folders(final)) == 1
    finally:
        proc.kill()
        proc.wait()
    stale = fsio.staging_folders(final)
    assert len(stale) == 1 and (stale[0] / fsio.BUILT / "half").exists()
    assert not final.exists()
    with fsio.staged_dir(final) as built:
        assert fsio.staging_folders(final) != stale and len(fsio.staging_folders(final)) == 1
        (built / "whole").write_text("whole")
    assert listing(tmp_path) == ["set"]
    assert listing(final) == ["whole"]


def test_a_swap_killed_between_its_renames_is_restored_by_the_next_call(tmp_path):
    final = tmp_path / "set"
    final.mkdir()
    (final / "version").write_text("old")
    proc = child(KILLED_BETWEEN_RENAMES, final)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, err
    assert not final.exists()  # the old folder is aside, the new one not yet in: nothing in place
    [stale] = fsio.staging_folders(final)
    assert (stale / fsio.REPLACED / "version").read_text() == "old"
    fsio.remove_stale(final)
    assert (final / "version").read_text() == "old"
    assert listing(tmp_path) == ["set"]


def test_the_rename_fallback_completes_the_swap(tmp_path):
    final = tmp_path / "set"
    final.mkdir()
    (final / "version").write_text("old")
    with fsio.staging_folder(final) as staging:
        built = staging / "built"
        built.mkdir()
        (built / "version").write_text("new")
        fsio._rename_aside_then_in(built, final, staging)
        assert (staging / fsio.REPLACED / "version").read_text() == "old"
    assert (final / "version").read_text() == "new"
    assert listing(tmp_path) == ["set"]


def test_a_young_staging_folder_without_an_owner_is_left_alone(tmp_path):
    final = tmp_path / "set"
    young = tmp_path / f".set{fsio.STAGING_MARK}young"
    old = tmp_path / f".set{fsio.STAGING_MARK}old"
    young.mkdir()
    old.mkdir()
    an_hour_ago = time.time() - 3600
    os.utime(old, (an_hour_ago, an_hour_ago))
    fsio.remove_stale(final)
    assert listing(tmp_path) == [young.name]


def test_only_what_caffetool_made_is_replaceable(tmp_path):
    """``--force`` replaces caffetool's own result, never someone else's files or the job's input."""
    def ours(folder):
        return (folder / "manifest.json").is_file()

    fsio.check_replaceable(tmp_path / "absent", ours, "a data set")
    (tmp_path / "empty").mkdir()
    fsio.check_replaceable(tmp_path / "empty", ours, "a data set")
    made = tmp_path / "made"
    made.mkdir()
    (made / "manifest.json").write_text("{}")
    fsio.check_replaceable(made, ours, "a data set")
    users = tmp_path / "users"
    users.mkdir()
    for name in ("thesis.tex", "b", "c", "d", "e", "f"):
        (users / name).write_text("mine")
    with pytest.raises(ConfigError) as refused:
        fsio.check_replaceable(users, ours, "a data set", error=ConfigError)
    assert str(refused.value) == (f"{users} holds files caffetool did not make (b, c, d, e, f, ...), not a data set; "
                                  "caffetool replaces only a data set it made itself: choose an empty or new folder "
                                  "(nothing was changed)")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=r"file is a file, not a data set; choose another place"):
        fsio.check_replaceable(tmp_path / "file", ours, "a data set", error=ConfigError)
    images = made / "images"
    images.mkdir()
    for target, word in ((made, "holds"), (images, "is")):
        with pytest.raises(ConfigError) as refused:
            fsio.check_replaceable(target, ours, "a data set", [images], ConfigError)
        assert str(refused.value) == (f"{target} {word} the input {images}, which replacing it would delete; "
                                      "write a data set somewhere else (nothing was changed)")
    assert sorted(p.name for p in users.iterdir()) == ["b", "c", "d", "e", "f", "thesis.tex"]
