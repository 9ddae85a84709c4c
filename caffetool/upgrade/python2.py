"""Python 2 source to Python 3 with fissix, 2to3's maintained fork, plus caffetool's own fixers.

fissix (https://github.com/jreese/fissix) carries lib2to3 and its 53 fixers past lib2to3's removal
from Python 3.13; it is what Bowler and other codemod tools build on. It parses Python 2 *and* 3
into a concrete tree that keeps every comment and space, so a converted script reads as its author
wrote it. Its default fixers do what 2to3 does (``print``, ``xrange``, ``dict.iteritems()``,
``except E, e``, ``raw_input``, ``urllib2``, ...). Added here, as fissix fixers
(:mod:`caffetool.upgrade.fixers`): the ``string`` module's functions that Python 3 removed, and
pycaffe's helpers renamed since 2014. Division is :mod:`caffetool.upgrade.division`'s, after these.

Every fixer that changed a line is recorded with it, and what a fixer could not convert is kept
with its line, for the report; every note, the division and bytes passes' too, names the line of
the file as it was. 2to3's method fixers take any ``X.sort(f)`` for ``list.sort(cmp)`` and any
``X.next()`` for an iterator's: not made where ``X`` is a module the file imports (``np.sort(a)``),
nor a ``.sort()`` whose argument is no function (numpy's ``a.sort(0)``) (:data:`RULES`).

Python 3 files pass through unharmed. A source Python 3 itself parses is read with 2to3's
print-function grammar (``2to3 -p``), so ``print("loss", 0.5)`` stays one call. One that also shows
a construct only Python 3 has (:data:`PYTHON3_ONLY`: an f-string, ``print(x, file=f)``, an
annotation, ``nonlocal``, ``async``, a keyword-only argument, ``match``, ...) is Python 3: only
the fixes of what Python 3 no longer has are made in it (``xrange``, ``d.iteritems()``,
``string.join``, pycaffe's old helpers), not those that rewrite valid Python 3 as well
(:data:`PYTHON3_RULES`), and its ``/`` is not touched, so with nothing to fix it comes out byte for
byte. A Python 3 file whose syntax fissix's grammar does not know (``match``) is left as it is,
with a note. Where caffetool's own fixers leave a line that is not Python 3, the file is converted
again with 2to3's fixers alone and the report names the fixer and the line: never worse than 2to3.

Files are read and written back as :mod:`caffetool.upgrade.sourcetext` stores them. One
RefactoringTool serves every file of a process: building one (its patterns compiled) takes longer
than converting a script. A file past :data:`BOUNDS` is not given to the parser, and one nested
deeper than Python's recursion allows is named, both copied unchanged.
"""

from __future__ import annotations

import ast
import functools
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fissix import pygram, refactor
from fissix.pgen2 import token
from fissix.pgen2.parse import ParseError
from fissix.pgen2.tokenize import TokenError

from caffetool.errors import ConfigError
from caffetool.upgrade import bytesflow, division

TWO_TO_THREE = tuple(refactor.get_fixers_from_package("fissix.fixes"))
OURS = tuple(refactor.get_fixers_from_package("caffetool.upgrade.fixers"))
FIXERS = (*TWO_TO_THREE, *OURS)
_LINE = re.compile(r"Line (\d+): (.*)")
# Strings and comments, whose brackets are not code; and the brackets that are.
_BRACKETS = re.compile(r'''("""|\'\'\')(?:\\[\s\S]|[^\\])*?\1|"(?:\\[\s\S]|[^"\\\n])*"'''
                       r"""|'(?:\\[\s\S]|[^'\\\n])*'|#[^\n]*|[(\[{]|[)\]}]""")
_OPENS = {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}
_LOCK = threading.Lock()  # a tool is reused: one conversion at a time


@dataclass(frozen=True)
class Bounds:
    """The largest source given to the converter; a larger one is copied unchanged and named.

    ``size``: fissix reads about 100,000 characters of dense code a second here (a 270,000-character
    list literal took 2.5 s), so a million keeps one file to seconds; scripts people write are far
    smaller, and a larger ``.py`` is data a program wrote. ``line``: written code keeps its lines
    to a few hundred characters; a longer one is a literal a program wrote, which no fixer changes
    and where fissix's time goes. ``nesting``: brackets open at once; Python 3's own tokenizer
    refuses 200 levels (``too many nested parentheses``), and fissix's tree walks recurse a few
    frames a level against Python's limit of 1,000, so 100 is as deep as both take."""

    size: int = 1_000_000
    line: int = 20_000
    nesting: int = 100


BOUNDS = Bounds()


@dataclass(frozen=True)
class Note:
    """One line of the report: a change made (``changed``) or something left for a person."""

    line: int
    what: str
    changed: bool


@dataclass(frozen=True)
class Judgement:
    """What a source is, as read before conversion."""

    python3_syntax: bool  # Python 3 parses it (Python 2 may too: ``print(x)``)
    python3_only: str | None  # the first construct only Python 3 has, e.g. "an f-string (line 3)"


def _bounded(convert: Callable[..., tuple[str, list[Note]]]) -> Callable[..., tuple[str, list[Note]]]:
    """``convert`` with Python's recursion and memory limits, hit inside fissix or :mod:`ast`, as
    ConfigError naming the file."""

    @functools.wraps(convert)
    def bounded(source: str, name: str, path: Path | None = None) -> tuple[str, list[Note]]:
        try:
            return convert(source, name, path)
        except RecursionError:
            raise ConfigError(f"{name}: nested too deeply to convert (past Python's recursion limit); it was copied "
                              "unchanged: split the nested expression into named parts, or convert it by hand") from None
        except MemoryError:
            raise ConfigError(f"{name}: too large to convert in this machine's memory; it was copied unchanged: "
                              "move its data into a file of its own (.npy, .json), or convert it by hand") from None

    return bounded


@_bounded
def convert(source: str, name: str, path: Path | None = None) -> tuple[str, list[Note]]:
    """``source`` (Python 2 or 3) as Python 3, and what was done to it, by line of ``source``.
    ``path``: where the file is, which 2to3's ``import`` fixer looks beside for the modules a
    package's file imports without a dot (``from sibling import f`` -> ``from .sibling import f``,
    only where an ``__init__.py`` makes the folder a package); without it, those imports are
    kept. ``name`` is the file as the report shows it. Raises ConfigError naming ``name`` and the
    line where it is Python of neither kind, or past :data:`BOUNDS`."""
    _within_bounds(source, name)
    text = source if source.endswith("\n") else source + "\n"
    # Fixers that add a line (``from functools import reduce``) shift the lines after it: the
    # passes below read the converted text, and their notes are given the original's lines.
    converted, notes, judged, original = _fixed(text, name, judge(text), path)
    if judged.python3_only:
        return _ended(source, converted), _ordered(notes)  # Python 3 already: its / and its str are its author's
    future = _converted_line(original, division.future_division_line(text))
    try:
        converted, divisions = division.floor_divisions(converted, future)
    except SyntaxError as e:
        raise ConfigError(f"{name}: line {original[(e.lineno or 1) - 1]}: not Python 3 after conversion "
                          f"({e.msg}); it was copied unchanged") from None
    notes += [Note(original[d.line - 1], d.reason, d.floor) for d in divisions if d.reason]
    converted, flows = bytesflow.bytes_flow(converted)
    notes += [Note(original[f.line - 1], f.what, f.changed) for f in flows]
    return _ended(source, converted), _ordered(notes)


def _ended(source: str, converted: str) -> str:
    """``converted`` without the final newline where ``source`` had none."""
    return converted if source.endswith("\n") else converted.removesuffix("\n")


def _ordered(notes: list[Note]) -> list[Note]:
    return sorted(set(notes), key=lambda n: (n.line, not n.changed, n.what))


def _original_lines(tree) -> list[int]:
    """For each line of the converted ``tree`` (and one past its end), the line of the source it
    came from. Every token of the source keeps its line as the fixers move and copy it, and those
    a fixer adds have none: a line takes the line of its first token from the source; one with
    none (an added import, a comment, inside a string of many lines) counts back from the next
    line that has one, never before the line above it."""
    starts: dict[int, int] = {}
    line = 1
    for leaf in tree.leaves():
        line += leaf.prefix.count("\n")
        if leaf.lineno and leaf.value:
            starts.setdefault(line, leaf.lineno)
        line += leaf.value.count("\n")
    original = [0] * (line + 1)
    following = max(starts.values(), default=0) + line - max(starts, default=0) + 1  # past the last token
    for j in range(line, 0, -1):
        following = starts.get(j, following - 1)
        original[j - 1] = following
    original[line] = original[line - 1] + 1
    for j in range(1, line + 1):  # an added line counts back from the next: not before the line above it
        original[j] = max(original[j], original[j - 1], 1)
    original[0] = max(original[0], 1)
    return original


def _converted_line(original: list[int], line: int | None) -> int | None:
    """The first line of the converted text that comes from ``line`` of the original or after it."""
    return None if line is None else next((j + 1 for j, i in enumerate(original) if i >= line), None)


def judge(source: str) -> Judgement:
    """Whether ``source`` parses as Python 3, and the first construct in it only Python 3 has."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):  # ValueError: a NUL byte
        return Judgement(False, None)
    print_function = any(isinstance(n, ast.ImportFrom) and n.module == "__future__"
                         and any(a.name == "print_function" for a in n.names) for n in tree.body)
    for node in ast.walk(tree):
        found = PYTHON3_ONLY.get(type(node))
        if found and found[1](node, print_function):
            return Judgement(True, f"{found[0]} (line {node.lineno})")
    return Judgement(True, None)


def _annotated_or_keyword_only(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, _: bool) -> bool:
    arguments = node.args
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg]
    return bool(arguments.kwonlyargs or arguments.posonlyargs or getattr(node, "returns", None)
                or any(a is not None and a.annotation is not None for a in every))


def _python3_call(node: ast.Call, print_function: bool) -> bool:
    """``print(..., file=f)`` or ``print(a, b)`` without ``from __future__ import print_function``
    (Python 2 printed the tuple ``(a, b)``: not what anyone wrote that for), or ``super()``."""
    if not isinstance(node.func, ast.Name):
        return False
    if node.func.id == "print":
        return bool(node.keywords or len(node.args) > 1) and not print_function
    return node.func.id == "super" and not node.args and not node.keywords


def _always(*_: object) -> bool:
    return True


# Constructs that Python 2 does not parse: a source that has one is Python 3 (node type -> what it
# is called in the report, and the test of the node).
PYTHON3_ONLY: dict[type, tuple[str, Callable[..., bool]]] = {
    ast.JoinedStr: ("an f-string", _always),
    ast.Nonlocal: ("nonlocal", _always),
    ast.AsyncFunctionDef: ("async def", _always),
    ast.AsyncFor: ("async for", _always),
    ast.AsyncWith: ("async with", _always),
    ast.Await: ("await", _always),
    ast.YieldFrom: ("yield from", _always),
    ast.NamedExpr: ("an assignment expression (:=)", _always),
    ast.AnnAssign: ("a variable annotation", _always),
    ast.Match: ("a match statement", _always),
    ast.FunctionDef: ("an annotation or a keyword-only argument", _annotated_or_keyword_only),
    ast.Lambda: ("a keyword-only argument", _annotated_or_keyword_only),
    ast.Call: ("print() of several values or with keywords, or super() without arguments", _python3_call),
    ast.BinOp: ("the @ operator", lambda node, _: isinstance(node.op, ast.MatMult)),
    ast.Starred: ("a starred assignment", lambda node, _: isinstance(node.ctx, ast.Store)),
    ast.Raise: ("raise ... from", lambda node, _: node.cause is not None),
    ast.ClassDef: ("a class keyword (metaclass=...)", lambda node, _: bool(node.keywords)),
    ast.Dict: ("{**mapping}", lambda node, _: None in node.keys),
}


def _never(*_: object) -> bool:
    return False


# In a Python 3 file, which of a fixer's changes are made (fixer -> test of the node and its match);
# fixers not named here change only what Python 3 does not have. These rewrite valid Python 3 too:
# ``input()`` is Python 3's own (2to3 makes it ``eval(input())``); ``map``, ``filter``, ``zip``,
# ``range`` and ``d.keys()`` in Python 3 were written lazy on purpose (2to3 wraps them in
# ``list()``); a method named ``next`` is any method (2to3 renames it ``__next__``); ``import x``
# of a sibling is how a script imports it (2to3 makes it ``from . import x``, which a script cannot
# run); ``from __future__`` lines and ``u""`` prefixes are valid, and ``annotations`` matters;
# ``sorted(x, key=f,)`` needs no rewriting (fissix's fix_sorted is for Python 2's ``cmp``); a
# Python 2 module name inside ``try: ... except ImportError`` is a fallback, kept.
PYTHON3_RULES: dict[str, Callable[..., bool]] = {
    "input": _never,
    "map": _never,
    "filter": _never,
    "zip": _never,
    "next": _never,
    "import": _never,
    "future": _never,
    "xrange": lambda node, results: results["name"].value == "xrange",
    "dict": lambda node, results: results["method"][0].value.startswith(("iter", "view")),
    "unicode": lambda node, results: node.type == token.NAME,
    "sorted": lambda node, results: _positional_or_cmp(results.get("func_args") or results.get("func_arg") or []),
    "imports": lambda node, results: not _import_fallback(node),
    "imports2": lambda node, results: not _import_fallback(node),
    "urllib": lambda node, results: not _import_fallback(node),
}


def _import_fallback(node) -> bool:
    """Whether ``node`` is inside a ``try`` that catches ImportError: Python 3 code that also runs
    on Python 2 tries one module name and falls back to the other, as it should."""
    while node.parent is not None:
        node = node.parent
        if node.type == pygram.python_symbols.try_stmt and any(
                c.type == pygram.python_symbols.except_clause and "ImportError" in str(c) for c in node.children):
            return True
    return False


def _positional_or_cmp(arguments: list) -> bool:
    """Whether ``sorted()``'s or ``.sort()``'s arguments after the iterable are Python 2's: given by
    position, or a ``cmp=`` (Python 3's take ``key=`` and ``reverse=`` by keyword only)."""
    for argument in arguments:
        if argument.type == token.COMMA:
            continue
        if argument.type != pygram.python_symbols.argument or str(argument.children[0]).strip() == "cmp":
            return True
    return False


def _sorts_a_list(node, results, recorder: _Recorder) -> bool:
    """Whether a match of fix_sorted's ``X.sort(arg)`` can be Python 2's ``list.sort(cmp)``: not
    where ``X`` is a module the file imports (``np.sort(a)``, ``torch.sort(t)`` sort their
    argument), nor where the argument is plainly no function (``a.sort(0)``: numpy's axis)."""
    dot = next((i for i, c in enumerate(node.children) if c.type == pygram.python_symbols.trailer
                and str(c.children[-1]).strip() == "sort" and str(c.children[0]).strip() == "."), None)
    if dot is None:
        return True  # sorted(...)
    if _a_module(node.children[:dot], recorder):
        return False
    arguments = results.get("func_args") or results.get("func_arg") or []
    first = next((a for a in arguments if a.type != token.COMMA), None)
    return first is None or first.type not in _NO_FUNCTION


def _a_module(receiver: list, recorder: _Recorder) -> bool:
    """Whether the nodes ``receiver`` (``np``, ``numpy.linalg``) name a module the file imports."""
    return bool(receiver) and receiver[0].type == token.NAME and receiver[0].value in recorder.imported(receiver[0]) \
        and all(c.type == pygram.python_symbols.trailer and c.children[0].type == token.DOT for c in receiver[1:])


# Nodes that are never a function: numbers, strings, displays, arithmetic and comparisons.
_NO_FUNCTION = frozenset({token.NUMBER, token.STRING, pygram.python_symbols.atom, pygram.python_symbols.arith_expr,
                          pygram.python_symbols.term, pygram.python_symbols.comparison,
                          pygram.python_symbols.factor, pygram.python_symbols.not_test})


def _imported(root) -> frozenset[str]:
    """The names that the ``import`` statements of the file whose tree is ``root`` bind."""
    symbols = pygram.python_symbols
    names: set[str] = set()

    def bound(node) -> None:
        if node.type == token.NAME:
            names.add(node.value)
        elif node.type == symbols.dotted_name:
            names.add(node.children[0].value)
        elif node.type in (symbols.dotted_as_name, symbols.import_as_name):
            names.add(node.children[-1].value)
        elif node.type in (symbols.dotted_as_names, symbols.import_as_names):
            for child in node.children:
                bound(child)

    for node in root.pre_order():
        if node.type == symbols.import_name:
            bound(node.children[1])
        elif node.type == symbols.import_from:
            imported = [c for c in node.children if c.type == token.NAME and c.value == "import"][-1]
            for child in node.children[node.children.index(imported) + 1:]:
                bound(child)
    return frozenset(names)


OUR_LABELS = frozenset(name.rsplit(".", 1)[-1].removeprefix("fix_") for name in OURS)


class _FixerFailed(Exception):
    """One of caffetool's fixers raised on this input: the file is converted by 2to3's alone."""

    def __init__(self, label: str, line: int, error: Exception) -> None:
        super().__init__(label, line, error)
        self.label, self.line, self.error = label, line, error


class _Recorder:
    """What the fixers of one reused tool did to the file being converted now."""

    def __init__(self) -> None:
        self.notes: list[Note] = []
        self.python3 = False
        self.located = False
        self._imported = None

    def start(self, python3: bool, located: bool) -> None:
        self.notes = []
        self.python3 = python3
        self.located = located
        self._imported: frozenset[str] | None = None

    def imported(self, node) -> frozenset[str]:
        """The names bound by the imports of the file of ``node``, found once a file."""
        if self._imported is None:
            while node.parent is not None:
                node = node.parent
            self._imported = _imported(node)
        return self._imported


# In every file, which of a fixer's changes are made (fixer -> test of the node, its match and the
# file's recorder). fix_sorted takes any ``X.sort(arg)`` for Python 2's ``list.sort(cmp)``, and
# fix_next any ``X.next()`` for an iterator's, where ``X`` may be a module; 2to3's import fixer
# looks beside the file for the modules it imports, so needs where the file is.
RULES: dict[str, Callable[..., bool]] = {
    "sorted": _sorts_a_list,
    "next": lambda node, results, recorder: not _a_module(results.get("base") or [], recorder),
    "import": lambda node, results, recorder: recorder.located,
}


@functools.cache
def _tool(ours: bool) -> tuple[refactor.RefactoringTool, _Recorder]:
    """The RefactoringTool of 2to3's fixers (and caffetool's, with ``ours``), built once a process."""
    tool = refactor.RefactoringTool(list(FIXERS if ours else TWO_TO_THREE))
    recorder = _Recorder()
    for fixer in tool.pre_order + tool.post_order:
        fixer.transform = _recording(fixer, recorder)
    return tool, recorder


def _recording(fixer, recorder: _Recorder):
    """``fixer.transform`` that records the line of every change it makes, makes in a Python 3 file
    only what :data:`PYTHON3_RULES` allows, and names caffetool's fixer that raises."""
    transform = fixer.transform
    label = fixer.__class__.__module__.rsplit(".", 1)[-1].removeprefix("fix_")
    for_python3 = PYTHON3_RULES.get(label, _always)
    for_every_file = RULES.get(label, _always)

    def recorded(node, results):
        if (recorder.python3 and not for_python3(node, results)) or not for_every_file(node, results, recorder):
            return None
        before, prefix, line, parent = str(node), node.prefix, node.get_lineno(), node.parent
        try:
            new = transform(node, results)
        except Exception as e:
            if label in OUR_LABELS:
                raise _FixerFailed(label, line, e) from e
            raise
        # A fixer changes the node, returns its replacement, or puts one in its place itself (fix_next).
        replaced = parent is not None and node.parent is None
        if (new is not None and str(new) != before) or str(node) != before or replaced:
            recorder.notes.append(Note(line, f"{label}: {_short(before[len(prefix):])}", True))
        return new

    return recorded


def _refactor(source: str, name: str, judged: Judgement, ours: bool,
              path: Path | None) -> tuple[str, list[Note], list[int]]:
    """``source`` through fissix's fixers (and caffetool's, with ``ours``), with the notes and the
    original line of each line (:func:`_original_lines`). The fixers are told ``path`` as the
    file's name: 2to3's import fixer looks in its folder."""
    tool, recorder = _tool(ours)
    with _LOCK:
        recorder.start(judged.python3_only is not None, path is not None)
        tool.fixer_log.clear()  # the fixers hold this list itself
        # Python 3 syntax is read as 2to3 -p reads it: print is a function.
        tool.grammar = tool.driver.grammar = (pygram.python_grammar_no_print_statement if judged.python3_syntax
                                              else pygram.python_grammar)
        tree = tool.refactor_string(source, str(path) if path is not None else name)
        notes = [*recorder.notes,
                 *(Note(int(m.group(1)), m.group(2), False) for m in map(_LINE.match, tool.fixer_log) if m)]
    return str(tree), notes, _original_lines(tree)


def _fixed(text: str, name: str, judged: Judgement,
           path: Path | None) -> tuple[str, list[Note], Judgement, list[int]]:
    """``text`` through the fixers, its notes, and what it is (Python 3 where fissix cannot read it
    but Python 3 can). Where caffetool's fixers leave invalid Python 3, 2to3's alone are used."""
    try:
        converted, notes, original = _refactor(text, name, judged, True, path)
    except (ParseError, TokenError, IndentationError) as e:
        if not judged.python3_syntax:
            raise ConfigError(f"{name}: not Python 2 or 3 ({_where(e)}); it was copied unchanged") from None
        line = _line(e)
        return text, [Note(line, "Python 3 already, in syntax 2to3's grammar does not read: left as it was", False)], \
            Judgement(True, f"syntax 2to3 does not read (line {line})"), list(range(1, text.count("\n") + 2))
    except _FixerFailed as e:
        failed = [Note(e.line, f"{e.label}: caffetool's fixer failed here ({type(e.error).__name__}: {e.error}); the "
                       "file was converted by 2to3's fixers alone, without caffetool's: make its changes by hand", False)]
    else:
        # Only caffetool's fixers are checked here: what 2to3's leave invalid, 2to3 alone would too.
        ours = [n for n in notes if n.changed and n.what.split(":")[0] in OUR_LABELS]
        broken = _invalid(converted) if ours else None
        if broken is None:
            return converted, notes, judged, original
        at = [n for n in ours if n.line == broken.lineno] or ours
        failed = [Note(n.line, f"{n.what.split(':')[0]}: caffetool's fixer made this line invalid Python 3 "
                       f"({broken.msg}); the file was converted by 2to3's fixers alone, without caffetool's: make "
                       "its changes by hand", False) for n in at] or \
            [Note(broken.lineno or 0, f"invalid Python 3 after caffetool's fixers ({broken.msg}); the file was "
                  "converted by 2to3's fixers alone, without caffetool's", False)]
    plain, notes, original = _refactor(text, name, judged, False, path)
    broken = _invalid(plain)
    if broken is not None:
        raise ConfigError(f"{name}: line {broken.lineno}: not Python 3 after conversion ({broken.msg}); "
                          "it was copied unchanged")
    return plain, notes + failed, judged, original


def _invalid(source: str) -> SyntaxError | None:
    """Python 3's objection to ``source``, or None."""
    try:
        ast.parse(source)
    except SyntaxError as e:
        return e
    except ValueError as e:  # a NUL byte
        return SyntaxError(str(e))
    return None


def _within_bounds(source: str, name: str) -> None:
    """Raises ConfigError naming ``name`` where ``source`` is past :data:`BOUNDS`."""
    what_to_do = ("it was copied unchanged: move such data into a file of its own (.npy, .json) and upgrade the "
                  "rest, or convert it by hand")
    if len(source) > BOUNDS.size:
        raise ConfigError(f"{name}: {len(source):,} characters, more than the {BOUNDS.size:,} the converter takes "
                          f"(a file that large is data a program wrote); {what_to_do}")
    if len(source) > BOUNDS.line:
        lines = source.split("\n")
        longest = max(range(len(lines)), key=lambda i: len(lines[i]))
        if len(lines[longest]) > BOUNDS.line:
            raise ConfigError(f"{name}: line {longest + 1}: {len(lines[longest]):,} characters, more than the "
                              f"{BOUNDS.line:,} the converter takes in one line (a literal a program wrote); "
                              f"{what_to_do}")
    if sum(source.count(b) for b in "([{") >= BOUNDS.nesting:
        depth = 0
        for match in _BRACKETS.finditer(source):
            bracket = match.group()
            depth += _OPENS.get(bracket, 0)  # strings and comments count 0
            if depth > BOUNDS.nesting:
                line = source.count("\n", 0, match.start()) + 1
                raise ConfigError(f"{name}: line {line}: brackets nested more than {BOUNDS.nesting} deep, more "
                                  "than the converter takes (Python 3 itself refuses 200); it was copied unchanged: "
                                  "split the expression into named parts, or convert it by hand")


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


def _line(error: Exception) -> int:
    """The line a parse error names, or 0."""
    found = re.match(r"line (\d+)", _where(error))
    return int(found.group(1)) if found else 0
