"""``caffetool upgrade``: an old Caffe project as a copy that runs today, and a report of what changed.

The copy is written beside the original (``examples`` -> ``examples-upgraded``, ``classify.py`` ->
``classify-upgraded.py``), never over it: it is built in a staging folder beside the target and
renamed into place only when complete (:mod:`caffetool.fsio`), so a failure leaves nothing
half-written and the user's files are only ever read. Each file is handled by its kind:

* ``.py``: Python 2 to 3 (:mod:`caffetool.upgrade.python2`);
* ``.ipynb``: the same for each code cell (:mod:`caffetool.upgrade.ipynb`);
* ``.prototxt`` and ``.caffemodel``: Caffe's own upgrade tools (:mod:`caffetool.upgrade.protos`);
* anything else: copied as it is.

A file that cannot be converted (not Python of either kind) is copied unchanged and named in the
report. ``set_mode_gpu()`` is left as it is (the code is the user's), and noted where the installed
engine has no GPU build.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from caffetool import fsio
from caffetool.engine.locate import EngineInfo
from caffetool.errors import CaffetoolError, ConfigError
from caffetool.upgrade import ipynb, protos, python2

REPORT = "UPGRADE-REPORT.txt"
SUFFIX = "-upgraded"
GPU_CALL = "set_mode_gpu("


@dataclass
class ReportLine:
    """One line of the report: ``path:line: what`` (line 0: the file as a whole)."""

    path: str
    line: int
    what: str
    changed: bool

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {'changed' if self.changed else 'check'}: {self.what}"


@dataclass
class UpgradeReport:
    """What the upgrade did, file by file."""

    source: Path
    target: Path
    entries: list[ReportLine] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def count(self, kind: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def add(self, path: str, line: int, what: str, changed: bool) -> None:
        self.entries.append(ReportLine(path, line, what, changed))

    def summary(self) -> list[str]:
        changes = sum(e.changed for e in self.entries)
        checks = sum(not e.changed for e in self.entries)
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(self.counts.items()))
        return [f"Upgraded {self.source} into {self.target}: {kinds or 'no files'}",
                f"{changes} change(s) made, {checks} place(s) to check"]

    def text(self) -> str:
        lines = [*self.summary(), ""]
        lines += [str(e) for e in self.entries if not e.changed]
        if any(not e.changed for e in self.entries):
            lines.append("")
        lines += [str(e) for e in self.entries if e.changed]
        return "\n".join(lines) + "\n"


def default_target(source: Path) -> Path:
    """``examples`` -> ``examples-upgraded``; ``lenet.ipynb`` -> ``lenet-upgraded.ipynb``."""
    if source.is_dir():
        return source.with_name(source.name + SUFFIX)
    return source.with_name(source.stem + SUFFIX + source.suffix)


def upgrade(source: Path, target: Path | None, engine: EngineInfo | None) -> UpgradeReport:
    """Write the upgraded copy of ``source`` (a folder or one file) to ``target`` and return the report.

    ``engine`` runs Caffe's upgrade tools; without one, nets and weights are copied as they are and
    the report says how to upgrade them.
    """
    source = source.absolute()
    if not source.exists():
        raise ConfigError(f"{source} does not exist: pass a folder, a .py script or a .ipynb notebook")
    target = (target or default_target(source)).absolute()
    if target.exists() or target.is_symlink():
        raise ConfigError(f"{target} exists: remove it, or pass --out with another path (the upgrade never "
                          "writes over files)")
    if source.is_dir() and target.is_relative_to(source):
        raise ConfigError(f"--out {target} is inside {source}: the copy goes beside the project, not into it")
    if not target.parent.is_dir():
        raise ConfigError(f"{target.parent} is not a folder: create it, or pass --out with a path in an existing one")
    report = UpgradeReport(source, target)
    gpu_engine = engine is not None and not engine.cpu_only
    with _building(target, single=not source.is_dir()) as partial:
        if source.is_dir():
            for path in sorted(source.rglob("*")):
                relative = path.relative_to(source)
                if path.is_symlink():
                    (partial / relative).parent.mkdir(parents=True, exist_ok=True)
                    (partial / relative).symlink_to(path.readlink())
                elif path.is_dir():
                    (partial / relative).mkdir(parents=True, exist_ok=True)
                else:
                    _one(path, partial / relative, str(relative), engine, gpu_engine, report)
        else:
            _one(source, partial / source.name, target.name, engine, gpu_engine, report)
        if source.is_dir():
            (partial / REPORT).write_text(report.text())
    return report


@contextlib.contextmanager
def _building(target: Path, single: bool) -> Iterator[Path]:
    """A folder beside ``target`` to build the copy in (:func:`caffetool.fsio.staging_folder`); on
    success it becomes ``target`` (for a ``single`` file, the one file in it does), and it goes
    either way."""
    with fsio.staging_folder(target, CaffetoolError) as staging:
        built = staging / "copy"
        built.mkdir()
        yield built
        if single:
            try:
                os.rename(next(built.iterdir()), target)
            except OSError as e:
                raise CaffetoolError(f"could not write {target}: {e.strerror or e}; nothing was written") from None
        else:
            fsio.move_into_place(built, target, staging, CaffetoolError)


def _one(path: Path, out: Path, shown: str, engine: EngineInfo | None, gpu_engine: bool, report: UpgradeReport) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    suffix = path.suffix.lower()
    if suffix in (".py", ".ipynb"):
        _python(path, out, shown, gpu_engine, report)
    elif suffix in (".prototxt", ".caffemodel"):
        _caffe(path, out, shown, engine, report)
    else:
        shutil.copy2(path, out)
        report.count("other files copied")


def _python(path: Path, out: Path, shown: str, gpu_engine: bool, report: UpgradeReport) -> None:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None:
        shutil.copy2(path, out)
        report.add(shown, 0, "not UTF-8 text: copied unchanged", False)
        report.count("files left as they were")
        return
    try:
        if path.suffix.lower() == ".ipynb":
            new, cell_notes, sources = ipynb.convert(text, shown)
            for c in cell_notes:
                where = f"{shown} (cell {c.cell})" if c.cell else shown
                report.add(where, c.note.line, c.note.what, c.note.changed)
            report.count("notebooks")
        else:
            new, notes = python2.convert(text, shown)
            for n in notes:
                report.add(shown, n.line, n.what, n.changed)
            sources = [new]
            report.count("Python files")
    except ConfigError as e:
        shutil.copy2(path, out)
        report.add(shown, 0, str(e).removeprefix(f"{shown}: "), False)
        report.count("files left as they were")
        return
    out.write_text(new, encoding="utf-8")
    shutil.copymode(path, out)
    if not gpu_engine and any(GPU_CALL in s for s in sources):
        report.add(shown, 0, "calls caffe.set_mode_gpu(): the installed engine has no GPU build, so Caffe will "
                   "fail there; use caffe.set_mode_cpu(), or build a GPU engine (caffetool engine.install --cuda)",
                   False)


def _caffe(path: Path, out: Path, shown: str, engine: EngineInfo | None, report: UpgradeReport) -> None:
    if engine is None:
        shutil.copy2(path, out)
        report.add(shown, 0, "copied unchanged: no engine to upgrade it with (caffetool engine.install)", False)
        report.count("files left as they were")
        return
    done = protos.upgrade(engine, path, out)
    if done.upgraded:
        report.add(shown, 0, f"{done.kind} upgraded by Caffe's tool" + (f" ({'; '.join(done.said)})" if done.said else ""),
                   True)
        report.count(f"{done.kind}s upgraded")
        return
    shutil.copy2(path, out)
    if done.kind is None:
        report.count("other files copied")
    elif done.said:
        report.add(shown, 0, f"{done.kind} copied unchanged: {'; '.join(done.said)}", False)
        report.count("files left as they were")
    else:
        report.count(f"{done.kind}s already current")
