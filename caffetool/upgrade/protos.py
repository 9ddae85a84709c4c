"""Nets, solvers and trained weights in Caffe's current format, by Caffe's own upgrade tools.

``upgrade_net_proto_text``, ``upgrade_solver_proto_text`` and ``upgrade_net_proto_binary`` (built
with the engine, in its ``bin/``) read every format Caffe ever wrote (V0 and V1 layers, the old
padding layers, solver types as enums) and write today's. A file they find current is left exactly
as the user wrote it (their comments and layout kept) rather than re-printed; a text file that is
neither a net nor a solver (another prototxt) is kept too, and said so.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from caffetool.engine.locate import EngineInfo, caffe_env

TEXT = (("upgrade_net_proto_text", "net"), ("upgrade_solver_proto_text", "solver"))
BINARY = (("upgrade_net_proto_binary", "weights"),)
CURRENT = "already in latest proto format"
TIMEOUT_S = 600


@dataclass(frozen=True)
class Upgrade:
    """What Caffe's tool made of one file: ``kind`` (net, solver, weights, or None: neither), whether
    it was upgraded, and the tool's own words for it."""

    kind: str | None
    upgraded: bool
    said: tuple[str, ...] = ()


def upgrade(engine: EngineInfo, source: Path, target: Path) -> Upgrade:
    """Write ``source`` upgraded to ``target`` where Caffe's tools upgrade it; else leave ``target``
    alone (the caller copies it)."""
    tools = BINARY if source.suffix == ".caffemodel" else TEXT
    for tool, kind in tools:
        done = subprocess.run([str(engine.tool(tool)), str(source), str(target)], capture_output=True, text=True,
                              errors="replace", env=caffe_env(), timeout=TIMEOUT_S)
        said = tuple(_message(line) for line in done.stderr.splitlines()
                     if "upgrad" in line.lower() and "Wrote upgraded" not in line)
        if "Failed to parse" in done.stderr:
            target.unlink(missing_ok=True)
            continue
        if CURRENT in done.stderr:
            target.unlink(missing_ok=True)
            return Upgrade(kind, False)
        if done.returncode != 0:
            target.unlink(missing_ok=True)
            return Upgrade(kind, False, said or (f"{tool} failed: {_message(done.stderr.strip().splitlines()[-1])}"
                                                 if done.stderr.strip() else f"{tool} failed",))
        return Upgrade(kind, True, said)
    return Upgrade(None, False)


def _message(line: str) -> str:
    """A glog line without its prefix (``E1127 19:22:37.123 123 file.cpp:45] ``)."""
    return line.split("] ", 1)[-1].strip()
