"""Python 2's ``str`` was bytes; Python 3's is text. Old vision code reads an image with
``open(path).read()``, wraps it in ``StringIO(data)`` for ``Image.open``, saves a JPEG into a
``StringIO()`` and hashes or stores what it read: all of it bytes, which 2to3 cannot know, so the
converted script dies with ``UnicodeDecodeError`` or ``TypeError: initial_value must be str``.

Here the converted source is read with :mod:`ast` and the bytes are followed from where they must
be bytes (a consumer of :data:`SINKS`: ``np.frombuffer``, ``hashlib``, a socket's ``send``, an LMDB
``txn.put``, a Datum's ``ParseFromString``; a file-like one of :data:`FILE_SINKS`: ``Image.open``,
``caffe.io.load_image``, a PIL image's ``.save(buf)``) back to where they come from, through names,
function parameters (to the arguments of the calls in the same file) and return values:

* a file opened in text mode whose content goes to one is opened ``'rb'``; one written with bytes
  (``.tobytes()``, ``SerializeToString()``, a binary read), or given to a file-like consumer
  (``pickle.dump(obj, open(path, 'w'))``), in binary mode;
* an ``io.StringIO`` that holds such bytes, or is given to a file-like consumer, is an ``io.BytesIO``
  (a ``from io import StringIO`` gains ``BytesIO``);
* ``str(x)`` of bytes (a no-op in Python 2) is ``bytes(x)``;
* an LMDB key that is text (a literal, a ``%`` or ``.format()`` string) is ``.encode()``d.

Where bytes are needed and their origin cannot be changed or decided (a parameter no call in the
file passes, a mode that is not a literal, an ``open`` with an ``encoding``), the line is reported
for a person. Only the characters concerned change, so comments and layout stay as they were.
"""

from __future__ import annotations

import ast
import io
from collections.abc import Callable
from dataclasses import dataclass

SINKS = {  # qualified call -> the positional arguments that must be bytes
    "numpy.frombuffer": (0,), "hashlib.md5": (0,), "hashlib.sha1": (0,),
    "hashlib.sha256": (0,), "hashlib.sha512": (0,), "hashlib.new": (1,), "base64.b64encode": (0,),
    "zlib.compress": (0,), "zlib.decompress": (0,), "struct.unpack": (1,),
}
METHOD_SINKS = {"sendall": (0,), "ParseFromString": (0,)}  # on any receiver
HASHES = tuple(name for name in SINKS if name.startswith("hashlib."))  # their .update(data) too
SOCKETS = ("socket.socket", "socket.create_connection")  # their .send(data) too
FILE_SINKS = {  # qualified call -> the positional argument that is a file object holding bytes
    "PIL.Image.open": 0, "caffe.io.load_image": 0, "skimage.io.imread": 0, "numpy.load": 0, "numpy.save": 0,
    "imageio.imread": 0, "imageio.v2.imread": 0, "matplotlib.pyplot.imread": 0, "matplotlib.pyplot.savefig": 0,
    "pickle.dump": 1, "pickle.load": 0,
}
METHOD_FILE_SINKS = ("save", "savefig")  # a PIL image's or a figure's .save(buf, format=...)
BYTES_METHODS = ("tostring", "tobytes", "SerializeToString", "encode")
READS = ("read", "readline", "getvalue")
BYTES, TEXT = "bytes", "text"


@dataclass(frozen=True)
class Flow:
    """One line of the report: a change made (``changed``) or a choice left to a person."""

    line: int
    what: str
    changed: bool


def bytes_flow(source: str) -> tuple[str, list[Flow]]:
    """``source`` (Python 3) with bytes where its Python 2 ``str`` held bytes, and what was done.
    Raises SyntaxError where ``source`` is not Python 3."""
    tree = ast.parse(source)
    flow = _BytesFlow(tree, source)
    flow.run()
    edits, notes = flow.edits()
    lines = io.StringIO(source, newline="").readlines()  # the line ends ast counts, not str.splitlines's
    for (line, col, end_col), text in sorted(edits.items(), reverse=True):
        raw = lines[line - 1].encode()
        lines[line - 1] = (raw[:col] + text.encode() + raw[end_col:]).decode()
    return "".join(lines), sorted(set(notes), key=lambda n: (n.line, n.what))


def _dotted(node: ast.AST) -> list[str]:
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(names)]
    return []


class _BytesFlow:
    """The file's names, calls and the decisions: which ``open`` calls become binary and which
    ``StringIO`` buffers bytes, found again until nothing more changes."""

    def __init__(self, tree: ast.Module, source: str) -> None:
        self.tree = tree
        self.source = source
        self.imported: dict[str, str] = {}
        self.scope_of: dict[ast.AST, ast.AST] = {}
        self.assigned: dict[tuple[ast.AST, str], list[ast.AST]] = {}
        self.functions: dict[str, ast.FunctionDef] = {}
        self.binary: set[ast.Call] = set()  # open() calls to open in binary mode
        self.buffers: set[ast.Call] = set()  # StringIO() calls to make BytesIO
        self.keys: set[ast.AST] = set()  # text LMDB keys to encode
        self.needed_str: set[ast.Call] = set()  # str(x) calls whose value must be bytes
        self.checks: set[tuple[int, str]] = set()
        self._origins = _Memo(set())
        self._bytes = _Memo(False)
        self._index(tree, tree)
        self.calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]

    def _index(self, node: ast.AST, scope: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            self.scope_of[child] = scope
            inner = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) else scope
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[child.name] = child
                args = child.args
                for i, arg in enumerate([*args.posonlyargs, *args.args]):
                    self.assigned.setdefault((child, arg.arg), []).append(ast.Constant(("param", child, i)))
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    self.imported[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname \
                        else alias.name.split(".")[0]
            elif isinstance(child, ast.ImportFrom) and child.module:
                for alias in child.names:
                    self.imported[alias.asname or alias.name] = f"{child.module}.{alias.name}"
            elif isinstance(child, ast.Assign):
                for target in child.targets:
                    if isinstance(target, ast.Name):
                        self.assigned.setdefault((scope, target.id), []).append(child.value)
            elif isinstance(child, ast.withitem) and isinstance(child.optional_vars, ast.Name):
                self.assigned.setdefault((scope, child.optional_vars.id), []).append(child.context_expr)
            self._index(child, inner)

    def qualified(self, func: ast.AST) -> str:
        names = _dotted(func)
        if not names:
            return ""
        return ".".join([self.imported.get(names[0], names[0]), *names[1:]])

    def values(self, name: ast.Name) -> list[ast.AST]:
        """What ``name`` is assigned, in its scope or else the module's."""
        scope = self.scope_of.get(name, self.tree)
        while True:
            found = self.assigned.get((scope, name.id))
            if found is not None or scope is self.tree:
                return found or []
            scope = self.tree

    def made(self, node: ast.AST, seen: frozenset = frozenset()) -> ast.Call | None:
        """The ``open(...)`` or ``StringIO(...)``/``BytesIO(...)`` call that ``node`` names, if any."""
        if isinstance(node, ast.Call) and self.qualified(node.func) in ("open", "io.open", "io.StringIO", "io.BytesIO"):
            return node
        if isinstance(node, ast.Name) and node not in seen:
            # The binding nearest above the use: ``with open(a, 'w') as f`` then ``with open(b) as f``.
            above = [v for v in self.values(node) if getattr(v, "lineno", node.lineno + 1) <= node.lineno]
            return self.made(max(above, key=lambda v: (v.lineno, v.col_offset)), seen | {node}) if above else None
        return None

    def origins(self, node: ast.AST) -> set:
        """Where ``node``'s value comes from: BYTES, TEXT, ("read", the open/buffer call),
        ("param", function, index) or ("str", a ``str(x)`` call); empty where not known. A name
        is looked up by its scope and name, which give all its uses the same origins."""
        key = (self.scope_of.get(node), node.id) if isinstance(node, ast.Name) else node
        return self._origins.get(key, lambda: self._origins_of(node))

    def _origins_of(self, node: ast.AST) -> set:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, tuple):
                return {node.value}
            return {BYTES} if isinstance(node.value, bytes) else {TEXT} if isinstance(node.value, str) else set()
        if isinstance(node, ast.JoinedStr) or (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod)
                                               and TEXT in self.origins(node.left)):
            return {TEXT}
        if isinstance(node, ast.Name):
            return set().union(*(self.origins(v) for v in self.values(node)))
        if not isinstance(node, ast.Call):
            if isinstance(node, ast.Attribute) and node.attr == "data" and isinstance(node.value, ast.Name) \
                    and any(self.qualified(getattr(v, "func", None)).endswith("Datum")
                            for v in self.values(node.value)):
                return {BYTES}
            return set()
        func = node.func
        if isinstance(func, ast.Name):
            if func.id == "str":  # str() of bytes becomes bytes(); of what else, known where it must be bytes
                return {("str", node)} if len(node.args) == 1 and not node.keywords else {TEXT}
            if func.id in self.functions and func.id not in self.imported:
                returns = [r.value for r in ast.walk(self.functions[func.id]) if isinstance(r, ast.Return) and r.value]
                return set().union(*(self.origins(r) for r in returns))
            return set()
        if isinstance(func, ast.Attribute):
            if func.attr in BYTES_METHODS:
                return {BYTES}
            if func.attr in ("format", "decode") or (func.attr == "join" and TEXT in self.origins(func.value)):
                return {TEXT}
            if func.attr in READS and (made := self.made(func.value)) is not None:
                return {("read", made)}
            if func.attr == "get" and self._transaction(func.value):
                return {BYTES}
        return set()

    def _transaction(self, node: ast.AST) -> bool:
        """Whether ``node`` names an LMDB transaction (``env.begin(...)``)."""
        return isinstance(node, ast.Name) and any(
            isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr == "begin"
            for v in self.values(node))

    def _made_by(self, node: ast.AST, calls: tuple[str, ...]) -> bool:
        """Whether ``node`` names what one of ``calls`` made (a socket, a hash)."""
        return isinstance(node, ast.Name) and any(
            isinstance(v, ast.Call) and self.qualified(v.func) in calls for v in self.values(node))

    def is_bytes(self, node: ast.AST) -> bool:
        """Whether ``node``'s value is bytes: every one of its origins is. What this depends on
        (which files are opened binary) changes as the flow is found: known for one question only."""
        if not self._bytes.open:
            self._bytes.done.clear()
        return self._bytes.get(node, lambda: self._is_bytes(node))

    def _is_bytes(self, node: ast.AST) -> bool:
        found = self.origins(node)
        return bool(found) and all(self._bytes_origin(o) for o in found)

    def _bytes_origin(self, origin) -> bool:
        """Whether ``origin`` is bytes: a parameter is where every call in the file passes bytes."""
        if origin == BYTES:
            return True
        if not isinstance(origin, tuple):
            return False
        if origin[0] == "read":
            return self._holds_bytes(origin[1])
        if origin[0] == "str":
            return self.is_bytes(origin[1].args[0])
        calls = self._calls(origin[1], origin[2])
        return bool(calls) and all(self.is_bytes(call.args[origin[2]]) for call in calls)

    def _calls(self, function: ast.FunctionDef, index: int) -> list[ast.Call]:
        """The calls of ``function`` in the file that pass its argument ``index``."""
        return [c for c in self.calls if isinstance(c.func, ast.Name) and c.func.id == function.name
                and len(c.args) > index and not any(isinstance(a, ast.Starred) for a in c.args[:index + 1])]

    def _holds_bytes(self, made: ast.Call) -> bool:
        if self.qualified(made.func) == "io.BytesIO" or made in self.buffers or made in self.binary:
            return True
        return self.qualified(made.func) in ("open", "io.open") and "b" in (_mode(made) or "")

    def need(self, node: ast.AST, seen: set) -> None:
        """``node`` must be bytes: make its origins so, or report where that is not possible."""
        if node in seen:
            return
        seen.add(node)
        for origin in self.origins(node):
            if origin == TEXT:
                self.checks.add((node.lineno, "text reaches a consumer of bytes here: .encode() it, "
                                                  "or read it as bytes"))
            elif origin[0] == "read":
                if self.qualified(origin[1].func) == "io.StringIO":
                    self.buffers.add(origin[1])
                elif not self._holds_bytes(origin[1]):
                    self.binary.add(origin[1])
            elif origin[0] == "str":
                self.needed_str.add(origin[1])
                self.need(origin[1].args[0], seen)
            elif origin[0] == "param":
                function, index = origin[1], origin[2]
                calls = self._calls(function, index)
                if not calls:
                    self.checks.add((function.lineno, f"{function.name}() gives its argument {index + 1} to a consumer "
                                                      "of bytes: its callers must pass bytes (open files 'rb')"))
                for call in calls:
                    self.need(call.args[index], seen)

    def run(self) -> None:
        while True:
            before = (len(self.binary), len(self.buffers), len(self.keys))
            seen: set = set()
            for call in self.calls:
                self._visit(call, seen)
            if (len(self.binary), len(self.buffers), len(self.keys)) == before:
                return

    def _visit(self, call: ast.Call, seen: set) -> None:
        name = self.qualified(call.func)
        attr = call.func.attr if isinstance(call.func, ast.Attribute) else None
        sinks = SINKS.get(name, METHOD_SINKS.get(attr, ()))
        if (attr == "send" and self._made_by(call.func.value, SOCKETS)) \
                or (attr == "update" and self._made_by(call.func.value, HASHES)):
            sinks = (0,)
        for index in sinks:
            if index < len(call.args):
                self.need(call.args[index], seen)
        at = FILE_SINKS.get(name, 0 if attr in METHOD_FILE_SINKS else None)
        if at is not None and at < len(call.args):
            made = self.made(call.args[at])
            if made is not None and not self._holds_bytes(made):  # pickle.dump(obj, open(path, 'w')) too
                (self.buffers if self.qualified(made.func) == "io.StringIO" else self.binary).add(made)
        if name == "io.StringIO" and call.args and (call in self.buffers or self.is_bytes(call.args[0])):
            self.buffers.add(call)
            self.need(call.args[0], seen)
        if attr == "write" and call.args and (made := self.made(call.func.value)) is not None \
                and self.is_bytes(call.args[0]) and not self._holds_bytes(made):
            (self.buffers if self.qualified(made.func) == "io.StringIO" else self.binary).add(made)
        if attr in ("put", "get") and self._transaction(call.func.value) and call.args:
            key = call.args[0]
            if self.origins(key) == {TEXT}:
                self.keys.add(key)
            elif not self.is_bytes(key):
                self.checks.add((call.lineno, f"txn.{attr}'s key must be bytes: if it is text here, key.encode()"))
            if attr == "put" and len(call.args) > 1:
                self.need(call.args[1], seen)

    def edits(self) -> tuple[dict[tuple[int, int, int], str], list[Flow]]:
        """The changes, by (line, start, end) in UTF-8 bytes as :mod:`ast` counts columns, and the notes."""
        edits: dict[tuple[int, int, int], str] = {}
        notes = [Flow(line, what, False) for line, what in self.checks]
        for call in self.binary:
            edits.update(self._binary(call, notes))
        renamed_names = []
        for call in self.buffers:
            func = call.func
            if isinstance(func, ast.Attribute):
                edits[(func.end_lineno, func.end_col_offset - len(func.attr), func.end_col_offset)] = "BytesIO"
            else:
                edits[(func.lineno, func.col_offset, func.end_col_offset)] = "BytesIO"
                renamed_names.append(func)
            notes.append(Flow(call.lineno, "io.StringIO -> io.BytesIO: the buffer holds bytes (an image or a "
                                           "file's content)", True))
        edits.update(self._imports(renamed_names, notes))
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str" \
                    and len(node.args) == 1 and not node.keywords:
                found = self.origins(node.args[0])
                if self.is_bytes(node.args[0]):
                    edits[(node.func.lineno, node.func.col_offset, node.func.end_col_offset)] = "bytes"
                    notes.append(Flow(node.lineno, "str(x) -> bytes(x): x is bytes (Python 2's str)", True))
                elif node in self.needed_str:
                    notes.append(Flow(node.lineno, "str() goes where bytes are needed: bytes(x) if x is bytes, "
                                                   "str(x).encode() if it is not", False))
                elif found and any(self._bytes_origin(o) for o in found):
                    notes.append(Flow(node.lineno, "str() of a value that may be bytes: bytes(x) if it is", False))
        for key in self.keys:
            wrapped = not isinstance(key, (ast.Constant, ast.Name, ast.Call, ast.Attribute, ast.JoinedStr))
            edits[(key.lineno, key.col_offset, key.col_offset)] = "(" if wrapped else ""
            edits[(key.end_lineno, key.end_col_offset, key.end_col_offset)] = (")" if wrapped else "") + ".encode()"
            notes.append(Flow(key.lineno, "LMDB key .encode()d: keys are bytes", True))
        return {k: v for k, v in edits.items() if v or k[1] != k[2]}, notes


    def _binary(self, call: ast.Call, notes: list[Flow]) -> dict[tuple[int, int, int], str]:
        """``open(path)`` -> ``open(path, 'rb')``; ``open(path, 'w')`` -> ``open(path, 'wb')``."""
        mode = _mode(call)
        keywords = {k.arg for k in call.keywords} - {"mode"}
        literal = _given_mode(call)
        if keywords & {"encoding", "errors", "newline"} or (literal is not None and not mode) or not call.args \
                or any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            notes.append(Flow(call.lineno, "this file's content is bytes: open it in binary mode ('rb'/'wb')", False))
            return {}
        notes.append(Flow(call.lineno, "open() in binary mode: the file's content is bytes (an image or encoded data)",
                          True))
        if literal is None:
            last = call.args[0]
            return {(last.end_lineno, last.end_col_offset, last.end_col_offset): ", 'rb'"}
        new = mode.replace("t", "")
        new = new[0] + "b" + new[1:]
        quote = (ast.get_source_segment(self.source, literal) or "'")[-1]
        return {(literal.lineno, literal.col_offset, literal.end_col_offset): f"{quote}{new}{quote}"}

    def _imports(self, renamed: list[ast.Name], notes: list[Flow]) -> dict[tuple[int, int, int], str]:
        """``from io import StringIO``: BytesIO added, or in its place where no StringIO is left."""
        if not renamed:
            return {}
        uses = [n for n in ast.walk(self.tree) if isinstance(n, ast.Name) and n.id == renamed[0].id]
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom) and node.module == "io":
                for alias in node.names:
                    if alias.name == "StringIO" and alias.asname is None:
                        if len(uses) > len(renamed):
                            return {(alias.lineno, alias.col_offset, alias.col_offset): "BytesIO, "}
                        return {(alias.lineno, alias.col_offset, alias.end_col_offset): "BytesIO"}
        notes.append(Flow(renamed[0].lineno, "BytesIO is used here: import it (from io import BytesIO)", False))
        return {}


class _Memo:
    """Answers of a question that recurses over the file's names, functions and calls, each found
    once. Names and functions refer to each other in cycles (``x = f(x)``, two functions calling
    each other): a question met again while it is being answered is answered ``unknown`` there, and
    what depended on that is not kept, as it may be partial. Cycles within cycles could still take
    time exponential in their size, and a chain of names as long as the file is deeper than
    Python's recursion: past :data:`STEPS` answers, or :data:`DEPTH` questions open at once, the
    answer is ``unknown``, which changes nothing in the file."""

    STEPS = 20_000
    DEPTH = 100  # each a few frames, well within Python's recursion limit of 1,000

    def __init__(self, unknown) -> None:
        self.unknown = unknown
        self.done: dict = {}
        self.open: list[tuple[object, set]] = []  # the questions being answered, each with the open ones it met
        self.opened: set = set()
        self.steps = 0

    def get(self, key, answer: Callable[[], object]):
        if key in self.done:
            return self.done[key]
        if not self.open:
            self.steps = 0
        if key in self.opened or self.steps > self.STEPS or len(self.open) > self.DEPTH:
            if self.open:
                self.open[-1][1].add(key)
            return self.unknown
        self.steps += 1
        self.opened.add(key)
        self.open.append((key, set()))
        try:
            value = answer()
        finally:
            self.opened.discard(key)
            met = self.open.pop()[1] - {key}
        if met:
            if self.open:
                self.open[-1][1].update(met)
        else:
            self.done[key] = value
        return value


def _mode(call: ast.Call) -> str | None:
    """An ``open`` call's mode: "r" where none is given, None where it is not a literal."""
    given = _given_mode(call)
    if given is None:
        return "r"
    return given.value if isinstance(given, ast.Constant) and isinstance(given.value, str) else None


def _given_mode(call: ast.Call) -> ast.AST | None:
    return call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
