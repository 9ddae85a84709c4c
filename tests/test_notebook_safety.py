"""``caffetool notebook.run`` and ``notebook.kernel`` against what users and the machine throw at them:
an --out that is the notebook, an executed copy already there, a cell that never ends, a kernel that
dies, Ctrl-C and SIGTERM mid-cell, notebooks of another shape, kernel names Jupyter cannot use and a
TMPDIR too long for a Unix socket. Each runs the real command on a real Jupyter kernel and asserts one
``Error:`` line, the user's files as they were, and no process left behind."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

CAFFETOOL = Path(sys.executable).with_name("caffetool")
pytestmark = pytest.mark.engine


def notebook(path: Path, *cells: str) -> Path:
    """A v4 notebook of ``cells`` (code) at ``path``."""
    book = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "id": f"c{i}", "metadata": {}, "execution_count": None, "outputs": [], "source": s}
        for i, s in enumerate(cells)]}
    path.write_text(json.dumps(book))
    return path


def caffetool(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CAFFETOOL), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def one_error(done: subprocess.CompletedProcess[str]) -> str:
    """The single ``Error:`` line a refused command printed (and nothing that looks like a traceback)."""
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
    return lines[0]


def gone(pid: int, within: float = 10) -> bool:
    """Whether process ``pid`` has ended (a zombie waiting for its reaper counts) within ``within`` s."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


PIDS_CELL = ("import os, subprocess, pathlib\n"
             "child = subprocess.Popen(['sleep', '300'])\n"
             "pathlib.Path({path!r}).write_text(f'{{os.getpid()}} {{child.pid}}')")


def pids_of(path: Path, within: float = 60) -> list[int]:
    """The kernel's and its child's pids, as the notebook's first cell wrote them."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if path.exists() and len(text := path.read_text().split()) == 2:
            return [int(p) for p in text]
        time.sleep(0.1)
    raise AssertionError(f"the notebook's first cell did not run within {within} s")


# --- 1. the user's files ---------------------------------------------------------------------------

def test_an_out_that_is_the_notebook_is_refused_under_every_spelling(tmp_path):
    """The notebook is only read: --out naming it (the same path, another spelling, a symlink to it, a
    hard link to it) is refused before a kernel starts, --force or not, and the notebook is unchanged."""
    from caffetool import notebooks
    from caffetool.errors import ConfigError

    book = notebook(tmp_path / "nb.ipynb", "print(1)")
    before = book.read_bytes()
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.ipynb").symlink_to(book)
    os.link(book, tmp_path / "hard.ipynb")
    for out in (book, tmp_path / "sub" / ".." / "nb.ipynb", tmp_path / "link.ipynb", tmp_path / "hard.ipynb"):
        for replace in (False, True):
            with pytest.raises(ConfigError, match="is the notebook .* itself.*nothing was changed"):
                notebooks.check_output(book, out, replace)
    line = one_error(caffetool("notebook.run", str(book), "--out", str(tmp_path / "link.ipynb"), "--force"))
    assert f"--out {tmp_path / 'link.ipynb'} is the notebook {book} itself" in line, line
    assert book.read_bytes() == before and not list(tmp_path.glob("*-executed.ipynb"))


def test_an_existing_executed_copy_is_kept_unless_force_even_with_a_long_tmpdir(tmp_path):
    """NB-executed.ipynb (the default --out) already there is refused without --force and left as it
    was; with --force the run replaces it. The run is made with a TMPDIR longer than a Unix socket's
    path allows (107 bytes), which the kernel's sockets must not depend on."""
    book = notebook(tmp_path / "nb.ipynb", "print(6 * 7)")
    executed = tmp_path / "nb-executed.ipynb"
    executed.write_text("my notes")
    line = one_error(caffetool("notebook.run", str(book)))
    assert str(executed) in line and "--force" in line and "nothing was changed" in line, line
    assert executed.read_text() == "my notes"

    long_tmp = tmp_path / ("t" * 100)
    long_tmp.mkdir()
    done = caffetool("notebook.run", str(book), "--force", env={"TMPDIR": str(long_tmp)})
    assert done.returncode == 0, done.stderr
    outputs = json.loads(executed.read_text())["cells"][0]["outputs"]
    assert "".join(outputs[0]["text"]) == "42\n"


# --- 2. work that ends ------------------------------------------------------------------------------

@pytest.mark.parametrize("loop", ["while True: pass",
                                  "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass"],
                         ids=["interruptible", "ignores-interrupt"])
def test_a_cell_past_the_timeout_is_stopped_with_its_kernel(tmp_path, loop):
    """--timeout holds: the looping cell is interrupted, its kernel (and the kernel's child process)
    killed when it does not stop, one Error names the cell and the limit, and nothing is written."""
    book = notebook(tmp_path / "nb.ipynb", PIDS_CELL.format(path=str(tmp_path / "pids")), loop)
    start = time.monotonic()
    done = caffetool("notebook.run", str(book), "--timeout", "2", timeout=90)
    pids = pids_of(tmp_path / "pids", within=1)
    try:
        line = one_error(done)
        assert "code cell 2 (" in line and "ran past --timeout 2 s" in line, line
        assert time.monotonic() - start < 30
        assert all(gone(pid) for pid in pids)
        assert not (tmp_path / "nb-executed.ipynb").exists()
    finally:
        kill_all(pids)


@pytest.mark.parametrize(("cell", "said"), [("import os; os._exit(3)", "(exit 3)"),
                                            ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
                                             "(killed by SIGKILL)")], ids=["exit", "sigkill"])
def test_a_kernel_that_dies_ends_the_run_naming_the_cell(tmp_path, cell, said):
    book = notebook(tmp_path / "nb.ipynb", "x = 1", cell, "print('never')")
    start = time.monotonic()
    line = one_error(caffetool("notebook.run", str(book), timeout=90))
    assert "the kernel died while code cell 2 (" in line and said in line, line
    assert time.monotonic() - start < 30
    assert not (tmp_path / "nb-executed.ipynb").exists()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_mid_cell_stops_the_run_and_its_kernel_at_once(tmp_path, signum):
    """Ctrl-C (SIGINT) or SIGTERM while a cell sleeps: the command ends within seconds with the
    interrupted Error (exit 130), the kernel and the process it started are gone, nothing is written
    to --out (an earlier copy there is kept as it was)."""
    book = notebook(tmp_path / "nb.ipynb", PIDS_CELL.format(path=str(tmp_path / "pids")), "import time; time.sleep(300)")
    out = tmp_path / "out.ipynb"
    out.write_text("earlier")
    run = subprocess.Popen([str(CAFFETOOL), "notebook.run", str(book), "--out", str(out), "--force"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    pids: list[int] = []
    try:
        pids = pids_of(tmp_path / "pids")
        time.sleep(0.5)  # into the sleeping cell
        run.send_signal(signum)
        start = time.monotonic()
        _, stderr = run.communicate(timeout=30)
        assert time.monotonic() - start < 10
        assert run.returncode == 130 and stderr.strip() == "Error: interrupted; nothing half-done was kept", stderr
        assert all(gone(pid) for pid in pids)
        assert out.read_text() == "earlier"
    finally:
        run.kill()
        run.communicate()
        kill_all(pids)


def test_an_interrupt_while_the_kernel_starts_leaves_no_kernel(tmp_path):
    """Ctrl-C during the kernel's start (before any cell): no kernel of this run is left running."""
    book = notebook(tmp_path / "nb.ipynb", "print(1)")
    run = subprocess.Popen([str(CAFFETOOL), "notebook.run", str(book)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, start_new_session=True)
    kernels: list[int] = []
    try:
        me = psutil.Process(run.pid)
        deadline = time.monotonic() + 60
        while not kernels and time.monotonic() < deadline:
            kernels = [p.pid for p in me.children(recursive=True) if "ipykernel_launcher" in " ".join(p.cmdline())]
            time.sleep(0.02)
        assert kernels, "no kernel started"
        run.send_signal(signal.SIGINT)
        _, stderr = run.communicate(timeout=30)
        assert run.returncode == 130 and "Traceback" not in stderr, stderr
        assert all(gone(pid) for pid in kernels)
        assert not (tmp_path / "nb-executed.ipynb").exists()
    finally:
        run.kill()
        run.communicate()
        kill_all(kernels)


# --- 3. one Error line, never a traceback ----------------------------------------------------------

def shaped(**changes: object) -> str:
    book = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "id": "a", "metadata": {}, "execution_count": None, "outputs": [], "source": "1"}]}
    for key, value in changes.items():
        if key.startswith("cell_"):
            book["cells"][0][key.removeprefix("cell_")] = value
        else:
            book[key] = value
    return json.dumps(book)


MALFORMED = {
    "cells an object": (shaped(cells={"a": 1}), "cells is an object, not an array"),
    "metadata a list": (shaped(metadata=[1]), "metadata is an array, not an object"),
    "kernelspec a string": (shaped(metadata={"kernelspec": "python3"}), "metadata.kernelspec is a string, not an object"),
    "source a number": (shaped(cell_source=5), "cells[0].source is a number, not a string or an array of strings"),
    "a cell a number": (shaped(cells=[5]), "cells[0] is a number, not an object"),
    "an output of no kind": (shaped(cell_outputs=[{"output_type": 3}]), "cells[0].outputs[0]: "),
    "nbformat a string": (shaped(nbformat="4"), "nbformat is a string, not a version number"),
    "the top an array": ("[1]", "the top level is an array, not an object"),
    "100,000-deep nesting": ("[" * 100_000 + "]" * 100_000, "nests deeper than Python can read"),
    "800-deep metadata": (shaped(metadata={"x": "DEEP"}).replace('"DEEP"', "[" * 800 + "]" * 800),
                          "nests deeper than Python can read"),
    "not JSON": ("{", "not JSON"),
    "not UTF-8": (b"\xff\xfe{}", "is not UTF-8"),
}


def test_notebooks_of_another_shape_get_one_error_naming_file_and_field(tmp_path):
    """Each malformed notebook: one Error line naming the file and what is wrong, before any kernel,
    and no executed copy. The library's reader is checked on every case, the command on two."""
    from caffetool import notebooks
    from caffetool.errors import ConfigError

    for name, (content, said) in MALFORMED.items():
        path = tmp_path / f"{name.replace(' ', '-')}.ipynb"
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        with pytest.raises(ConfigError) as refused:
            notebooks.read_notebook(path)
        assert str(refused.value).startswith(f"{path}: not a Jupyter notebook (") and said in str(refused.value), name
    for name in ("cells an object", "100,000-deep nesting"):
        path = tmp_path / f"{name.replace(' ', '-')}.ipynb"
        line = one_error(caffetool("notebook.run", str(path)))
        assert str(path) in line and MALFORMED[name][1] in line, line
    assert not list(tmp_path.glob("*-executed.ipynb"))


def test_kernel_names_jupyter_cannot_use_or_python3_are_refused_before_anything_is_written(tmp_path):
    """``--name "../evil"``, ``"a b"`` (ipykernel's ValueError), ``""`` and ``python3`` (which would write
    over ipykernel's own kernel spec) and ``..``: one Error each, nothing written under --prefix. The
    library's installer refuses every one; the command is run on two."""
    from caffetool import notebooks
    from caffetool.errors import ConfigError

    for name in ("../evil", "a b", "", "python3", "Python3", "..", ".hidden"):
        with pytest.raises(ConfigError, match=re.escape(f"kernel name {name!r}") + ".*--name caffetool"):
            notebooks.install_kernel(None, name, prefix=tmp_path)  # refused before the engine is asked
    for name in ("../evil", ""):
        line = one_error(caffetool("notebook.kernel", "--name", name, "--prefix", str(tmp_path)))
        assert f"kernel name {name!r}" in line and "--name caffetool" in line, line
    assert not list(tmp_path.iterdir())
