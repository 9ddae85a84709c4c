"""A Jupyter notebook's code cells through :mod:`caffetool.upgrade.python2`, everything else kept.

The cells of a notebook share one namespace (BVLC's ``01-learning-lenet`` sets ``niter`` in one
cell and divides by it in another), so they are converted as one source, the cells joined with a
marker comment, and split again; a notebook whose cells do not parse together is converted cell by
cell. IPython's own syntax (``%matplotlib inline``, ``%%time``, ``!data/mnist/get_mnist.sh``,
``x = !ls``) is not Python: those lines are set aside before and put back after, unchanged. The
notebook's JSON is read and written as nbformat 4 stores it (its outputs kept); a Python 2
``kernelspec`` becomes ``python3``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace

from caffetool.errors import ConfigError
from caffetool.upgrade import python2

IPYTHON_LINE = re.compile(r"^\s*(?:[%!?]|\w+\s*=\s*[%!])|\?\s*$")
MARK = "# caffetool-upgrade-cell-{}"
PYTHON3_KERNEL = {"name": "python3", "display_name": "Python 3", "language": "python"}


@dataclass(frozen=True)
class CellNote:
    """A :class:`python2.Note` of one code cell (numbered from 1, as Jupyter shows cells)."""

    cell: int
    note: python2.Note


def convert(text: str, name: str) -> tuple[str, list[CellNote], list[str]]:
    """The notebook ``text`` with its code cells as Python 3, what was done, by cell and line, and the
    code cells' new sources (for checks of the code, without reading the notebook again)."""
    try:
        notebook = json.loads(text)
        cells = notebook["cells"]
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"{name}: not a Jupyter notebook of nbformat 4 (no 'cells' list); it was "
                          "copied unchanged (open and save it in Jupyter to update an older one)") from None
    code = [(i, c) for i, c in enumerate(cells, 1) if c.get("cell_type") == "code"]
    sources = ["".join(c.get("source", "")) for _, c in code]
    notes: list[CellNote] = []
    try:
        converted = _together(sources, [i for i, _ in code], name, notes)
    except ConfigError:
        notes.clear()
        converted = [_one(source, i, name, notes) for (i, _), source in zip(code, sources)]
    for (_, cell), source, new in zip(code, sources, converted):
        if new != source:
            cell["source"] = new.splitlines(keepends=True)
    spec = notebook.setdefault("metadata", {}).get("kernelspec", {})
    if str(spec.get("name", "")).startswith("python2"):
        notebook["metadata"]["kernelspec"] = dict(PYTHON3_KERNEL)
        notes.append(CellNote(0, python2.Note(0, "kernelspec: python2 -> python3", True)))
    return json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", notes, converted


def _together(sources: list[str], numbers: list[int], name: str, notes: list[CellNote]) -> list[str]:
    """The cells converted as one source (one namespace for the division's names)."""
    masked, kept = zip(*(mask(s) for s in sources)) if sources else ((), ())
    joined, starts = "", []
    for n, source in enumerate(masked):
        joined += MARK.format(n) + "\n"
        starts.append(joined.count("\n"))
        joined += source + ("" if source.endswith("\n") or not source else "\n")
    new, found = python2.convert(joined, name)
    parts = re.split(r"^# caffetool-upgrade-cell-\d+\n", new, flags=re.M)[1:]
    if len(parts) != len(sources):
        raise ConfigError(f"{name}: its cells could not be told apart after conversion")
    for note in found:
        cell = max((k for k, start in enumerate(starts) if start < note.line), default=0)
        notes.append(CellNote(numbers[cell], replace(note, line=note.line - starts[cell])))
    return [_unmask(_ending(part, source), lines) for part, source, lines in zip(parts, sources, kept)]


def _one(source: str, number: int, name: str, notes: list[CellNote]) -> str:
    masked, kept = mask(source)
    try:
        new, found = python2.convert(masked, f"{name}, cell {number}")
    except ConfigError as e:
        notes.append(CellNote(number, python2.Note(1, f"left as it was: {e}", False)))
        return source
    notes.extend(CellNote(number, n) for n in found)
    return _unmask(new, kept)


def mask(source: str) -> tuple[str, list[str]]:
    """``source`` with IPython's lines (and the lines a trailing backslash continues them onto)
    replaced by numbered placeholders, ``pass`` so that a block stays a block; and those lines."""
    kept: list[str] = []
    lines = []
    continued = False
    for line in source.split("\n"):
        if continued or IPYTHON_LINE.search(line):
            if continued:
                kept[-1] += "\n" + line
            else:
                indent = line[: len(line) - len(line.lstrip())]
                lines.append(f"{indent}pass  # caffetool-ipython-{len(kept)}")
                kept.append(line)
            continued = line.endswith("\\")
        else:
            lines.append(line)
    return "\n".join(lines), kept


def _unmask(source: str, kept: list[str]) -> str:
    return re.sub(r"^[ \t]*pass  # caffetool-ipython-(\d+)$", lambda m: kept[int(m.group(1))], source, flags=re.M)


def _ending(part: str, source: str) -> str:
    """``part`` ending as its cell's source did (a cell's last line has no newline in nbformat)."""
    return part if source.endswith("\n") else part.removesuffix("\n")
