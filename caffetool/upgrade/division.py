"""Python 2's ``/`` in Python 3: floor division where Python 2 divided integers.

Python 2 divided two ints to an int; Python 3's ``/`` always gives a float (PEP 238), so code that
used the quotient as an index or a count breaks (BVLC's ``01-learning-lenet``:
``test_interval = niter / 10`` then ``test_acc[it / test_interval]`` indexes with a float). 2to3
leaves ``/`` alone, since in general it cannot know the operands' types. Here a quotient becomes
``//`` where both operands are integers by construction, which keeps Python 2's result exactly:

* an int literal; ``len(...)``, ``int(...)`` or ``ord(...)`` (the builtins, not a name the code
  binds itself); an element of a ``.shape`` (``x.shape[0]``, ``h, w = img.shape[:2]``); a ``%``,
  ``//``, ``+``, ``-``, ``*`` or ``/`` of integers, a ``-``/``+``/``~`` of one;
* a name whose every binding, wherever it is made (``global`` and ``nonlocal`` rebindings from
  other functions included), is one of those (``x = 25``, ``x += 1``, a ``for`` over ``range(...)``
  or the index of ``enumerate(...)``), resolved as Python 3 resolves it: function, enclosing
  functions, module, builtins; a class body sees its own names, its methods and comprehensions do
  not. So ``niter = 250; test_interval = niter / 10`` makes both integers.

A quotient used directly as a subscript, a slice bound or an argument of ``range()`` (or in ``+``,
``-``, ``*``, ``%`` arithmetic that is) also becomes ``//`` unless a side is a float by construction:
a float there is a TypeError in Python 3, so the Python 2 code that ran divided integers (or integer
arrays) there. A dict keyed by floats and indexed with a quotient of floats is the one case this
reading gets wrong.

Every other ``/`` keeps Python 3's true division; where neither side is a float by construction (a
float literal, ``float(...)``, arithmetic with one, a name bound only to those) the report names its
line for a person to check, as it does a ``/`` inside an f-string, which is left alone. A module with
``from __future__ import division`` (in a notebook, the cells from the one that has it on) already
divided truly: nothing there changes or is reported. A name that ``exec()``, ``globals()`` or a
module's or class body's ``locals()`` could rebind is unknown, and so is one that a ``from m import
*`` could: bound before the import, or not bound at all (the builtins ``len``, ``range``, ...
included). The source is read with :mod:`ast` and :mod:`tokenize` and changed only at the
operator's own characters, so comments and layout stay as they were.
"""

from __future__ import annotations

import ast
import bisect
import contextlib
import io
import re
import tokenize
from dataclasses import dataclass
from typing import NamedTuple

INT_CALLS = frozenset({"len", "int", "ord"})  # not round(): Python 2's returned a float
INT_OPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.Div)
INTEGERS = "/ -> // (both sides integers, as Python 2 divided them)"
INDEX = "/ -> // (an index, slice bound or range() argument needs an integer)"
CHECK = "/ is true division now: where Python 2 divided integers here, use //"


@dataclass(frozen=True)
class Division:
    """One ``/`` (or ``/=``): where it is (line, and character column of the operator), whether it
    became ``//``, and what the report says of it."""

    line: int
    col: int
    floor: bool  # now ``//``
    float_side: bool  # one side is a float by construction: true division was meant
    reason: str = ""  # INTEGERS or INDEX where it became ``//``, CHECK where a person should look, else ""


def future_division_line(source: str) -> int | None:
    """The line of the first top-level ``from __future__ import division`` in ``source`` (Python 2
    or 3), read from its tokens since 2to3 removes the import before the division is judged."""
    statement: list[tokenize.TokenInfo] = []
    depth = 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(source, newline=None).readline):
            if token.type == tokenize.INDENT:
                depth += 1
            elif token.type == tokenize.DEDENT:
                depth -= 1
            elif token.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
                if _imports_true_division([t.string for t in statement if t.type == tokenize.NAME]):
                    return statement[0].start[0]
                statement = []
            elif token.type not in (tokenize.NL, tokenize.COMMENT) and depth == 0:
                statement.append(token)
    except (tokenize.TokenError, SyntaxError):  # Python 2 that Python 3 cannot tokenize past here
        pass
    return None


def _imports_true_division(names: list[str]) -> bool:
    """``names`` (a statement's) are ``from __future__ import ... division ...`` (``as`` names not counted)."""
    if names[:3] != ["from", "__future__", "import"]:
        return False
    return any(name == "division" and names[i - 1] != "as" for i, name in enumerate(names) if i >= 3)


def floor_divisions(source: str, true_division_from: int | None = None) -> tuple[str, list[Division]]:
    """``source`` with ``/`` made ``//`` where Python 2 divided integers, and every division found.
    From line ``true_division_from`` on (the original's ``from __future__ import division``, which
    2to3 removed) nothing changes. Raises SyntaxError where ``source`` is not Python 3."""
    tree = ast.parse(source)
    future = [node.lineno for node in tree.body if isinstance(node, ast.ImportFrom)
              and node.module == "__future__" and any(a.name == "division" for a in node.names)]
    true_from = min([*future, *([true_division_from] if true_division_from else [])], default=None)
    found = _Analysis(tree)
    # Lines as Python counts them (splitlines() also splits at \f, \v, \u2028, ...), each with its own ending.
    parts = re.split(r"(\r\n|\r|\n)", source)
    lines, endings = parts[0::2], [*parts[1::2], ""]
    positions = _slash_tokens(source)
    divisions = []
    for judged in found.judged():
        left_end = _char_position(lines, judged.left.end_lineno, judged.left.end_col_offset)
        right_start = _char_position(lines, judged.right.lineno, judged.right.col_offset)
        # The operator is the first ``/`` after its left operand (past a closing bracket or a line
        # break), before its right one; none there (inside an f-string) means it is left alone.
        i = bisect.bisect_left(positions, left_end)
        at = positions[i] if i < len(positions) and positions[i] < right_start else None
        line, col = at or left_end
        floor = bool(judged.reason) and at is not None
        reason = judged.reason if floor else "" if judged.float_side else CHECK
        if true_from is not None and line >= true_from:
            floor, reason = False, ""
        divisions.append(Division(line, col, floor, judged.float_side, reason))
    for d in sorted(divisions, key=lambda d: (d.line, d.col), reverse=True):
        if d.floor:
            text = lines[d.line - 1]
            lines[d.line - 1] = text[:d.col] + "/" + text[d.col:]  # "/" -> "//", "/=" -> "//="
    return "".join(map(str.__add__, lines, endings)), sorted(divisions, key=lambda d: (d.line, d.col))


def _slash_tokens(source: str) -> list[tuple[int, int]]:
    """Where every ``/`` and ``/=`` operator token starts: (line, character column), in order."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source, newline=None).readline))
    except (tokenize.TokenError, SyntaxError):
        return []
    return sorted(tok.start for tok in tokens if tok.type == tokenize.OP and tok.string in ("/", "/="))


def _char_position(lines: list[str], line: int, byte_col: int) -> tuple[int, int]:
    """ast's (line, UTF-8 byte offset) as tokenize's (line, character offset)."""
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    return line, len(text.encode("utf-8")[:byte_col].decode("utf-8", errors="replace"))


class _Judged(NamedTuple):
    left: ast.AST
    right: ast.AST
    float_side: bool
    reason: str  # INTEGERS, INDEX, or "" where it stays true division


class _LoopIndex(NamedTuple):
    """What a ``for`` binds from ``range(...)``, or as the index of ``enumerate(...)``: an integer
    where that call is the builtin's."""

    call: ast.Call
    builtin: str


class _Binding(NamedTuple):
    value: ast.AST | _LoopIndex | None  # None: bound to something not judged here
    scope: _Scope  # where ``value`` is evaluated
    line: int


BUILTIN, UNKNOWN = "builtin", "unknown"  # a name no scope binds: Python's own, or anything (exec, import *)


class _Scope:
    """A module, function (``def``, ``lambda``), class body or comprehension: the names it binds."""

    def __init__(self, kind: str, parent: _Scope | None) -> None:
        self.kind, self.parent = kind, parent
        self.written: dict[str, list[_Binding]] = {}  # bindings written here, before global/nonlocal
        self.bindings: dict[str, list[_Binding]] = {}  # the bindings of this scope's own names
        self.globals: set[str] = set()
        self.nonlocals: set[str] = set()
        self.dynamic = False  # exec(), globals(), locals() (or, in a module, ``import *``) may bind any name here

    def owner(self, name: str, module: _Scope) -> _Scope:
        """The scope that a binding of ``name`` written here binds it in."""
        if self.kind != "module" and name in self.globals:
            return module
        scope = self.parent if name in self.nonlocals else None
        while scope is not None and scope.kind != "module":
            if scope.kind == "function" and name in scope.written and name not in scope.nonlocals:
                return module if name in scope.globals else scope
            scope = scope.parent
        return self

    def resolve(self, name: str, module: _Scope) -> _Scope | str:
        """The scope whose ``name`` a read of ``name`` here gets, as Python 3 resolves it: a class
        body's names are seen by the body itself, not by its methods or comprehensions."""
        scope, first = self, True
        while scope.kind != "module":
            if name in scope.globals:
                scope = module
                break
            if name in scope.bindings and (first or scope.kind != "class"):
                return scope
            if first and scope.dynamic:
                return UNKNOWN
            scope, first = scope.parent, False
        if name in scope.bindings:
            return scope
        return UNKNOWN if scope.dynamic else BUILTIN


class _Analysis(ast.NodeVisitor):
    """The scopes of a module and what each name is bound to; then each division judged."""

    def __init__(self, tree: ast.Module) -> None:
        self.module = self.scope = _Scope("module", None)
        self.scopes = [self.module]
        self.valued: set[ast.Name] = set()  # targets bound with their value already
        self.star_lines: list[int] = []
        self.divisions: list[tuple[ast.AST, ast.AST, ast.AST, _Scope]] = []  # (node, left, right, scope)
        self.index_parents: list[tuple[ast.AST, _Scope]] = []  # subscripts and calls, with their scope
        self.visit(tree)
        for scope in self.scopes:
            for name, bindings in scope.written.items():
                scope.owner(name, self.module).bindings.setdefault(name, []).extend(bindings)
        self._unknowable()
        self.ints = self._greatest(self.is_int)
        self.floats = self._greatest(self.is_float)

    # Scopes and bindings.

    @contextlib.contextmanager
    def _entered(self, kind: str):
        outer = self.scope
        self.scope = _Scope(kind, outer)
        self.scopes.append(self.scope)
        try:
            yield
        finally:
            self.scope = outer

    def _bind(self, name: str, value: ast.AST | _LoopIndex | None, line: int, into: _Scope | None = None) -> None:
        (into or self.scope).written.setdefault(name, []).append(_Binding(value, self.scope, line))

    def _assign(self, target: ast.AST, value: ast.AST | _LoopIndex | None, line: int) -> None:
        """Bind the names of ``target`` to what each gets of ``value`` (pairwise from a tuple, an
        integer from a ``.shape``); :meth:`visit_Name` binds the others to None."""
        if isinstance(target, ast.Name) and value is not None:
            self._bind(target.id, value, line)
            self.valued.add(target)
        elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, ast.AST):
            if _is_shape(value):
                for element in target.elts:
                    self._assign(element, ast.Constant(0), line)
            elif isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts) and not any(
                    isinstance(e, ast.Starred) for e in [*value.elts, *target.elts]):
                for element, part in zip(target.elts, value.elts):
                    self._assign(element, part, line)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)) and node not in self.valued:
            self._bind(node.id, None, node.lineno)  # ``del n`` too: n is this scope's, and unknown

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        for target in node.targets:
            self._assign(target, node.value, node.lineno)
            self.visit(target)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.visit(node.annotation)
        if node.value is not None:
            self.visit(node.value)
        self._assign(node.target, node.value, node.lineno)
        self.visit(node.target)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.visit(node.value)
        if isinstance(node.target, ast.Name):
            self._assign(node.target, ast.BinOp(ast.Name(node.target.id, ast.Load()), node.op, node.value),
                         node.lineno)
        self.visit(node.target)
        if isinstance(node.op, ast.Div):
            self.divisions.append((node, node.target, node.value, self.scope))

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        into = self.scope
        while into.kind == "comprehension":  # a walrus in a comprehension binds in the scope around it
            into = into.parent
        self._bind(node.target.id, node.value, node.lineno, into)
        self.valued.add(node.target)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self.visit(node.iter)
        self._loop(node.target, node.iter, node.lineno)
        self.visit(node.target)
        for statement in [*node.body, *node.orelse]:
            self.visit(statement)

    visit_AsyncFor = visit_For

    def _loop(self, target: ast.AST, iterated: ast.AST, line: int) -> None:
        if not (isinstance(iterated, ast.Call) and isinstance(iterated.func, ast.Name)):
            return
        if iterated.func.id == "range":
            self._assign(target, _LoopIndex(iterated, "range"), line)
        elif iterated.func.id == "enumerate" and isinstance(target, ast.Tuple) and len(target.elts) == 2:
            self._assign(target.elts[0], _LoopIndex(iterated, "enumerate"), line)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for outside in [*node.decorator_list, node.args, *([node.returns] if node.returns else [])]:
            self.visit(outside)  # evaluated where the function is defined: decorators, defaults, annotations
        self._bind(node.name, None, node.lineno)
        with self._entered("function"):
            self._parameters(node.args, node.lineno)
            for statement in node.body:
                self.visit(statement)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.visit(node.args)
        with self._entered("function"):
            self._parameters(node.args, node.lineno)
            self.visit(node.body)

    def _parameters(self, args: ast.arguments, line: int) -> None:
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if arg is not None:
                self._bind(arg.arg, None, line)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for outside in [*node.decorator_list, *node.bases, *node.keywords]:
            self.visit(outside)
        self._bind(node.name, None, node.lineno)
        with self._entered("class"):
            for statement in node.body:
                self.visit(statement)

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp,
                       *results: ast.AST) -> None:
        self.visit(node.generators[0].iter)  # the first iterable is evaluated outside
        with self._entered("comprehension"):
            for i, generator in enumerate(node.generators):
                if i:
                    self.visit(generator.iter)
                self._loop(generator.target, generator.iter, node.lineno)
                self.visit(generator.target)
                for condition in generator.ifs:
                    self.visit(condition)
            for result in results:
                self.visit(result)

    def visit_ListComp(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp) -> None:
        self._comprehension(node, node.elt)

    visit_SetComp = visit_GeneratorExp = visit_ListComp

    def visit_DictComp(self, node: ast.DictComp) -> None:
        self._comprehension(node, node.key, node.value)

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name == "*":
                self.star_lines.append(node.lineno)
            else:
                self._bind((alias.asname or alias.name).split(".")[0], None, node.lineno)

    visit_ImportFrom = visit_Import

    def visit_Global(self, node: ast.Global) -> None:
        self.scope.globals.update(node.names)

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.scope.nonlocals.update(node.names)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self._bind(node.name, None, node.lineno)
        self.generic_visit(node)

    def _capture(self, node: ast.AST) -> None:
        """``case`` patterns' names: ``case [x, *rest]``, ``case {**rest}``, ``case P() as x``."""
        for name in (getattr(node, "name", None), getattr(node, "rest", None)):
            if name:
                self._bind(name, None, node.lineno)
        self.generic_visit(node)

    visit_MatchAs = visit_MatchStar = visit_MatchMapping = _capture

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.Div):
            self.divisions.append((node, node.left, node.right, self.scope))
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        self.index_parents.append((node, self.scope))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        self.index_parents.append((node, self.scope))
        called = node.func.id if isinstance(node.func, ast.Name) else None
        if (called == "exec" and not _own_namespace(node)) or called == "globals":
            self.module.dynamic = True  # exec("n = 2.5"), globals()["n"] = 2.5 rebind the module's names
            self.scope.dynamic = self.scope.dynamic or (called == "exec" and self.scope.kind == "class")
        elif called in ("locals", "vars") and not node.args and self.scope.kind in ("module", "class"):
            self.scope.dynamic = True  # there, the namespace itself
        self.generic_visit(node)

    def _unknowable(self) -> None:
        """Bindings this reading cannot see: any of a namespace that exec(), globals() or locals()
        may write, of a module name bound before a star import; then any name a star import may bring."""
        last_star = max(self.star_lines, default=0)
        for scope in self.scopes:
            for bindings in scope.bindings.values():
                if scope.dynamic or (scope is self.module and min(b.line for b in bindings) < last_star):
                    bindings.append(_Binding(None, scope, 0))
        self.module.dynamic = self.module.dynamic or bool(self.star_lines)

    # Judging.

    def _greatest(self, judge) -> set[tuple[_Scope, str]]:
        """The largest set of names whose every binding passes ``judge`` given that they all do (so
        ``k = 7; k /= 2`` and a loop's ``i += 1`` stay integers): all candidates, less any that fail,
        and then any whose bindings read a name that failed."""
        names = {(scope, name) for scope in self.scopes for name, bindings in scope.bindings.items()
                 if all(b.value is not None for b in bindings)}
        readers: dict[tuple[_Scope, str], set[tuple[_Scope, str]]] = {}
        for scope, name in names:
            for b in scope.bindings[name]:
                for read in ast.walk(b.value.call if isinstance(b.value, _LoopIndex) else b.value):
                    if isinstance(read, ast.Name):
                        readers.setdefault((b.scope.resolve(read.id, self.module), read.id), set()).add((scope, name))
        waiting = list(names)
        while waiting:
            symbol = waiting.pop()
            scope, name = symbol
            if symbol in names and not all(judge(b.value, b.scope, names) for b in scope.bindings[name]):
                names.discard(symbol)
                waiting.extend(readers.get(symbol, ()))
        return names

    def _held(self, name: str, scope: _Scope, names: set[tuple[_Scope, str]]) -> bool:
        holder = scope.resolve(name, self.module)
        return isinstance(holder, _Scope) and (holder, name) in names

    def _builtin(self, func: ast.AST, scope: _Scope, builtins: frozenset[str] | set[str]) -> bool:
        return isinstance(func, ast.Name) and func.id in builtins and scope.resolve(func.id, self.module) == BUILTIN

    def is_int(self, node: ast.AST | _LoopIndex, scope: _Scope, ints: set[tuple[_Scope, str]]) -> bool:
        if isinstance(node, _LoopIndex):
            return self._builtin(node.call.func, scope, {node.builtin})
        if isinstance(node, ast.Constant):
            return type(node.value) is int
        if isinstance(node, ast.Name):
            return self._held(node.id, scope, ints)
        if isinstance(node, ast.BinOp):
            return isinstance(node.op, INT_OPS) and self.is_int(node.left, scope, ints) \
                and self.is_int(node.right, scope, ints)
        if isinstance(node, ast.UnaryOp):
            return isinstance(node.op, (ast.USub, ast.UAdd, ast.Invert)) and self.is_int(node.operand, scope, ints)
        if isinstance(node, ast.IfExp):
            return self.is_int(node.body, scope, ints) and self.is_int(node.orelse, scope, ints)
        if isinstance(node, ast.Subscript):
            return _is_shape(node.value) and not isinstance(node.slice, ast.Slice)
        if isinstance(node, ast.Call):
            return self._builtin(node.func, scope, INT_CALLS) and len(node.args) == 1 and not node.keywords
        return False

    def is_float(self, node: ast.AST | _LoopIndex, scope: _Scope, floats: set[tuple[_Scope, str]]) -> bool:
        """A float (or complex) by construction: a literal, ``float(...)``, arithmetic with one, a
        name bound only to those."""
        if isinstance(node, ast.Constant):
            return type(node.value) in (float, complex)
        if isinstance(node, ast.Name):
            return self._held(node.id, scope, floats)
        if isinstance(node, ast.Call):
            return self._builtin(node.func, scope, {"float", "complex"})
        if isinstance(node, ast.BinOp):
            return self.is_float(node.left, scope, floats) or self.is_float(node.right, scope, floats)
        if isinstance(node, ast.UnaryOp):
            return isinstance(node.op, (ast.USub, ast.UAdd)) and self.is_float(node.operand, scope, floats)
        if isinstance(node, ast.IfExp):
            return self.is_float(node.body, scope, floats) and self.is_float(node.orelse, scope, floats)
        return False

    def judged(self) -> list[_Judged]:
        """Every division: whether a side is a float by construction, and why it becomes ``//`` if it does."""
        indices: set[ast.AST] = set()
        for node, scope in self.index_parents:
            for place in self._index_places(node, scope):
                self._mark_index(place, scope, indices)
        judged = []
        for node, left, right, scope in self.divisions:
            float_side = self.is_float(left, scope, self.floats) or self.is_float(right, scope, self.floats)
            if self.is_int(left, scope, self.ints) and self.is_int(right, scope, self.ints):
                reason = INTEGERS
            elif node in indices and not float_side:
                reason = INDEX
            else:
                reason = ""
            judged.append(_Judged(left, right, float_side, reason))
        return judged

    def _index_places(self, node: ast.AST, scope: _Scope) -> list[ast.AST]:
        """What must be an integer in ``node``: a subscript's index or slice bounds (each of a tuple's),
        the arguments of ``range()``."""
        if isinstance(node, ast.Subscript):
            parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            return [bound for part in parts for bound in
                    ([part.lower, part.upper, part.step] if isinstance(part, ast.Slice) else [part]) if bound]
        if isinstance(node, ast.Call) and self._builtin(node.func, scope, {"range"}):
            return [arg for arg in node.args if not isinstance(arg, ast.Starred)]
        return []

    def _mark_index(self, node: ast.AST, scope: _Scope, indices: set[ast.AST]) -> None:
        """``node`` needs an integer, and so do the terms of the integer arithmetic it is made of."""
        indices.add(node)
        if isinstance(node, ast.BinOp) and isinstance(node.op, INT_OPS):
            if not (self.is_float(node.left, scope, self.floats) or self.is_float(node.right, scope, self.floats)):
                self._mark_index(node.left, scope, indices)
                self._mark_index(node.right, scope, indices)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Invert)):
            self._mark_index(node.operand, scope, indices)
        elif isinstance(node, ast.IfExp):
            self._mark_index(node.body, scope, indices)
            self._mark_index(node.orelse, scope, indices)


def _is_shape(node: ast.AST) -> bool:
    """``x.shape`` or a slice of it (``img.shape[:2]``): a tuple of integers."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
        node = node.value
    return isinstance(node, ast.Attribute) and node.attr == "shape"


def _own_namespace(call: ast.Call) -> bool:
    """``exec(code, namespace)`` with a namespace of its own, not ``globals()``, ``locals()`` or ``vars()``."""
    namespace = call.args[1] if len(call.args) > 1 else next(
        (k.value for k in call.keywords if k.arg == "globals"), None)
    return namespace is not None and not (isinstance(namespace, ast.Call) and isinstance(namespace.func, ast.Name)
                                          and namespace.func.id in ("globals", "locals", "vars"))
