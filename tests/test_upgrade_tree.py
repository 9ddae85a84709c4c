"""``caffetool upgrade`` on projects that hold more than scripts and nets: FIFOs, sockets, device
nodes, links in and out of the project, names that are not UTF-8, corrupt Caffe files, unreadable
files, a full disk, folders nested past the path length limit, and sources given as ``..`` or ``/``.
Each is named in the report or refused in one ``Error:`` line, never a hang or a traceback."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from caffetool.errors import CaffetoolError
from caffetool.upgrade import convertpool, upgraded

from .smalldisk import small_disk

CAFFETOOL = Path(sys.executable).with_name("caffetool")
PY2 = 'print "hello"\n'


def cli(*args: str | Path, cwd: Path | None = None, timeout: int = 120, preexec_fn=None) -> subprocess.CompletedProcess:
    return subprocess.run([str(CAFFETOOL), "upgrade", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, preexec_fn=preexec_fn)


def on_two_cores():
    """A ``preexec_fn`` giving the command two of the machine's cores: the upgrade converts in worker
    processes only where it may use more than one, and a test lane keeps its tests to one."""
    cores = sorted(os.sched_getaffinity(1))  # the machine's, not this lane's
    if len(cores) < 2:
        pytest.skip("needs two cores: on one, the upgrade converts every file in its own process")
    return lambda: os.sched_setaffinity(0, cores[:2])


def refused(done: subprocess.CompletedProcess) -> str:
    """The one ``Error:`` line of a failed run (and that there was no traceback)."""
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
    return lines[0]


def report_lines(folder: Path) -> list[str]:
    return (folder / upgraded.REPORT).read_text(encoding="utf-8").splitlines()


def test_fifos_sockets_and_device_nodes_are_named_not_read_and_the_upgrade_goes_on(tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    os.mkfifo(proj / "a.py")  # opening it for reading would wait for a writer forever
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(proj / "s.py"))
    os.mknod(proj / "w.caffemodel", stat.S_IFCHR | 0o666, os.makedev(1, 5))  # /dev/zero's own numbers
    (proj / "ok.py").write_text(PY2)
    try:
        done = cli(proj, timeout=60)
    finally:
        listener.close()
    assert done.returncode == 0, done.stderr
    for line in ("a.py: check: not a regular file (a FIFO): not copied",
                 "s.py: check: not a regular file (a socket): not copied",
                 "w.caffemodel: check: not a regular file (a character device): not copied"):
        assert f"  {line}" in done.stdout.splitlines() and line in report_lines(tmp_path / "proj-upgraded")
    copy = tmp_path / "proj-upgraded"
    assert sorted(p.name for p in copy.iterdir()) == ["UPGRADE-REPORT.txt", "ok.py"]
    assert (copy / "ok.py").read_text() == 'print("hello")\n'
    assert "1 Python file, 3 entries not copied" in done.stdout


def test_a_single_source_that_is_not_a_regular_file_is_one_error(tmp_path):
    os.mkfifo(tmp_path / "a.py")
    assert refused(cli(tmp_path / "a.py", timeout=60)) == (f"Error: {tmp_path / 'a.py'} is not a regular file (a "
                                                           "FIFO): pass a folder, a .py script or a .ipynb notebook")
    assert "(a character device)" in refused(cli("/dev/zero"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.py"]


def test_links_stay_links_and_those_out_of_the_project_or_to_nowhere_are_named_not_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "py2.py").write_text(PY2)
    proj = tmp_path / "proj"
    (proj / "lib").mkdir(parents=True)
    (proj / "lib" / "real.py").write_text(PY2)
    (proj / "inside.py").symlink_to("lib/real.py")
    (proj / "absolute.py").symlink_to(proj / "lib" / "real.py")
    (proj / "libs").symlink_to("lib")
    (proj / "helper.py").symlink_to(elsewhere / "py2.py")
    (proj / "zero.py").symlink_to("/dev/zero")
    (proj / "dangling.py").symlink_to("nowhere.py")
    (proj / "loop.py").symlink_to("loop.py")
    done = cli(proj, timeout=60)
    assert done.returncode == 0, done.stderr
    copy = tmp_path / "proj-upgraded"
    assert os.readlink(copy / "inside.py") == "lib/real.py"
    assert os.readlink(copy / "absolute.py") == "lib/real.py"  # into the copy, not the original
    assert os.readlink(copy / "libs") == "lib"
    assert (copy / "inside.py").read_text() == 'print("hello")\n'
    assert os.readlink(copy / "helper.py") == str(elsewhere / "py2.py")
    assert (elsewhere / "py2.py").read_text() == PY2
    lines = report_lines(copy)
    assert (f"helper.py: check: a link to {elsewhere / 'py2.py'} outside the project: kept as a link, not converted; "
            "copy it in to convert it") in lines
    assert "zero.py: check: a link to /dev/zero outside the project: kept as a link, not converted; copy it in to " \
           "convert it" in lines
    assert "dangling.py: check: a link to nowhere.py, which does not exist (or loops): kept as a link" in lines
    assert "loop.py: check: a link to loop.py, which does not exist (or loops): kept as a link" in lines
    assert os.readlink(copy / "dangling.py") == "nowhere.py"
    assert not any(line.startswith(("inside.py", "absolute.py", "libs")) for line in lines)


def test_the_copy_is_named_after_the_real_folder_and_never_goes_inside_it(tmp_path):
    proj = tmp_path / "proj"
    (proj / "sub").mkdir(parents=True)
    (proj / "a.py").write_text(PY2)
    done = cli("..", cwd=proj / "sub")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "proj-upgraded" / "a.py").read_text() == 'print("hello")\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proj", "proj-upgraded"]
    assert sorted(p.name for p in proj.iterdir()) == ["a.py", "sub"]

    (tmp_path / "link").symlink_to(proj)
    assert "proj-upgraded exists" in refused(cli(tmp_path / "link"))
    assert "proj-upgraded exists" in refused(cli(".", cwd=proj))
    inside = refused(cli(tmp_path / "link", "--out", tmp_path / "link" / "sub" / ".." / "out"))
    assert inside == f"Error: --out {proj / 'out'} is inside {proj}: the copy goes beside the project, not into it"
    assert "is inside" in refused(cli("proj/sub/..", "--out", "proj/sub/out", cwd=tmp_path))
    assert sorted(p.name for p in proj.iterdir()) == ["a.py", "sub"] and not list((proj / "sub").iterdir())


def test_the_root_folder_is_refused_with_the_fix(tmp_path):
    assert refused(cli("/")) == ("Error: / has no name to name its copy after, and the whole file system is no "
                                 "project: pass a project folder (caffetool upgrade ~/old-project), or --out DIR")
    assert "is inside /" in refused(cli("/", "--out", tmp_path / "out"))
    assert not list(tmp_path.iterdir())


def test_names_not_utf8_or_with_control_characters_are_copied_under_their_own_bytes_and_shown_escaped(tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    raw = os.fsencode(proj) + b"/caf\xe9.py"
    with open(raw, "wb") as f:
        f.write(b"x = read() / 2\nprint x\n")
    with open(os.fsencode(proj) + b"/d\xff.bin", "wb") as f:
        f.write(b"\x00\x01")
    (proj / "two\nlines\x1b[2J.py").write_text("x = read() / 2\n")  # a newline and a terminal escape
    done = subprocess.run([str(CAFFETOOL), "upgrade", str(proj)], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode("utf-8")  # strict: what was printed is UTF-8 throughout
    assert "  caf\\xe9.py:1: check: / is true division" in out, out
    copy = os.fsencode(tmp_path / "proj-upgraded")
    assert sorted(os.listdir(copy)) == [b"UPGRADE-REPORT.txt", b"caf\xe9.py", b"d\xff.bin", b"two\nlines\x1b[2J.py"]
    assert "  two\\x0alines\\x1b[2J.py:1: check: / is true division" in out, out
    with open(copy + b"/caf\xe9.py", "rb") as f:
        assert f.read() == b"x = read() / 2\nprint(x)\n"
    with open(copy + b"/d\xff.bin", "rb") as f:
        assert f.read() == b"\x00\x01"
    report = (tmp_path / "proj-upgraded" / upgraded.REPORT).read_text(encoding="utf-8")
    assert "caf\\xe9.py:2: changed: print" in report


def test_a_full_disk_is_one_error_naming_the_folder_and_leaves_nothing_behind(tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "a.py").write_text(PY2)
    (proj / "big.bin").write_bytes(os.urandom(400_000))
    before = {p.name: p.read_bytes() for p in proj.iterdir()}
    with small_disk(tmp_path / "disk", "256k") as disk:
        error = refused(cli(proj, "--out", disk / "out"))
        assert error == (f"Error: cannot write the copy in {disk}: No space left on device; free some space there, "
                         "or pass --out with a folder on another disk (nothing was written)")
        assert list(disk.iterdir()) == []
    assert {p.name: p.read_bytes() for p in proj.iterdir()} == before


def test_a_file_that_fails_to_read_and_one_gone_mid_walk_are_named_and_the_rest_is_copied(tmp_path):
    """Root reads any file whatever its mode, so the failures are real ones: entries bind-mounted
    over by ``mount``'s own ``/proc/self`` files, whose process has ended (every open fails)."""
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "gone.py").write_text(PY2)
    (proj / "ok.txt").write_text("ok")
    (proj / "vanished").mkdir()
    for source, over in (("/proc/self/mem", "gone.py"), ("/proc/self/fd", "vanished")):
        # the second: a folder listed by name whose every lookup then fails, as one removed mid-walk
        mounted = subprocess.run(["mount", "--bind", source, str(proj / over)], capture_output=True, text=True)
        assert mounted.returncode == 0, mounted.stderr
    try:
        done = cli(proj)
    finally:
        for over in ("gone.py", "vanished"):
            subprocess.run(["umount", "-l", str(proj / over)], check=True)
    assert done.returncode == 0, done.stderr
    lines = report_lines(tmp_path / "proj-upgraded")
    assert any(line.startswith("gone.py: check: cannot be read (") and line.endswith("): not copied") for line in lines)
    assert "vanished: check: gone while the project was read: not copied" in lines
    assert sorted(p.name for p in (tmp_path / "proj-upgraded").iterdir()) == ["UPGRADE-REPORT.txt", "ok.txt"]


def test_folders_nested_past_the_path_length_limit_are_one_error_and_nothing_is_written(tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    fd = os.open(proj, os.O_RDONLY)
    for _ in range(500):  # 500 * 10 characters: past PATH_MAX (4096), made relative to each folder
        os.mkdir("d" * 9, dir_fd=fd)
        inner = os.open("d" * 9, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
    error = refused(cli(proj))
    assert error == (f"Error: cannot write the copy in {tmp_path}: File name too long; pass --out with a shorter "
                     "path (nothing was written)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proj"]


def test_a_project_file_named_like_the_report_is_kept_and_the_report_numbered(tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / upgraded.REPORT).write_text("mine\n")
    done = cli(proj)
    assert done.returncode == 0, done.stderr
    copy = tmp_path / "proj-upgraded"
    assert (copy / upgraded.REPORT).read_text() == "mine\n"
    assert (copy / "UPGRADE-REPORT.1.txt").read_text().startswith("Upgraded ")
    assert f"Report: {copy / 'UPGRADE-REPORT.1.txt'}" in done.stdout


@pytest.mark.engine
def test_corrupt_nets_solvers_and_weights_are_named_with_caffes_own_message(engine, tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "typo_net.prototxt").write_text('name: "x"\nlayer { name: "a" type: "Input"\n  foo: 3 }\n')
    (proj / "typo_solver.prototxt").write_text('base_lr: 0.1\nnet: "x"\nmax_iter: 3\nzzz: 1\n')
    (proj / "current.prototxt").write_text('name: "n"\n')
    (proj / "solver.prototxt").write_text("base_lr: 0.1\n")
    (proj / "empty.caffemodel").write_bytes(b"")
    (proj / "random.caffemodel").write_bytes(b"\xff" * 2000)  # wire type 7: no protobuf message at all
    report = upgraded.upgrade(proj, None, engine)
    said = {e.path: e.what for e in report.entries}
    assert said == {
        "typo_net.prototxt": 'not a net or solver Caffe can parse (as a net, 3:6: Message type "caffe.LayerParameter" '
                             'has no field named "foo"): copied unchanged',
        "typo_solver.prototxt": "not a net or solver Caffe can parse (as a solver, 4:4: Message type "
                                '"caffe.SolverParameter" has no field named "zzz"): copied unchanged',
        "empty.caffemodel": "not Caffe weights Caffe can read (it holds no net): copied unchanged",
        "random.caffemodel": "not Caffe weights Caffe can read: copied unchanged"}
    for name in said:
        assert (report.target / name).read_bytes() == (proj / name).read_bytes()
    assert report.summary()[0].endswith(": 4 files left as they were, 1 net already current, 1 solver already current")


def test_count_labels_read_right_for_one_and_for_many(tmp_path):
    report = upgraded.UpgradeReport(tmp_path, tmp_path)
    report.count("weights file already current", "weights files already current")
    report.count("Python file", "Python files")
    report.count("Python file", "Python files")
    report.add("a.py", 1, "x", True)
    assert report.summary() == [f"Upgraded {tmp_path} into {tmp_path}: 2 Python files, 1 weights file already current",
                                "1 change made, 0 places to check"]


def test_set_mode_gpu_counts_only_where_it_is_called(tmp_path):
    assert not upgraded.calls_gpu('import caffe\n# caffe.set_mode_gpu()\nhelp = "call set_mode_gpu() first"\n')
    assert not upgraded.calls_gpu("def set_mode_gpu():\n    pass\n")
    assert upgraded.calls_gpu("import caffe\ncaffe.set_mode_gpu ()\n")
    assert upgraded.calls_gpu("if gpu:\n    caffe.set_mode_gpu()\nx = (\n")  # an unfinished line after it
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "mentions.py").write_text('# caffe.set_mode_gpu()\nprint "set_mode_gpu()"\n')
    (proj / "calls.py").write_text("import caffe\ncaffe.set_mode_gpu()\n")
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
            "source": ["%matplotlib inline\n", "# caffe.set_mode_gpu()\n", "s = 'set_mode_gpu()'"]}
    (proj / "book.ipynb").write_text('{"cells": [%s], "metadata": {}, "nbformat": 4, "nbformat_minor": 2}'
                                     % json.dumps(cell))
    report = upgraded.upgrade(proj, None, None)
    gpu = sorted(e.path for e in report.entries if "set_mode_gpu" in e.what and not e.changed)
    assert gpu == ["calls.py"]


def test_a_write_failure_is_a_caffetool_error_not_an_oserror(tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "a.py").write_text(PY2)
    (proj / "b.bin").write_bytes(b"x" * 100_000)
    with small_disk(tmp_path / "disk", "4k") as disk, pytest.raises(CaffetoolError, match="No space left on device"):
        upgraded.upgrade(proj, disk / "out", None)


def test_a_file_keeps_its_declared_encoding_its_bom_and_its_line_endings(tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "latin.py").write_bytes(b'# -*- coding: latin-1 -*-\nprint "\xe9t\xe9"\n')
    (proj / "bom.py").write_bytes(b'\xef\xbb\xbfprint "\xc3\xa9t\xc3\xa9"\n')
    (proj / "crlf.py").write_bytes(b'print "\xc3\xa9t\xc3\xa9"\r\nprint "deux"\r\n')
    (proj / "wrong.py").write_bytes(b'# coding: ascii\nprint "\xc3\xa9"\n')
    done = cli(proj)
    assert done.returncode == 0, done.stderr
    copy = tmp_path / "proj-upgraded"
    assert (copy / "latin.py").read_bytes() == b'# -*- coding: latin-1 -*-\nprint("\xe9t\xe9")\n'
    assert (copy / "bom.py").read_bytes() == b'\xef\xbb\xbfprint("\xc3\xa9t\xc3\xa9")\n'
    assert (copy / "crlf.py").read_bytes() == b'print("\xc3\xa9t\xc3\xa9")\r\nprint("deux")\r\n'
    assert (copy / "wrong.py").read_bytes() == (proj / "wrong.py").read_bytes()
    assert ("wrong.py: check: not text in its declared encoding (PEP 263's coding line, else UTF-8): copied "
            "unchanged") in report_lines(copy)
    for name, printed in (("latin.py", "été\n"), ("bom.py", "été\n"), ("crlf.py", "été\ndeux\n")):
        ran = subprocess.run([sys.executable, str(copy / name)], capture_output=True, timeout=60,
                             env={**os.environ, "PYTHONIOENCODING": "utf-8"})
        assert ran.returncode == 0 and ran.stdout.decode("utf-8").replace("\r\n", "\n") == printed, ran


def many_scripts(proj: Path, n: int) -> None:
    """``n`` Python 2 scripts in ``proj``, more than :data:`convertpool.POOL_FROM` converts here."""
    proj.mkdir()
    for i in range(n):
        (proj / f"s{i:04d}.py").write_text(f'import string\nfor i in xrange({i}):\n    print string.upper("a"), i / 2\n')


def marked(marker: str) -> list[psutil.Process]:
    """The processes whose environment holds ``marker``: a command run with it and every process it started."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("CAFFETOOL_TEST_RUN") == marker:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def no_process_left(marker: str) -> None:
    _, alive = psutil.wait_procs(marked(marker), timeout=10)
    assert alive == [], alive


def started(proj: Path, marker: str) -> tuple[subprocess.Popen, list[psutil.Process]]:
    """``caffetool upgrade proj`` started, with the worker processes it forked once it has them."""
    command = subprocess.Popen([str(CAFFETOOL), "upgrade", str(proj)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True, env={**os.environ, "CAFFETOOL_TEST_RUN": marker},
                               preexec_fn=on_two_cores())
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and command.poll() is None:
        try:
            parent = psutil.Process(command.pid)  # its forked workers run its own command line; other children do not
            workers = [c for c in parent.children() if c.cmdline() == parent.cmdline()]
        except psutil.Error:
            break
        if workers:
            return command, workers
        time.sleep(0.01)
    command.kill()
    command.communicate()
    pytest.fail("the upgrade started no worker processes")


def test_many_files_are_converted_in_workers_into_the_same_copy_and_report(tmp_path, monkeypatch):
    proj = tmp_path / "proj"
    many_scripts(proj, convertpool.POOL_FROM * 2)
    (proj / "notes.txt").write_text("kept")
    done = cli(proj, preexec_fn=on_two_cores())
    assert done.returncode == 0, done.stderr
    monkeypatch.setattr(convertpool, "POOL_FROM", 10**9)  # the same upgrade, in this one process
    upgraded.upgrade(proj, tmp_path / "here", None)
    pooled, here = tmp_path / "proj-upgraded", tmp_path / "here"
    assert sorted(p.name for p in pooled.iterdir()) == sorted(p.name for p in here.iterdir())
    for copy in pooled.iterdir():
        if copy.name != upgraded.REPORT:
            assert copy.read_bytes() == (here / copy.name).read_bytes(), copy.name
    assert report_lines(pooled)[1:] == report_lines(here)[1:]  # the first line names the copy
    assert "s0007.py:2: changed: xrange: xrange(7)" in report_lines(pooled)


def test_a_run_that_fails_midway_leaves_no_worker_process(tmp_path):
    proj = tmp_path / "proj"
    many_scripts(proj, convertpool.POOL_FROM * 4)
    (proj / "zz.bin").write_bytes(os.urandom(400_000))  # written last, when the workers have started
    marker = uuid.uuid4().hex
    with small_disk(tmp_path / "disk", "256k") as disk:
        done = subprocess.run([str(CAFFETOOL), "upgrade", str(proj), "--out", str(disk / "out")], capture_output=True,
                              text=True, timeout=120, env={**os.environ, "CAFFETOOL_TEST_RUN": marker},
                              preexec_fn=on_two_cores())
        assert refused(done).startswith(f"Error: cannot write the copy in {disk}: No space left on device")
        assert list(disk.iterdir()) == []
    no_process_left(marker)


def test_a_worker_that_dies_is_one_error_not_a_hang(tmp_path):
    proj = tmp_path / "proj"
    many_scripts(proj, 400)
    marker = uuid.uuid4().hex
    command, workers = started(proj, marker)
    workers[0].kill()
    _, stderr = command.communicate(timeout=120)
    assert stderr.strip() == ("Error: a process converting the project's files ended without its result (killed, or "
                              "out of memory); nothing was written: run the upgrade again, with more memory free or "
                              "on a smaller folder")
    assert command.returncode != 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proj"]
    no_process_left(marker)


def test_ctrl_c_ends_the_workers_and_leaves_nothing_behind(tmp_path):
    proj = tmp_path / "proj"
    many_scripts(proj, 400)
    marker = uuid.uuid4().hex
    command, _ = started(proj, marker)
    os.killpg(command.pid, signal.SIGINT)  # as a terminal sends it: to every process of the command
    _, stderr = command.communicate(timeout=120)
    assert command.returncode != 0 and "Traceback" not in stderr, stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proj"]
    no_process_left(marker)
