"""Python 2 source to Python 3 with fissix, 2to3's maintained fork, plus caffetool's own fixers.

fissix (https://github.com/jreese/fissix) carries lib2to3 and its 53 fixers past lib2to3's removal
from Python 3.13; it is what Bowler and other codemod tools build on. It parses Python 2 *and* 3
into a concrete tree that keeps every comment and space, so a converted script reads as its author
wrote it. Its default fixers do what 2to3 does (``print``, ``xrange``, ``dict.iteritems()``,
``except E, e``, ``raw_input``, ``urllib2``, ...). Added here, as fissix fixers
(:mod:`caffetool.upgrade.fixers`): the ``string`` module's functions that Python 3 removed, and
pycaffe's helpers renamed since 2014. Division is :mod:`caffetool.upgrade.division`'s, after these.

Every fixer that changed a line is recorded with it, and what a fixer could not convert is kept
with its line, for the report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fissix import refactor
from fissix.pgen2.parse import ParseError
from fissix.pgen2.tokenize import TokenError

from caffetool.errors import ConfigError
from caffetool.upgrade import division

FIXERS = (*refactor.get_fixers_from_package("fissix.fixes"),
          *refactor.get_fixers_from_package("caffetool.upgrade.fixers"))
_LINE = re.compile(r"Line (\d+): (.*)")


@dataclass(frozen=True)
class Note:
    """One line of the report: a change made (``changed``) or something left for a person."""

    line: int
    what: str
    changed: bool


def convert(source: str, name: str) -> tuple[str, list[Note]]:
    """``source`` (Python 2 or 3) as Python 3, and what was done to it, by line. Raises ConfigError
    naming ``name`` and the line where it is Python of neither kind."""
    tool = refactor.RefactoringTool(list(FIXERS))
    notes: list[Note] = []
    for fixer in tool.pre_order + tool.post_order:
        fixer.transform = _recording(fixer, notes)
    try:
        tree = tool.refactor_string(source if source.endswith("\n") else source + "\n", name)
    except (ParseError, TokenError, IndentationError) as e:
        raise ConfigError(f"{name}: not Python 2 or 3 ({_where(e)}); it was copied unchanged") from None
    converted = str(tree)
    notes += [Note(int(m.group(1)), m.group(2), False) for m in map(_LINE.match, tool.fixer_log) if m]
    try:
        converted, divisions = division.floor_divisions(converted)
    except SyntaxError as e:
        raise ConfigError(f"{name}: line {e.lineno}: not Python 3 after conversion ({e.msg}); "
                          "it was copied unchanged") from None
    for d in divisions:
        if d.floor:
            notes.append(Note(d.line, "/ -> // (both sides integers, as Python 2 divided them)", True))
        elif not d.float_side:
            notes.append(Note(d.line, "/ is true division now: where Python 2 divided integers here, use //", False))
    if not source.endswith("\n"):
        converted = converted.removesuffix("\n")
    return converted, sorted(set(notes), key=lambda n: (n.line, not n.changed, n.what))


def _recording(fixer, notes: list[Note]):
    """``fixer.transform`` that records the line of every change it makes."""
    transform = fixer.transform
    label = fixer.__class__.__module__.rsplit(".", 1)[-1].removeprefix("fix_")

    def recorded(node, results):
        before, line = str(node), node.get_lineno()
        new = transform(node, results)
        if (new is not None and str(new) != before) or str(node) != before:
            notes.append(Note(line, f"{label}: {_short(before)}", True))
        return new

    return recorded


def _short(code: str, width: int = 60) -> str:
    text = " ".join(code.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _where(error: Exception) -> str:
    context = getattr(error, "context", None)
    if context and len(context) > 1 and isinstance(context[1], tuple):
        return f"line {context[1][0]}"
    args = getattr(error, "args", ())
    if len(args) > 1 and isinstance(args[1], tuple):
        return f"line {args[1][0]}"
    return str(error)
