"""Python 2's ``/`` in Python 3: floor division where both sides are integers by construction.

Python 2 divided two ints to an int; Python 3's ``/`` always gives a float (PEP 238), so code that
used the quotient as an index or a count breaks (BVLC's ``01-learning-lenet``:
``test_interval = niter / 10`` then ``test_acc[it // test_interval]`` indexes with a float). 2to3
leaves ``/`` alone, since in general it cannot know the operands' types. Here a quotient becomes
``//`` only where both operands are integers by construction, which keeps Python 2's result exactly:

* an int literal, ``len(...)``, ``int(...)``, ``ord(...)``, a ``%``, ``//``, ``+``, ``-``, ``*``
  or ``/`` of integers, a ``-``/``+`` of one;
* a name of the same scope (or, not assigned there, of the enclosing one) whose every assignment
  is one of those (``x = 25``, ``x += 1``, a ``for`` over ``range(...)`` or the index of
  ``enumerate(...)``), so ``niter = 250; test_interval = niter / 10`` makes both integers.

Every other ``/`` keeps Python 3's true division, which is what ``from __future__ import division``
gave Python 2 code. Where neither operand is known to be a float, that is said in the report, by
line, for a person to check. The source is read with :mod:`ast` and :mod:`tokenize` and changed
only at the operator's own characters, so comments and layout stay as they were.
"""

from __future__ import annotations

import ast
import bisect
import io
import tokenize
from dataclasses import dataclass

INT_CALLS = frozenset({"len", "int", "ord"})  # not round(): Python 2's returned a float
INT_OPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.Div)


@dataclass(frozen=True)
class Division:
    """One ``/`` (or ``/=``): where it is, and whether it became ``//``."""

    line: int
    col: int
    floor: bool  # both sides integers by construction: now ``//``
    float_side: bool  # one side is a float by construction: true division was meant


def floor_divisions(source: str) -> tuple[str, list[Division]]:
    """``source`` with ``/`` made ``//`` where both sides are integers by construction, and every
    division found. Raises SyntaxError where ``source`` is not Python 3."""
    tree = ast.parse(source)
    found = _Finder(tree)
    found.visit(tree)
    slashes = _slash_tokens(source)
    positions = sorted(slashes)
    divisions = []
    for left_end, floor, float_side in found.divisions:
        # The operator is the first ``/`` after its left operand (past a closing bracket or a line break).
        at = positions[bisect.bisect_left(positions, left_end)]
        divisions.append(Division(at[0], at[1], floor, float_side))
    lines = source.splitlines(keepends=True)
    for division in sorted(divisions, key=lambda d: (d.line, d.col), reverse=True):
        if division.floor:
            text, token = lines[division.line - 1], slashes[(division.line, division.col)]
            lines[division.line - 1] = text[:division.col] + "/" + token + text[division.col + len(token):]
    return "".join(lines), sorted(divisions, key=lambda d: (d.line, d.col))


def _slash_tokens(source: str) -> dict[tuple[int, int], str]:
    """Every ``/`` and ``/=`` operator token by (line, column)."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {tok.start: tok.string for tok in tokens if tok.type == tokenize.OP and tok.string in ("/", "/=")}


class _Scope:
    """The names a module or function assigns, and which of them are integers by construction."""

    def __init__(self, node: ast.AST, parent: _Scope | None) -> None:
        self.parent = parent
        self.assigned: dict[str, list[ast.AST | None]] = {}  # None: assigned something not judged
        for child in _own_nodes(node):
            for name, value in _assignments(child):
                self.assigned.setdefault(name, []).append(value)
        # The largest set of names whose every assignment is an integer given that they all are (so
        # ``k = 7; k /= 2`` and a loop's ``i += 1`` stay integers): all candidates, less any that fail.
        self.ints: set[str] = {name for name, values in self.assigned.items() if None not in values}
        while failing := {name for name in self.ints if not all(self.is_int(v) for v in self.assigned[name])}:
            self.ints -= failing

    def is_int(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return type(node.value) is int
        if isinstance(node, ast.Name):
            if node.id in self.assigned:
                return node.id in self.ints
            return self.parent is not None and self.parent.is_int(node)
        if isinstance(node, ast.BinOp):
            return isinstance(node.op, INT_OPS) and self.is_int(node.left) and self.is_int(node.right)
        if isinstance(node, ast.UnaryOp):
            return isinstance(node.op, (ast.USub, ast.UAdd, ast.Invert)) and self.is_int(node.operand)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return node.func.id in INT_CALLS and len(node.args) == 1 and not node.keywords
        return False

    def is_float(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return type(node.value) is float
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return node.func.id == "float"
        if isinstance(node, ast.BinOp):
            return self.is_float(node.left) or self.is_float(node.right)
        return False


def _own_nodes(scope: ast.AST):
    """The nodes of ``scope`` outside the functions, lambdas and classes it defines."""
    for child in ast.iter_child_nodes(scope):
        yield child
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            yield from _own_nodes(child)


def _assignments(node: ast.AST):
    """(name, value) for each name ``node`` binds; value None where it is not an expression judged here."""
    if isinstance(node, ast.Assign):
        for target in node.targets:
            if isinstance(target, ast.Name):
                yield target.id, node.value
            else:
                yield from ((name, None) for name in _names(target))
    elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        yield node.target.id, node.value
    elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
        yield node.target.id, (ast.BinOp(ast.Name(node.target.id), node.op, node.value)
                               if isinstance(node.op, INT_OPS) else None)
    elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
        yield from _loop_targets(node.target, node.iter)
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield node.name, None
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        for alias in node.names:
            yield (alias.asname or alias.name).split(".")[0], None
    elif isinstance(node, (ast.With, ast.AsyncWith)):
        for item in node.items:
            if item.optional_vars is not None:
                yield from ((name, None) for name in _names(item.optional_vars))
    elif isinstance(node, ast.NamedExpr):
        yield node.target.id, node.value
    elif isinstance(node, ast.ExceptHandler) and node.name:
        yield node.name, None
    elif isinstance(node, (ast.Global, ast.Nonlocal)):
        for name in node.names:
            yield name, None
    elif isinstance(node, ast.arguments):
        for arg in [*node.posonlyargs, *node.args, *node.kwonlyargs, node.vararg, node.kwarg]:
            if arg is not None:
                yield arg.arg, None


def _loop_targets(target: ast.AST, iterated: ast.AST):
    """A ``for`` over ``range(...)`` binds integers; so does the index of ``enumerate(...)``."""
    call = iterated.func.id if isinstance(iterated, ast.Call) and isinstance(iterated.func, ast.Name) else None
    if call == "range" and isinstance(target, ast.Name):
        yield target.id, ast.Constant(0)
    elif call == "enumerate" and isinstance(target, ast.Tuple) and len(target.elts) == 2 \
            and isinstance(target.elts[0], ast.Name):
        yield target.elts[0].id, ast.Constant(0)
        yield from ((name, None) for name in _names(target.elts[1]))
    else:
        yield from ((name, None) for name in _names(target))


def _names(target: ast.AST) -> list[str]:
    """The names a target binds (``a, (b, *c)``; not those inside ``x[i]`` or ``x.y``, which bind none)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for element in target.elts for name in _names(element)]
    if isinstance(target, ast.Starred):
        return _names(target.value)
    return []


class _Finder(ast.NodeVisitor):
    """Walks the tree scope by scope, judging every division."""

    def __init__(self, tree: ast.AST) -> None:
        self.scope = _Scope(tree, None)
        self.divisions: list[tuple[tuple[int, int], bool, bool]] = []  # (left operand's end, floor, float side)

    def _enter(self, node: ast.AST) -> None:
        outer = self.scope
        self.scope = _Scope(node, outer)
        self.generic_visit(node)
        self.scope = outer

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _enter

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.Div):
            self._judge(node.left, node.right, node.left.end_lineno, node.left.end_col_offset)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.op, ast.Div) and isinstance(node.target, ast.Name):
            self._judge(node.target, node.value, node.target.end_lineno, node.target.end_col_offset)
        self.generic_visit(node)

    def _judge(self, left: ast.AST, right: ast.AST, line: int, col: int) -> None:
        floor = self.scope.is_int(left) and self.scope.is_int(right)
        self.divisions.append(((line, col), floor, self.scope.is_float(left) or self.scope.is_float(right)))
