"""``caffetool upgrade``: an old Caffe project as a copy that runs today, and a report of what changed.

The copy is written beside the original (``examples`` -> ``examples-upgraded``, ``classify.py`` ->
``classify-upgraded.py``, named after the real folder however the path was given: ``..``, ``.``, a
link), never over it nor inside it: it is built in a staging folder beside the target and renamed
into place only when complete (:mod:`caffetool.fsio`), so a failure (a full disk) leaves nothing
half-written and the user's files are only ever read. Each file is handled by its kind:

* ``.py``: Python 2 to 3 (:mod:`caffetool.upgrade.python2`), read in the encoding it declares and
  written back in it, with its BOM and line endings;
* ``.ipynb``: the same for each code cell (:mod:`caffetool.upgrade.ipynb`);
* ``.prototxt`` and ``.caffemodel``: Caffe's own upgrade tools (:mod:`caffetool.upgrade.protos`);
* anything else: copied as it is.

The walk trusts nothing in the project (:mod:`caffetool.upgrade.projecttree`): what is not a
regular file is not read, links stay links, and a file that cannot be read or converted is copied
unchanged or left out, and named in the report either way. ``set_mode_gpu()`` is left as it is (the
code is the user's), and noted where the installed engine has no GPU build. Python files and
notebooks are converted in worker processes where a project has many
(:mod:`caffetool.upgrade.convertpool`); the copy is written here, in the walk's order.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import stat
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from caffetool import fsio
from caffetool.engine.locate import EngineInfo
from caffetool.errors import CaffetoolError, ConfigError
from caffetool.upgrade import convertpool, ipynb, projecttree, protos, python2, sourcetext
from caffetool.upgrade.projecttree import UnreadableEntry, shown

REPORT = "UPGRADE-REPORT.txt"
SUFFIX = "-upgraded"
GPU_CALL = "set_mode_gpu"
NOUNS = {"net": ("net", "nets"), "solver": ("solver", "solvers"), "weights": ("weights file", "weights files")}
CONVERTED = (".py", ".ipynb")
LEFT_AS_IT_WAS = ("file left as it was", "files left as they were")
WRITE_FIXES = {errno.ENOSPC: "free some space there, or pass --out with a folder on another disk",
               errno.ENAMETOOLONG: "pass --out with a shorter path"}


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


@dataclass(frozen=True)
class Conversion:
    """One Python file or notebook converted, as the parent writes it: ``data`` is the new file
    (None: copy the original unchanged), ``notes`` the report's lines for it in order, ``kind`` what it
    counts as, ``gpu_call`` whether its code calls ``set_mode_gpu()``, ``unreadable`` why it could not
    be read (then nothing else is set)."""

    data: bytes | None = None
    mode: int = 0
    notes: tuple[ReportLine, ...] = ()
    kind: tuple[str, str] = LEFT_AS_IT_WAS
    gpu_call: bool = False
    unreadable: str = ""


@dataclass
class UpgradeReport:
    """What the upgrade did, file by file; ``report_name`` is the report's file in a copied folder
    (``UPGRADE-REPORT.txt``, numbered where the project has a file of that name)."""

    source: Path
    target: Path
    entries: list[ReportLine] = field(default_factory=list)
    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    report_name: str = REPORT

    def count(self, one: str, many: str) -> None:
        """One more of a kind of file, named ``one`` or ``many`` in the summary."""
        self.counts[(one, many)] = self.counts.get((one, many), 0) + 1

    def add(self, path: str, line: int, what: str, changed: bool) -> None:
        self.entries.append(ReportLine(path, line, what, changed))

    def summary(self) -> list[str]:
        changes = sum(e.changed for e in self.entries)
        checks = sum(not e.changed for e in self.entries)
        by_name = sorted(self.counts.items(), key=lambda kind: kind[0][1])
        kinds = ", ".join(f"{n} {one if n == 1 else many}" for (one, many), n in by_name)
        return [f"Upgraded {shown(self.source)} into {shown(self.target)}: {kinds or 'no files'}",
                f"{_times(changes, 'change')} made, {_times(checks, 'place')} to check"]

    def text(self) -> str:
        lines = [*self.summary(), ""]
        lines += [str(e) for e in self.entries if not e.changed]
        if any(not e.changed for e in self.entries):
            lines.append("")
        lines += [str(e) for e in self.entries if e.changed]
        return "\n".join(lines) + "\n"


def default_target(source: Path) -> Path:
    """``examples`` -> ``examples-upgraded``; ``lenet.ipynb`` -> ``lenet-upgraded.ipynb`` (of the
    real path: ``..`` is named after the folder it is)."""
    source = Path(os.path.realpath(source))
    if not source.name:
        raise ConfigError(f"{shown(source)} has no name to name its copy after, and the whole file system is no "
                          "project: pass a project folder (caffetool upgrade ~/old-project), or --out DIR")
    if source.is_dir():
        return source.with_name(source.name + SUFFIX)
    return source.with_name(source.stem + SUFFIX + source.suffix)


def upgrade(source: Path, target: Path | None, engine: EngineInfo | None) -> UpgradeReport:
    """Write the upgraded copy of ``source`` (a folder or one file) to ``target`` and return the report.

    ``engine`` runs Caffe's upgrade tools; without one, nets and weights are copied as they are and
    the report says how to upgrade them. A failure to write the copy raises CaffetoolError naming the
    folder, with nothing of the copy left behind.
    """
    source, target = _checked(Path(source), target)
    report = UpgradeReport(source, target)
    gpu_engine = engine is not None and not engine.cpu_only
    try:
        with _building(target, single=not source.is_dir()) as partial:
            if source.is_dir():
                _folder(source, partial, engine, gpu_engine, report)
            else:
                _single(source, partial / source.name, target.name, engine, gpu_engine, report)
    except OSError as e:
        fix = WRITE_FIXES.get(e.errno, "pass --out with a folder that can be written")
        raise CaffetoolError(f"cannot write the copy in {shown(target.parent)}: {e.strerror or e}; {fix} (nothing "
                             "was written)") from None
    return report


def _checked(source: Path, target: Path | None) -> tuple[Path, Path]:
    """The real paths of ``source`` and of the copy's ``target``, or ConfigError saying why not."""
    try:
        mode = os.stat(source).st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise ConfigError(f"{shown(source.absolute())} does not exist: pass a folder, a .py script or a .ipynb "
                          "notebook") from None
    except OSError as e:
        raise ConfigError(f"{shown(source)} cannot be read ({e.strerror or e}): pass a folder, a .py script or a "
                          ".ipynb notebook that can be read") from None
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        raise ConfigError(f"{shown(source)} is not a regular file ({projecttree.kind_of(mode)}): pass a folder, a .py "
                          "script or a .ipynb notebook")
    real = Path(os.path.realpath(source))
    target = Path(target).absolute() if target else default_target(real)
    if target.exists() or target.is_symlink():
        raise ConfigError(f"{shown(target)} exists: remove it, or pass --out with another path (the upgrade never "
                          "writes over files)")
    target = Path(os.path.realpath(target))
    if stat.S_ISDIR(mode) and target.is_relative_to(real):
        raise ConfigError(f"--out {shown(target)} is inside {shown(real)}: the copy goes beside the project, not "
                          "into it")
    if not target.parent.is_dir():
        raise ConfigError(f"{shown(target.parent)} is not a folder: create it, or pass --out with a path in an "
                          "existing one")
    return real, target


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
            os.rename(next(built.iterdir()), target)
        else:
            fsio.move_into_place(built, target, staging, CaffetoolError)


def _folder(source: Path, partial: Path, engine: EngineInfo | None, gpu_engine: bool, report: UpgradeReport) -> None:
    """Every entry of the project into ``partial``; what cannot be read is named and left out. The
    Python files and notebooks are converted first in line (in workers, where there are many) and
    written as the walk reaches them."""
    try:
        entries = list(projecttree.walk(source))
    except UnreadableEntry as e:
        raise ConfigError(f"{e}: pass a folder that can be read") from None
    sources = [(e.path, shown(e.relative)) for e in entries if e.kind == "file" and _converted_kind(e.path)]
    with contextlib.closing(convertpool.in_order(convert_file, sources)) as conversions:
        for entry in entries:
            done = next(conversions) if entry.kind == "file" and _converted_kind(entry.path) else None
            _entry(entry, partial / entry.relative, engine, gpu_engine, report, done)
    report.report_name = _free_name(partial)
    (partial / report.report_name).write_text(report.text(), encoding="utf-8")


def _entry(entry: projecttree.ProjectEntry, out: Path, engine: EngineInfo | None, gpu_engine: bool,
           report: UpgradeReport, done: Conversion | None) -> None:
    name = shown(entry.relative)
    if entry.kind == "folder":
        out.mkdir()
    elif entry.kind == "link":
        out.symlink_to(entry.link_to)
        report.count("link kept", "links kept")
        if entry.note:
            report.add(name, 0, entry.note, False)
    elif entry.kind == "skipped":
        report.add(name, 0, entry.note, False)
        report.count("entry not copied", "entries not copied")
    else:
        try:
            _one(entry.path, out, name, engine, gpu_engine, report, done)
        except UnreadableEntry as e:
            out.unlink(missing_ok=True)
            report.add(name, 0, f"{e}: not copied", False)
            report.count("entry not copied", "entries not copied")


def _single(source: Path, out: Path, name: str, engine: EngineInfo | None, gpu_engine: bool,
            report: UpgradeReport) -> None:
    try:
        done = convert_file(source, shown(name)) if _converted_kind(source) else None
        _one(source, out, shown(name), engine, gpu_engine, report, done)
    except UnreadableEntry as e:
        raise ConfigError(f"{shown(source)}: {e}; nothing was written") from None


def _one(path: Path, out: Path, name: str, engine: EngineInfo | None, gpu_engine: bool, report: UpgradeReport,
         done: Conversion | None) -> None:
    if done is not None:
        _write_converted(path, out, name, gpu_engine, report, done)
    elif path.suffix.lower() in (".prototxt", ".caffemodel"):
        _caffe(path, out, name, engine, report)
    else:
        projecttree.copy_file(path, out)
        report.count("other file copied", "other files copied")


def _converted_kind(path: Path) -> bool:
    return path.suffix.lower() in CONVERTED


def _write_converted(path: Path, out: Path, name: str, gpu_engine: bool, report: UpgradeReport,
                     done: Conversion) -> None:
    """``done`` (:func:`convert_file`'s) written to ``out`` and into the report."""
    if done.unreadable:
        raise UnreadableEntry(done.unreadable)
    if done.data is None:
        projecttree.copy_file(path, out)
    else:
        out.write_bytes(done.data)
        os.chmod(out, done.mode)
    report.entries.extend(done.notes)
    report.count(*done.kind)
    if done.gpu_call and not gpu_engine:
        report.add(name, 0, "calls caffe.set_mode_gpu(): the installed engine has no GPU build, so Caffe will "
                   "fail there; use caffe.set_mode_cpu(), or build a GPU engine (caffetool engine.install --cuda)",
                   False)


def convert_file(path: Path, name: str) -> Conversion:
    """The Python file or notebook ``path`` (named ``name`` in the report) read and converted, not
    written: this runs in worker processes (:mod:`caffetool.upgrade.convertpool`). A ``.py`` file is
    read in the encoding it declares and its conversion stored the same way
    (:func:`caffetool.upgrade.sourcetext.decode_source`); a notebook is JSON, UTF-8."""
    try:
        data, status = projecttree.read_file(path)
    except UnreadableEntry as e:
        return Conversion(unreadable=str(e))
    notebook = path.suffix.lower() == ".ipynb"
    try:
        if notebook:
            text, stored = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n"), None
        else:
            text, stored = sourcetext.decode_source(data)
    except UnicodeDecodeError:
        return _left(name, "not UTF-8 text: copied unchanged" if notebook else
                     "not text in its declared encoding (PEP 263's coding line, else UTF-8): copied unchanged")
    try:
        new, notes, sources = _converted(text, notebook, name, path)
        written = new.encode("utf-8") if stored is None else sourcetext.encode_source(new, stored)
    except ConfigError as e:
        return _left(name, str(e).removeprefix(f"{name}: "))
    except UnicodeEncodeError as e:
        return _left(name, f"converted, but the result cannot be stored in the file's declared encoding, "
                     f"{e.encoding}: copied unchanged; convert it by hand")
    kind = ("notebook", "notebooks") if notebook else ("Python file", "Python files")
    return Conversion(written, stat.S_IMODE(status.st_mode), tuple(notes), kind, any(calls_gpu(s) for s in sources))


def _left(name: str, why: str) -> Conversion:
    return Conversion(notes=(ReportLine(name, 0, why, False),))


def _converted(text: str, notebook: bool, name: str, path: Path) -> tuple[str, list[ReportLine], list[str]]:
    """The file as Python 3, the report's lines for it and its code (a notebook's cells, with
    IPython's lines set aside). ``path`` is the real file, where 2to3 looks for the modules beside it
    (``import x`` of a sibling becomes ``from . import x``)."""
    if notebook:
        new, cell_notes, sources = ipynb.convert(text, name)
        notes = [ReportLine(f"{name} (cell {c.cell})" if c.cell else name, c.note.line, c.note.what, c.note.changed)
                 for c in cell_notes]
        return new, notes, [ipynb.mask(s)[0] for s in sources]
    new, notes = python2.convert(text, name, path=path)
    return new, [ReportLine(name, n.line, n.what, n.changed) for n in notes], [new]


def calls_gpu(source: str) -> bool:
    """Whether ``source`` calls ``set_mode_gpu(``: its tokens, so that comments and strings that
    mention it do not count; tokens up to a line Python cannot read are still looked at."""
    tokens: list[tokenize.TokenInfo] = []
    with contextlib.suppress(tokenize.TokenError, SyntaxError):
        tokens.extend(tokenize.generate_tokens(io.StringIO(source).readline))
    return any(t.type == tokenize.NAME and t.string == GPU_CALL and after.string == "(" and before.string != "def"
               for before, t, after in zip(tokens[:1] + tokens, tokens, tokens[1:]))


def _caffe(path: Path, out: Path, name: str, engine: EngineInfo | None, report: UpgradeReport) -> None:
    if engine is None:
        _unchanged(path, out, name, "copied unchanged: no engine to upgrade it with (caffetool engine.install)", report)
        return
    done = protos.upgrade(engine, path, name)
    if done.upgraded:
        out.write_bytes(done.written)
        os.chmod(out, stat.S_IMODE(os.stat(path).st_mode))
        said = f" ({'; '.join(done.said)})" if done.said else ""
        report.add(name, 0, f"{done.kind} upgraded by Caffe's tool{said}", True)
        one, many = NOUNS[done.kind]
        report.count(f"{one} upgraded", f"{many} upgraded")
    elif done.kind is None:
        why = f" ({'; '.join(done.said)})" if done.said else ""
        what = "not Caffe weights Caffe can read" if path.suffix.lower() == ".caffemodel" else \
            "not a net or solver Caffe can parse"
        _unchanged(path, out, name, f"{what}{why}: copied unchanged", report)
    elif done.said:
        _unchanged(path, out, name, f"{done.kind} copied unchanged: {'; '.join(done.said)}", report)
    else:
        projecttree.copy_file(path, out)
        one, many = NOUNS[done.kind]
        report.count(f"{one} already current", f"{many} already current")


def _unchanged(path: Path, out: Path, name: str, why: str, report: UpgradeReport) -> None:
    projecttree.copy_file(path, out)
    report.add(name, 0, why, False)
    report.count(*LEFT_AS_IT_WAS)


def _free_name(folder: Path) -> str:
    """``REPORT``, or ``UPGRADE-REPORT.N.txt`` where the project has its own file of that name."""
    name, n = REPORT, 0
    while os.path.lexists(folder / name):
        n += 1
        name = f"{Path(REPORT).stem}.{n}.txt"
    return name


def _times(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
