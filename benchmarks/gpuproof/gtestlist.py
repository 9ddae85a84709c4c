"""Caffe's test suite across calls: which tests have finished, and the rest split into shards.

One call of ten minutes does not finish the CUDA build's suite (about 2,000 tests, the GPU
gradient checks slow), so each call is given the names already finished in earlier calls (a
test that printed ``[       OK ]`` or ``[  FAILED  ]``), lists the binary's tests with
``--gtest_list_tests``, and runs only the others, each shard with a positive ``--gtest_filter`` of
its own names: a negative filter of every finished name would be one argument of 100 KB, near
Linux's 128 KiB limit on a single argument. A test that was running when a shard was stopped has
not finished and runs again. Names are taken from googletest's own output, so this works on a
captured log as well as on a live run.
"""

from __future__ import annotations

import re
import tarfile
from collections.abc import Iterable
from pathlib import Path

SUMMARY = re.compile(r"^\[==========\] (\d+) tests? from \d+ test cases? ran")
OK = re.compile(r"^\[       OK \] (\S+)")
FAILED = re.compile(r"^\[  FAILED  \] (\S+?),?( .*)?$")
RUN = re.compile(r"^\[ RUN      \] (\S+)")


def finished(text: str) -> tuple[list[str], list[str]]:
    """The tests of one googletest output that passed and that failed, in order, each once."""
    ok: dict[str, None] = {}
    failed: dict[str, None] = {}
    for line in text.splitlines():
        if m := OK.match(line):
            ok[m.group(1)] = None
        elif (m := FAILED.match(line)) and "." in m.group(1):  # not the "[  FAILED  ] 3 tests" summary
            failed[m.group(1)] = None
    return list(ok), list(failed)


def stopped_in(text: str) -> str | None:
    """The test a shard was running when it ended without googletest's summary (killed or aborted)."""
    if any(SUMMARY.match(line) for line in text.splitlines()):
        return None
    running = [m.group(1) for line in text.splitlines() if (m := RUN.match(line))]
    done = set(finished(text)[0]) | set(finished(text)[1])
    return running[-1] if running and running[-1] not in done else None


def listed(text: str) -> list[str]:
    """Full test names from ``--gtest_list_tests`` output: a case line (``Case/0.``, maybe a
    ``# TypeParam`` comment) followed by its tests indented by two spaces."""
    names: list[str] = []
    case = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):
            word = line.split("#", 1)[0].strip()
            case = word if word.endswith(".") else None
        elif case is not None:
            names.append(case + line.split("#", 1)[0].strip())
    return names


def read_names(path: Path) -> set[str]:
    """A names file: one test name a line, ``#`` comments and blank lines ignored."""
    names = set()
    for line in path.read_text().splitlines():
        name = line.split("#", 1)[0].strip()
        if name:
            names.add(name)
    return names


def write_names(path: Path, names: Iterable[str]) -> None:
    path.write_text("".join(f"{name}\n" for name in sorted(set(names))))


def shards(names: list[str], count: int) -> list[list[str]]:
    """``names`` dealt round-robin into at most ``count`` non-empty shards: neighbours in the list
    (one test case's slow GPU variants) land in different shards."""
    dealt = [names[i::count] for i in range(max(1, count))]
    return [shard for shard in dealt if shard]


def gtest_filter(names: list[str]) -> str:
    """A positive ``--gtest_filter`` naming exactly ``names``; refused for a name googletest would
    read as a pattern (``*``, ``?``, ``:``) or as the start of the negative part (``-``)."""
    bad = [name for name in names if set(name) & set("*?:-")]
    if bad:
        raise ValueError(f"test names a filter cannot name exactly: {bad[:3]}")
    return "--gtest_filter=" + ":".join(names)


def done_in_records(folders: Iterable[Path]) -> set[str]:
    """Every test that finished in the records: the ``gtest_done.txt`` a call left, and the names
    in the shard and rerun logs of its ``logs.tar.gz`` (as the run step writes them)."""
    names: set[str] = set()
    for folder in folders:
        if (folder / "gtest_done.txt").exists():
            names |= read_names(folder / "gtest_done.txt")
        archive = folder / "logs.tar.gz"
        if not archive.exists():
            continue
        with tarfile.open(archive) as tar:
            for member in tar:
                if member.isfile() and Path(member.name).name.startswith("gtest_"):
                    ok, failed = finished(tar.extractfile(member).read().decode(errors="replace"))
                    names.update(ok, failed)
    return names
