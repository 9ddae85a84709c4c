"""NumPy, SciPy, scikit-image and Pillow calls that those libraries removed, rewritten as the table
:data:`caffetool.upgrade.removed.REMOVED` says (old Caffe code calls ``np.fromstring``,
``scipy.misc.imresize``, ``Image.ANTIALIAS``, ``as_grey=``, ``.astype(np.float)``).

A spelling is matched on the code's dotted name (``np.float``, ``numpy.float``,
``scipy.ndimage.filters.zoom``), its short module names read as :data:`~caffetool.upgrade.removed.SHORT_NAMES`
says; a name imported on its own (``from scipy.misc import imresize``) is reported, since its uses
are not renamed. ``np.fromstring`` becomes ``np.frombuffer`` only in its binary form (no ``sep``, or
``sep=''``); frombuffer's array is read-only where fromstring's was a copy, so where the name it is
given is written into in the file, ``.copy()`` is added, and where the array goes anywhere else
than a name, the line is reported.
"""

from fissix import fixer_base
from fissix.fixer_util import ArgList, Dot, Name, touch_import
from fissix.pgen2 import token
from fissix.pygram import python_symbols as syms
from fissix.pytree import Leaf, Node

from caffetool.upgrade.removed import BY_OLD, SHORT_NAMES, Removed

READ_ONLY = ("np.frombuffer's array is read-only (np.fromstring made a copy): where it is written into, "
             "add .copy()")


class FixRemovedApis(fixer_base.BaseFix):
    BM_compatible = False
    PATTERN = "power< any+ > | import_from< 'from' any+ > | import_name< 'import' any+ >"

    def transform(self, node, results):
        if node.type == syms.import_from:
            return self._from_import(node)
        if node.type == syms.import_name:
            return self._import(node)
        self._methods(node)
        names = _dotted(node)
        self._keywords(names, _call_after(node, len(names)))
        for k in range(len(names), 1, -1):
            row = BY_OLD.get(_canonical(names[:k]))
            if row is not None:
                return self._apply(node, row, k)
        return None

    def _apply(self, node, row: Removed, k: int):
        call = _call_after(node, k)
        if row.how == "check" or (row.how == "one-argument" and not _one_positional(call)):
            self.warning(node, f"{'.'.join(_dotted(node)[:k])}: removed in {row.removed_in}: {row.check}")
            return None
        if row.how == "call":
            return self._call(node, row, k, call)
        line = node.get_lineno()
        new = _rename(node, row, k)
        old_module, new_module = row.old.rsplit(".", 1)[0], row.new.rsplit(".", 1)[0]
        if "." in row.new and new_module != old_module and row.new != old_module:  # another module: imported
            touch_import(None, new_module, node)
        if row.check and row.how == "name":
            self.log_message(f"Line {line}: {row.new}: {row.check}")
        return new

    def _call(self, node, row: Removed, k: int, call):
        spelled = ".".join(_dotted(node)[:k])
        if call is None:  # a reference, not a call: ``read = np.fromstring``
            self.warning(node, f"{spelled}: removed in {row.removed_in}: use {row.new}")
            return None
        args = _arguments(call)
        if row.old == "numpy.asscalar":
            if len(args) != 1 or args[0].type == syms.argument:
                self.warning(node, f"{spelled}: removed in {row.removed_in}: use {row.new}")
                return None
            value = args[0].clone()
            value.prefix = ""
            if value.type not in (token.NAME, syms.power, syms.atom):
                value = Node(syms.atom, [Leaf(token.LPAR, "("), value, Leaf(token.RPAR, ")")])
            rest = [c.clone() for c in node.children[k + 1:]]
            return Node(syms.power, [value, Node(syms.trailer, [Dot(), Name("item")]), ArgList([]), *rest],
                        prefix=node.prefix)
        # numpy.fromstring(string, dtype, count, sep): only its binary form (no sep, or sep='') was removed.
        if len([a for a in args if a.type != syms.argument]) > 3:
            return None
        for argument in args[1:]:
            if argument.type == syms.argument and str(argument.children[0]).strip() == "sep":
                if str(argument.children[2]).strip() not in ("''", '""'):
                    return None
                comma = argument.prev_sibling  # frombuffer has no sep: ``, sep=''`` goes
                argument.remove()
                if comma is not None and comma.type == token.COMMA:
                    comma.remove()
        _rename(node, row, k)
        target = _assigned_name(node)
        if target is None:
            self.warning(node, READ_ONLY)
        elif _written_into(node, target):
            node.append_child(Node(syms.trailer, [Dot(), Name("copy")]))
            node.append_child(ArgList([]))
        return None

    def _keywords(self, names: list[str], call) -> None:
        """``skimage.io.imread(path, as_grey=True)``: the keyword renamed."""
        if call is None or len(names) < 2:
            return
        for argument in _arguments(call):
            if argument.type == syms.argument and argument.children[0].type == token.NAME:
                row = BY_OLD.get(f"{_canonical(names)}({argument.children[0].value})")
                if row is not None:
                    argument.children[0].replace(Name(row.new, prefix=argument.children[0].prefix))

    def _methods(self, node) -> None:
        """``x.tostring()`` (no positional argument: an ndarray's or a PIL image's) is ``x.tobytes()``."""
        children = node.children
        for at in range(1, len(children) - 1):
            trailer, parens = children[at], children[at + 1]
            if _is_dot(trailer) and trailer.children[1].value == "tostring" and _is_call(parens) \
                    and all(a.type == syms.argument for a in _arguments(parens)):
                trailer.children[1].replace(Name("tobytes"))

    def _from_import(self, node):
        module = str(node.children[1]).strip()
        row = BY_OLD.get(_canonical(module.split(".")))
        if row is not None and row.how == "name" and row.new == row.old.rsplit(".", 1)[0]:
            node.children[1].replace(Name(row.new, prefix=" "))
            return None
        imported = node.children[3:]
        names = [leaf.value for part in imported for leaf in part.leaves() if leaf.type == token.NAME]
        for name in names:
            found = BY_OLD.get(_canonical([*module.split("."), name]))
            if found is not None:
                what = f"use {found.new}" if found.new else found.check
                self.warning(node, f"{module}.{name} is imported by name: removed in {found.removed_in}: {what}")
        return None

    def _import(self, node):
        module = node.children[1]
        if module.type != syms.dotted_name and module.type != token.NAME:
            return None
        row = BY_OLD.get(_canonical(str(module).strip().split(".")))
        if row is not None and row.how == "name" and row.new == row.old.rsplit(".", 1)[0]:
            module.replace(Name(row.new, prefix=" "))
        return None


def _canonical(names: list[str]) -> str:
    return ".".join([*SHORT_NAMES.get(names[0], names[0]).split("."), *names[1:]])


def _dotted(node) -> list[str]:
    """The names of ``node``'s leading ``a.b.c``."""
    first = node.children[0]
    if first.type != token.NAME:
        return []
    names = [first.value]
    for trailer in node.children[1:]:
        if not _is_dot(trailer):
            break
        names.append(trailer.children[1].value)
    return names


def _rename(node, row: Removed, k: int):
    """The first ``k`` names of ``node`` as ``row.new``: the last name alone where ``new`` is in the same
    module (the code's own prefix kept), the trailer dropped where ``new`` is the module itself."""
    old_parent, new_parent = row.old.rsplit(".", 1)[0], row.new.rsplit(".", 1)[0]
    if row.new == old_parent:
        node.children[k - 1].remove()
    elif "." in row.new and new_parent == old_parent:
        node.children[k - 1].children[1].replace(Name(row.new.rsplit(".", 1)[1]))
    else:
        head = node.children[0]
        for child in node.children[1:k]:
            child.remove()
        head.replace(Name(row.new, prefix=head.prefix))
    if len(node.children) == 1:  # ``np.float`` -> ``float``: a name, no longer a power
        only = node.children[0].clone()
        only.prefix = node.prefix
        return only
    return None


def _call_after(node, k: int):
    return node.children[k] if len(node.children) > k and _is_call(node.children[k]) else None


def _arguments(call) -> list:
    inner = call.children[1:-1]
    if not inner:
        return []
    if inner[0].type == syms.arglist:
        return [c for c in inner[0].children if c.type != token.COMMA]
    return [inner[0]]


def _one_positional(call) -> bool:
    return call is not None and len(_arguments(call)) == 1 and _arguments(call)[0].type != syms.argument


def _is_dot(trailer) -> bool:
    return trailer.type == syms.trailer and trailer.children[0].value == "." and len(trailer.children) == 2


def _is_call(trailer) -> bool:
    return trailer.type == syms.trailer and trailer.children[0].value == "("



def _assigned_name(node) -> str | None:
    """The name ``node`` is the whole value of (``x = node``), if it is."""
    parent = node.parent
    if parent is None or parent.type != syms.expr_stmt or len(parent.children) != 3:
        return None
    target, operator, value = parent.children
    if operator.value == "=" and value is node and target.type == token.NAME:
        return target.value
    return None


def _written_into(node, name: str) -> bool:
    """Whether the file writes into ``name``'s array: ``name[...] = ...``, ``name += ...``, ``name[...] += ...``."""
    root = node
    while root.parent is not None:
        root = root.parent
    for statement in root.pre_order():
        if statement.type != syms.expr_stmt or len(statement.children) < 3:
            continue
        target, operator = statement.children[0], statement.children[1].value
        if target.type == token.NAME and target.value == name and operator != "=":
            return True
        if target.type == syms.power and target.children[0].type == token.NAME and target.children[0].value == name \
                and target.children[-1].type == syms.trailer and target.children[-1].children[0].value == "[":
            return True
    return False
