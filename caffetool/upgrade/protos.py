"""Nets, solvers and trained weights in Caffe's current format, by Caffe's own upgrade tools.

``upgrade_net_proto_text``, ``upgrade_solver_proto_text`` and ``upgrade_net_proto_binary`` (built
with the engine, in its ``bin/``) read every format Caffe ever wrote (V0 and V1 layers, the old
padding layers, solver types as enums) and write today's. A file they find current is left exactly
as the user wrote it (their comments and layout kept) rather than re-printed. A file Caffe cannot
read as any of them (a typo, a truncated download, an empty ``.caffemodel``) is said to be so, with
protobuf's own ``line:column`` message, so that it is not mistaken for a file that was checked.

The tool reads the file through a descriptor opened here (:func:`projecttree.open_regular`: never a
FIFO, never through a link) and writes its result to a pipe; the caller writes the file, so a full
disk is seen as a failed write rather than left to a tool that does not check its output.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from caffetool.engine.locate import EngineInfo, caffe_env
from caffetool.upgrade import projecttree

TEXT = (("upgrade_net_proto_text", "net"), ("upgrade_solver_proto_text", "solver"))
BINARY = (("upgrade_net_proto_binary", "weights"),)
CURRENT = "already in latest proto format"
UNPARSED = "Failed to parse"
PARSE_ERROR = re.compile(r"Error parsing text-format caffe\.\w+: (\d+):(\d+): (.*)")
TIMEOUT_S = 600


@dataclass(frozen=True)
class Upgrade:
    """What Caffe's tool made of one file: ``kind`` (net, solver, weights, or None: Caffe read it as
    none of them, ``said`` says why), whether it was upgraded (``written`` is then the new file), and
    the tool's own words for it."""

    kind: str | None
    upgraded: bool
    said: tuple[str, ...] = ()
    written: bytes = b""


def upgrade(engine: EngineInfo, source: Path, shown: str) -> Upgrade:
    """What Caffe's tools make of ``source`` (named ``shown`` in what they say). Raises
    :class:`projecttree.UnreadableEntry` where it is not a regular file that can be opened."""
    binary = source.suffix.lower() == ".caffemodel"
    unparsed: list[tuple[int, int, str, str]] = []
    with projecttree.open_regular(source) as f:
        given = f"/dev/fd/{f.fileno()}"
        for tool, kind in BINARY if binary else TEXT:
            done = _run(engine, tool, given, f.fileno())
            if done is None:
                return Upgrade(kind, False, (f"{tool} did not finish in {TIMEOUT_S} s",))
            stderr = done.stderr.decode(errors="replace").replace(given, shown)
            if UNPARSED in stderr:
                unparsed.append(_parse_error(stderr, kind))
                continue
            return _outcome(tool, kind, done, stderr, binary)
    return Upgrade(None, False, (_furthest(unparsed),) if any(u[2] for u in unparsed) else ())


def _run(engine: EngineInfo, tool: str, given: str, fd: int) -> subprocess.CompletedProcess | None:
    """``tool`` on the open file ``given``, its result on stdout; None if it did not finish."""
    try:
        return subprocess.run([str(engine.tool(tool)), given, "/dev/stdout"], capture_output=True, env=caffe_env(),
                              pass_fds=(fd,), timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return None


def _outcome(tool: str, kind: str, done: subprocess.CompletedProcess, stderr: str, binary: bool) -> Upgrade:
    said = tuple(_message(line) for line in stderr.splitlines()
                 if "upgrad" in line.lower() and "Wrote upgraded" not in line)
    if done.returncode != 0:
        last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
        return Upgrade(kind, False, said or (f"{tool} failed: {_message(last)}" if last else f"{tool} failed",))
    if binary and not done.stdout:
        # an empty file is a valid empty NetParameter to protobuf, but holds no weights
        return Upgrade(None, False, ("it holds no net",))
    if CURRENT in stderr:
        return Upgrade(kind, False)
    return Upgrade(kind, True, said, done.stdout)


def _parse_error(stderr: str, kind: str) -> tuple[int, int, str, str]:
    """(line, column, message, kind) of protobuf's complaint; (0, 0, "", kind) when it gave none."""
    match = PARSE_ERROR.search(stderr)
    if match is None:
        return (0, 0, "", kind)
    return (int(match.group(1)), int(match.group(2)), match.group(3).strip().rstrip("."), kind)


def _furthest(unparsed: list[tuple[int, int, str, str]]) -> str:
    """The complaint of the kind Caffe read furthest into: a solver with a typo reads as a net only
    to its first line, so the solver's message is the one that points at the typo."""
    line, column, message, kind = max(unparsed)
    return f"as a {kind}, {line}:{column}: {message}"


def _message(line: str) -> str:
    """A glog line without its prefix (``E1127 19:22:37.123 123 file.cpp:45] ``)."""
    return line.split("] ", 1)[-1].strip()
