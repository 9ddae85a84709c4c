"""A Jupyter notebook's code cells through :mod:`caffetool.upgrade.python2`, everything else kept.

The cells of a notebook share one namespace (BVLC's ``01-learning-lenet`` sets ``niter`` in one
cell and divides by it in another), so they are converted as one source, the cells joined with a
marker comment, and split again; a notebook whose cells do not parse together is converted cell by
cell. IPython's own syntax is not Python: an escape at the start of a logical line (``%matplotlib
inline``, ``!data/mnist/get_mnist.sh``, ``?len``, ``x = !ls``), help at the end of one (``np.zeros?``,
``caffe.Net??``; a ``?`` in a comment or a string is not help) and a cell magic that runs another
language (``%%bash``) are set aside before and put back after, unchanged. A line of Python is told
from IPython's the way IPython tells it, by its tokens: strings and comments are skipped, and a
bracket or a backslash carries a logical line over several lines.

Notebooks of nbformat 3 and older (IPython 2 and before, the notebooks of Caffe's first years: cells
in ``worksheets``, code in ``input``) are converted to nbformat 4 by nbformat itself, as Jupyter does on
opening them, then upgraded like any other; that needs the ``notebook`` extra. A notebook is read
as leniently as Jupyter reads it: only what the conversion itself reads must be of the kind
Jupyter's schema gives it. The JSON is written back in its own layout (key order, indent, escapes),
so what the upgrade did not change (outputs, metadata, markdown, raw cells, attachments) is kept as
it was, and a notebook with nothing to change is copied byte for byte. A Python 2 ``kernelspec``
becomes ``python3``; a notebook of another language is copied unchanged.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from caffetool import extras
from caffetool.errors import ConfigError
from caffetool.upgrade import python2

CURRENT = 4  # the nbformat the upgrade writes
ESCAPE = re.compile(r"\s*(?:[%!?]|[\w.,\[\]() ]+=\s*[%!])")  # at the start of a logical line
CELL_MAGIC = re.compile(r"\s*%%(\w+)")  # only a cell's first line
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug"})  # their body is Python
MARK = "# caffetool-upgrade-cell-{}"
PLACEHOLDER = "pass  # caffetool-ipython-{}"
MORE = "# caffetool-ipython-{}+"  # the second and later lines of what one placeholder holds
PYTHON3_KERNEL = {"name": "python3", "display_name": "Python 3", "language": "python"}
OPENING, CLOSING = "([{", ")]}"


@dataclass(frozen=True)
class CellNote:
    """A :class:`python2.Note` of one code cell (numbered from 1, as Jupyter shows cells)."""

    cell: int
    note: python2.Note


def convert(text: str, name: str) -> tuple[str, list[CellNote], list[str]]:
    """The notebook ``text`` with its code cells as Python 3, what was done, by cell and line, and the
    code cells' new sources (for checks of the code, without reading the notebook again). Raises
    ConfigError naming ``name`` and the reason where it is not a Python notebook nbformat can read."""
    notebook, version = _read(text, name)
    code = [(i, c) for i, c in enumerate(notebook["cells"], 1) if c.get("cell_type") == "code"]
    sources = ["".join(c.get("source", "")) for _, c in code]
    masks = [mask(s) for s in sources]
    notes: list[CellNote] = []
    try:
        converted = _together(sources, masks, [i for i, _ in code], name, notes)
    except ConfigError:
        notes.clear()
        converted = [_one(source, masked, i, name, notes) for (i, _), source, masked in zip(code, sources, masks)]
    notes += [CellNote(i, python2.Note(line, "left as it was: it holds half a UTF-16 pair (an unpaired \\ud800-\\udfff "
                                            "escape), which Python cannot compile", False))
              for (i, _), source in zip(code, sources) if (line := _surrogate_line(source))]
    changed = version < CURRENT
    if changed:
        notes.insert(0, CellNote(0, python2.Note(0, f"nbformat {version} -> {CURRENT} (nbformat's conversion, "
                                                    "as Jupyter's on opening it)", True)))
    for (_, cell), source, new in zip(code, sources, converted):
        if new != source:
            cell["source"] = new if isinstance(cell.get("source"), str) else new.splitlines(keepends=True)
            changed = True
    changed = _python3_kernel(notebook, version, notes) or changed
    notes.sort(key=lambda n: n.cell != 0)  # the notebook's own first, then its cells' in order
    if not changed:
        return text, notes, converted
    return _written(notebook, text, version, name), notes, converted


def _read(text: str, name: str) -> tuple[dict[str, Any], int]:
    """``text`` as an nbformat 4 notebook's JSON, and the nbformat it was written in."""
    where = f"{name}: not a notebook nbformat can read"
    body = text.removeprefix("\ufeff")
    if not body.strip():
        raise ConfigError(f"{where}: the file is empty; it was copied unchanged")
    try:
        data = json.loads(body)
    except RecursionError:
        raise ConfigError(f"{where}: its JSON nests deeper than Python can read; it was copied unchanged") from None
    except ValueError as e:
        raise ConfigError(f"{where}: not JSON ({e}); it was copied unchanged") from None
    version = _version(data)
    if isinstance(version, str):
        raise ConfigError(f"{where}: {version}; it was copied unchanged")
    language = _language(data)
    if version < CURRENT:
        data = _from_old(body, version, name)
    if wrong := _wrong_shape(data):
        raise ConfigError(f"{where}: {wrong}; it was copied unchanged")
    if language and "python" not in language.lower():
        raise ConfigError(f"{name}: a notebook of {language}, not Python (its metadata says so): only Python "
                          "is upgraded; it was copied unchanged")
    return data, version


def _version(data: Any) -> int | str:
    """The notebook's nbformat, or what is wrong with it. One without an nbformat but with a list of
    cells is read as nbformat 4 (nbformat would take it for 1, whose cells are of another shape)."""
    if not isinstance(data, dict):
        return f"the top level is {_kind(data)}, not an object"
    version = data.get("nbformat")
    if version is None and isinstance(data.get("cells"), list):
        return CURRENT
    if not isinstance(version, int) or isinstance(version, bool):
        return f"nbformat is {_kind(version)}, not a version number such as 4"
    if not 1 <= version <= CURRENT:
        return f"nbformat {version} is not a version nbformat reads (1 to {CURRENT})"
    return version


def _from_old(text: str, version: int, name: str) -> dict[str, Any]:
    """A notebook of nbformat 1 to 3 as nbformat 4, converted by nbformat itself, with cell ids made
    from the cells (nbformat draws them at random, and the same notebook should upgrade the same)."""
    try:
        import nbformat  # noqa: PLC0415 - the notebook extra, needed only here
    except ImportError:
        raise ConfigError(f"{name}: a notebook of nbformat {version}, which only nbformat converts to {CURRENT}, "
                          f"and it is not installed here: {extras.install_command('notebook')}; it was copied "
                          "unchanged") from None
    try:
        with _quiet(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            book = json.loads(json.dumps(nbformat.reads(text, as_version=CURRENT)))
    except Exception as e:  # noqa: BLE001 - nbformat fails on a malformed notebook with any of a dozen kinds
        reason = (str(e).strip().splitlines() or [""])[0][:160]
        raise ConfigError(f"{name}: not a notebook nbformat can read: nbformat {version}, {type(e).__name__}"
                          f"{': ' + reason if reason else ''}; it was copied unchanged") from None
    for number, cell in enumerate(book.get("cells", [])):
        if isinstance(cell, dict) and "id" in cell:
            seed = f"{number}:{json.dumps(cell.get('source'))}".encode()
            cell["id"] = hashlib.sha256(seed).hexdigest()[:8]
    return book


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """nbformat logs each schema error it finds while converting; Jupyter opens such notebooks, and so
    does the upgrade, so the log is not shown."""
    from traitlets.log import get_logger  # noqa: PLC0415 - nbformat's own dependency

    logger = get_logger()
    logger = getattr(logger, "logger", logger)
    was = logger.disabled
    logger.disabled = True
    try:
        yield
    finally:
        logger.disabled = was


def _wrong_shape(data: dict[str, Any]) -> str | None:
    """What of the fields the conversion reads is of another kind than Jupyter's schema says; None
    where they are of theirs. Fields it does not read (outputs, attachments, a missing execution
    count) are not checked: Jupyter opens a notebook with those wrong, and they are written back as
    they were."""
    metadata = data.get("metadata", {})
    if not isinstance(metadata, dict):
        return f"metadata is {_kind(metadata)}, not an object"
    for key in ("kernelspec", "language_info"):
        if key in metadata and not isinstance(metadata[key], dict):
            return f"metadata.{key} is {_kind(metadata[key])}, not an object"
    cells = data.get("cells")
    if not isinstance(cells, list):
        return "it has no 'cells' array" if cells is None else f"cells is {_kind(cells)}, not an array"
    for number, cell in enumerate(cells):
        if not isinstance(cell, dict):
            return f"cells[{number}] is {_kind(cell)}, not an object"
        if "cell_type" in cell and not isinstance(cell["cell_type"], str):
            return f"cells[{number}].cell_type is {_kind(cell['cell_type'])}, not a string"
        source = cell.get("source", "")
        if not isinstance(source, (str, list)):
            return f"cells[{number}].source is {_kind(source)}, not a string or an array of strings"
        if isinstance(source, list) and (line := next((s for s in source if not isinstance(s, str)), "")) != "":
            return f"cells[{number}].source[{source.index(line)}] is {_kind(line)}, not a string"
    return None


def _kind(value: Any) -> str:
    """A JSON value's kind, as a user reading the file would name it."""
    kinds = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return kinds.get(type(value), "a number")


def _language(data: dict[str, Any]) -> str:
    """The notebook's language as its metadata names it (nbformat 4), or its first code cell (3 and
    older, whose cells name theirs and which nbformat's conversion drops); "" where none is named."""
    metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    spec, info = metadata.get("kernelspec"), metadata.get("language_info")
    named = [(spec or {}).get("language") if isinstance(spec, dict) else None,
             (info or {}).get("name") if isinstance(info, dict) else None]
    worksheets = data.get("worksheets") if isinstance(data.get("worksheets"), list) else []
    cells = [c for w in worksheets if isinstance(w, dict) and isinstance(w.get("cells"), list) for c in w["cells"]]
    named += [c.get("language") for c in cells if isinstance(c, dict) and c.get("cell_type") == "code"][:1]
    return next((n for n in named if isinstance(n, str) and n), "")


def _python3_kernel(notebook: dict[str, Any], version: int, notes: list[CellNote]) -> bool:
    """Name Python 3's kernel where the notebook names Python 2's, or (converted from nbformat 3 or
    older, which had no kernelspec) none."""
    metadata = notebook.setdefault("metadata", {}) if version < CURRENT else notebook.get("metadata", {})
    spec = metadata.get("kernelspec")
    if spec is None and version < CURRENT:
        said = "none"
    elif isinstance(spec, dict) and str(spec.get("name", "")).startswith("python2"):
        said = "python2"
    else:
        return False
    metadata["kernelspec"] = dict(PYTHON3_KERNEL)
    notes.append(CellNote(0, python2.Note(0, f"kernelspec: {said} -> python3", True)))
    return True


def _written(notebook: dict[str, Any], text: str, version: int, name: str) -> str:
    """``notebook`` as JSON in the layout of ``text``: its indent (or none), its escapes of non-ASCII
    characters or none, its byte order mark and final newline. One converted from an older nbformat is
    written as Jupyter saves it, by nbformat's writer."""
    body = text.removeprefix("\ufeff")
    layout = re.match(r"\{\r?\n([ \t]*)", body)
    indent = layout.group(1) if layout else (None if "\n" not in body.strip() else 1)
    try:
        if version < CURRENT:
            return _saved(notebook)
        out = json.dumps(notebook, indent=indent, ensure_ascii=body.isascii())
        if _surrogate_line(out):  # JSON holds half a UTF-16 pair only as an escape
            out = json.dumps(notebook, indent=indent, ensure_ascii=True)
    except RecursionError:
        raise ConfigError(f"{name}: not a notebook nbformat can read: its JSON nests deeper than Python can "
                          "write; it was copied unchanged") from None
    bom = "\ufeff" if text.startswith("\ufeff") else ""
    return bom + out + ("\n" if text.endswith("\n") else "")


def _saved(notebook: dict[str, Any]) -> str:
    """``notebook`` as Jupyter saves one: nbformat's writer (keys sorted, indent 1, sources as lists of
    lines, the conversion's ``orig_nbformat`` dropped)."""
    import nbformat  # noqa: PLC0415 - only a notebook nbformat converted comes here

    book = nbformat.from_dict(notebook)
    with _quiet(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = nbformat.writes(book)
        if _surrogate_line(out):
            out = nbformat.writes(book, ensure_ascii=True)
    return out + "\n"


def _together(sources: list[str], masks: list[tuple[str, list[str]]], numbers: list[int], name: str,
              notes: list[CellNote]) -> list[str]:
    """The cells converted as one source (one namespace for the division's names)."""
    joined, starts = "", []
    for n, (masked, _) in enumerate(masks):
        joined += MARK.format(n) + "\n"
        starts.append(joined.count("\n"))
        joined += masked + ("" if masked.endswith("\n") or not masked else "\n")
    new, found = python2.convert(joined, name)
    head, *parts = re.split(r"^# caffetool-upgrade-cell-\d+\n", new, flags=re.M)
    if len(parts) != len(sources):
        raise ConfigError(f"{name}: its cells could not be told apart after conversion")
    if parts and head.strip():  # an import a fixer added at the very top (``from functools import reduce``)
        parts[0] = head + parts[0]
    for note in found:
        cell = max((k for k, start in enumerate(starts) if start < note.line), default=0)
        what = _shown(note.what, masks[cell][1])
        notes.append(CellNote(numbers[cell], replace(note, line=max(note.line - starts[cell], 0), what=what)))
    return [_unmask(_ending(part, source), kept) for part, source, (_, kept) in zip(parts, sources, masks)]


def _one(source: str, masked: tuple[str, list[str]], number: int, name: str, notes: list[CellNote]) -> str:
    text, kept = masked
    where = f"{name}, cell {number}"
    try:
        new, found = python2.convert(text, where)
    except ConfigError as e:
        said = str(e).removeprefix(f"{where}: ").removesuffix("; it was copied unchanged")
        notes.append(CellNote(number, python2.Note(1, f"left as it was: {said}", False)))
        return source
    notes.extend(CellNote(number, replace(n, what=_shown(n.what, kept))) for n in found)
    return _unmask(new, kept)


def _shown(what: str, kept: list[str]) -> str:
    """A note's text as the user's cell reads: the placeholders of IPython's lines as those lines, and
    the cells' markers (which a fixer's text takes in with a statement's leading comments) gone,
    whole or cut short by the note's ``...``."""
    what = re.sub(r"# caffetool-upgrade-cell-\d+ ?|# caffetool-ipython-\d+\+ ?", "", what)
    what = re.sub(r"pass # caffetool-ipython-(\d+)",
                  lambda m: " ".join(kept[int(m[1])].split()) if int(m[1]) < len(kept) else "", what)
    cut = re.search(r"(pass )?# ?([a-z-]*)(\d*)\+?\.\.\.$", what)
    if cut and any(word.startswith(cut[2]) and (not cut[3] or word == cut[2])
                   for word in ("caffetool-upgrade-cell-", "caffetool-ipython-")):
        placeholder = cut[1] and cut[2].startswith("caffetool-i")  # else the ``pass`` may be the user's
        what = what[: cut.start() if placeholder else cut.start() + len(cut[1] or "")].rstrip() + "..."
    return " ".join(what.split())


def mask(source: str) -> tuple[str, list[str]]:
    """``source`` with IPython's lines replaced by numbered placeholders, ``pass`` so that a block
    stays a block (and a comment for each further line a placeholder stands for, so that every line
    keeps its number); and those lines, one entry per placeholder."""
    lines = source.split("\n")
    first = CELL_MAGIC.match(source)
    if first and first[1] not in PYTHON_CELL_MAGICS or _surrogate_line(source):  # %%bash, %%html: not Python
        return _placeholder(lines, 0), [source]
    out: list[str] = []
    kept: list[str] = []
    start = 0
    while start < len(lines):
        end, ipython = _logical_line(lines, start)
        group = lines[start: end + 1]
        if ipython:
            out += _placeholder(group, len(kept)).split("\n")
            kept.append("\n".join(group))
        else:
            out += group
        start = end + 1
    return "\n".join(out), kept


def _surrogate_line(source: str) -> int:
    """The first line of ``source`` holding half a UTF-16 pair (JSON's ``\\ud800``), which no Python
    compiles, or 0."""
    try:
        source.encode("utf-8")
    except UnicodeEncodeError as e:
        return source.count("\n", 0, e.start) + 1
    return 0


def _placeholder(group: list[str], number: int) -> str:
    indent = group[0][: len(group[0]) - len(group[0].lstrip())]
    return "\n".join([indent + PLACEHOLDER.format(number)] + [indent + MORE.format(number)] * (len(group) - 1))


def _logical_line(lines: list[str], start: int) -> tuple[int, bool]:
    """The last line of the logical line that begins at ``lines[start]``, and whether it is IPython's:
    an escape at its start (carried on by backslashes), or help (``?`` or ``??``) ending its code."""
    if ESCAPE.match(lines[start]):
        end = start
        while lines[end].rstrip("\r").endswith("\\") and end + 1 < len(lines):
            end += 1
        return end, True
    quote, depth, last = "", 0, ""
    for end in range(start, len(lines)):
        quote, depth, last, continued = _scan(lines[end].rstrip("\r"), quote, depth, last)
        if not (quote or depth or continued):
            return end, last == "?"
    return len(lines) - 1, last == "?"


def _scan(line: str, quote: str, depth: int, last: str) -> tuple[str, int, str, bool]:
    """Python's tokens over one physical line, so far as telling IPython's lines needs them: the string
    still open at its end (its quote), the brackets still open, the last character of code outside
    strings and comments, and whether a backslash carries the line on."""
    i, continued = 0, False
    while i < len(line):
        char = line[i]
        if quote:
            if char == "\\":
                i += 2
            elif line.startswith(quote, i):
                i, quote, last = i + len(quote), "", char
            else:
                i += 1
            continue
        if char == "#":
            break
        if char in "'\"":
            quote = line[i: i + 3] if line[i: i + 3] in ("'''", '"""') else char
            i += len(quote)
            continue
        depth = max(depth + (char in OPENING) - (char in CLOSING), 0)
        continued = char == "\\" and i == len(line) - 1
        if not char.isspace():
            last = char
        i += 1
    if len(quote) == 1 and not line.endswith("\\"):
        quote = ""  # a one-line string left open is Python's error to report, not a string going on
    return quote, depth, last, continued


def _unmask(source: str, kept: list[str]) -> str:
    source = re.sub(r"\n[ \t]*# caffetool-ipython-\d+\+$", "", source, flags=re.M)
    return re.sub(r"^[ \t]*pass  # caffetool-ipython-(\d+)$", lambda m: kept[int(m.group(1))], source, flags=re.M)


def _ending(part: str, source: str) -> str:
    """``part`` ending as its cell's source did (a cell's last line has no newline in nbformat)."""
    return part if source.endswith("\n") else part.removesuffix("\n")
