"""The tutorials under ``docs/tutorials/`` run as a newcomer runs them, so page and program cannot drift.

Every ```` ```console ```` block of a tutorial is read in page order: a line starting with ``$ `` is a
command, the lines after it up to the next command are what the page says it prints. The commands
run in order in an empty folder of the test (``/home/you/tutorial`` on the page) with the checkout's
``.venv/bin`` first on PATH, each in ``bash -c``; ``cd DIR`` moves the folder the next ones run in,
as it would in the reader's shell. Three things are put in for the page's words: that folder, the
checkout (``~/caffetool`` on the page) and the demo's port (8000 on the page, a free one here). A
command ending in `` &`` runs in the background until the page's ``kill %1``, as in the shell, and
what it printed meanwhile is checked then.

What a command prints is checked line by line against the page: each line shown, other than ``...``,
must come in the output in the page's order (``...`` within a line standing for any text), compared
with every number masked and runs of spaces made one, since figures and column widths differ from
run to run.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from pathlib import Path

import pytest

from .conftest import PROJECT
from .processes import stop
from .test_demo import free_port, serving

TUTORIALS = PROJECT / "docs" / "tutorials"
PAGE_FOLDER = "/home/you/tutorial"
PAGE_CHECKOUT = "~/caffetool"
PAGE_PORT = "8000"


def blocks(page: Path) -> list[tuple[str, list[str]]]:
    """The page's commands with the lines it shows under each, in page order."""
    steps: list[tuple[str, list[str]]] = []
    for block in re.findall(r"^```console\n(.*?)^```", page.read_text(), re.S | re.M):
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            elif steps and line.strip():
                steps[-1][1].append(line)
    return steps


def masked(line: str) -> str:
    return " ".join(re.sub(r"\d+", "0", line).split())


def shown_in_order(shown: list[str], printed: str, folder: Path) -> None:
    """Each line the page shows (``...`` aside) appears in what was printed, in the page's order; a
    ``...`` inside a line stands for whatever that part of the line printed."""
    lines = [masked(line) for line in printed.splitlines()]
    at = 0
    for want in shown:
        if want.strip() == "...":
            continue
        parts = [masked(part) for part in want.replace(PAGE_FOLDER, str(folder)).split("...") if part.strip()]
        while at < len(lines) and not in_order(parts, lines[at]):
            at += 1
        assert at < len(lines), f"not printed: {want!r}\nprinted:\n{printed}"
        at += 1


def in_order(parts: list[str], line: str) -> bool:
    start = 0
    for part in parts:
        found = line.find(part, start)
        if found < 0:
            return False
        start = found + len(part)
    return True


def follow(page: Path, folder: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVOKE_")}
    env["PATH"] = f"{PROJECT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    port, cwd = str(free_port()), folder
    background: subprocess.Popen | None = None
    background_shown: list[str] = []
    try:
        for command, shown in blocks(page):
            command = (command.replace(PAGE_CHECKOUT, str(PROJECT)).replace(PAGE_FOLDER, str(folder))
                       .replace(f":{PAGE_PORT}", f":{port}").replace(f"--port {PAGE_PORT}", f"--port {port}"))
            if command.startswith("cd "):
                cwd = cwd / command[3:].strip()
            elif command == "kill %1":
                assert background is not None, "kill %1 with nothing in the background"
                stop(background, group=True)
                printed, _ = background.communicate()
                shown_in_order(background_shown, printed, folder)
                background = None
            elif command.endswith(" &"):
                background = subprocess.Popen(["bash", "-c", command[:-2]], cwd=cwd, env=env, text=True,
                                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, start_new_session=True)
                background_shown = shown
                assert serving(port, background, 120), f"the background command did not serve on port {port}"
            else:
                done = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, text=True, timeout=900,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
                print(f"$ {command}\n{done.stdout}")  # the transcript, for pytest -s
                assert done.returncode == 0, f"$ {command}\n{done.stdout[-3000:]}"
                shown_in_order(shown, done.stdout, folder)
    finally:
        if background is not None:
            stop(background, group=True)


def test_the_pages_have_commands_to_run() -> None:
    for name in ("served-model.md", "rescue.md"):
        commands = [command for command, _ in blocks(TUTORIALS / name)]
        known = ("caffetool ", "cd ", "cp ", "curl ", "head ", "ln ", "python ", "kill ")
        assert len(commands) >= 5 and all(c.startswith(known) for c in commands), commands


def test_the_old_files_are_bvlcs_byte_for_byte() -> None:
    """The rescue starts from BVLC's files as released: each matches the git blob its README names."""
    folder = PROJECT / "examples" / "caffe-rc1"
    table = re.findall(r"^\| `([^`]+)` \| `([0-9a-f]{40})` \|$", (folder / "README.md").read_text(), re.M)
    assert len(table) == 6
    for name, blob in table:
        data = (folder / name).read_bytes()
        assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == blob, name


@pytest.mark.engine
@pytest.mark.slow
@pytest.mark.parametrize("name", ["served-model.md", "rescue.md"])
def test_tutorial_runs_as_written(name: str, tmp_path: Path) -> None:
    follow(TUTORIALS / name, tmp_path)
