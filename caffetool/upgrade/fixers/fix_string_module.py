"""The ``string`` module's functions and constants that Python 3 removed, as ``str`` methods.

``string.join(words, sep)`` is ``sep.join(words)`` (sep defaults to a space), ``string.split(s,
sep)`` is ``s.split(sep)``, and likewise every function that became a method (Python 2.7's
``string`` docs, "Deprecated string functions"); ``string.atoi``/``atof``/``atol`` are ``int`` /
``float`` / ``int``; ``string.letters``, ``lowercase`` and ``uppercase`` are the ``ascii_`` ones.
Only where the file imports ``string`` and no function around the call has a local of that name
(a variable called ``string`` has methods of those names too). The call keeps the comments and
indentation before it.
"""

from fissix import fixer_base
from fissix.fixer_util import ArgList, Attr, Call, Comma, Name, String, find_binding, is_import, parenthesize
from fissix.pgen2 import token
from fissix.pygram import python_symbols as syms
from fissix.pytree import Node

METHODS = ("split rsplit splitfields strip lstrip rstrip lower upper swapcase capitalize title replace find "
           "rfind index rindex count expandtabs zfill ljust rjust center translate").split()
NUMBERS = {"atoi": "int", "atol": "int", "atof": "float"}
CONSTANTS = {"letters": "ascii_letters", "lowercase": "ascii_lowercase", "uppercase": "ascii_uppercase"}
_NAMES = " | ".join(f"'{n}'" for n in (*METHODS, "join", "joinfields", *NUMBERS))


class FixStringModule(fixer_base.BaseFix):
    BM_compatible = True
    PATTERN = f"""
    call=power< 'string' trailer< '.' func=({_NAMES}) > trailer< '(' args=any* ')' > >
    |
    constant=power< 'string' trailer< '.' name=({' | '.join(f"'{n}'" for n in CONSTANTS)}) > >
    """

    def start_tree(self, tree, filename):
        super().start_tree(tree, filename)
        # ``string`` is the module only where the file imports it; elsewhere it is a variable (a
        # Python 3 file's ``string.replace(a, b)`` is a call of a str's method).
        binding = find_binding("string", tree)
        self.imported = binding is not None and is_import(binding)

    def transform(self, node, results):
        if not self.imported or _shadowed(node):
            return None
        if "constant" in results:
            name = results["name"][0]
            name.replace(Name(CONSTANTS[name.value], prefix=name.prefix))
            return None
        func = results["func"][0].value
        args = [a.clone() for a in _arguments(results["args"])]
        if not args or any(a.type == self.syms.argument for a in args):
            self.cannot_convert(node, f"string.{func} with keyword or no arguments: write it as a str method")
            return None
        for a in args:
            a.prefix = ""
        if func in NUMBERS:
            return Call(Name(NUMBERS[func]), _with_commas(args), prefix=node.prefix)
        if func in ("join", "joinfields"):
            sep = args[1] if len(args) > 1 else String('" "')
            return _method_call(sep, "join", [args[0]], node.prefix)
        return _method_call(args[0], "split" if func == "splitfields" else func, args[1:], node.prefix)


def _shadowed(node) -> bool:
    """Whether ``string`` is a local name of a function around ``node`` (a parameter, or assigned
    in its body), not the module."""
    while node.parent is not None:
        node = node.parent
        if node.type == syms.funcdef:
            if any(leaf.type == token.NAME and leaf.value == "string" for leaf in node.children[2].leaves()):
                return True
            if find_binding("string", node.children[-1]):
                return True
    return False


def _arguments(nodes):
    """The argument nodes of a call's ``( ... )`` contents, commas dropped."""
    if not nodes:
        return []
    if nodes[0].type == syms.arglist:
        return [c for c in nodes[0].children if c.type != token.COMMA]
    return [nodes[0]]


def _method_call(obj, method, args, prefix):
    """``obj.method(args)``, as a tree."""
    return Node(syms.power, [*Attr(_wrapped(obj), Name(method)), ArgList(_with_commas(args))], prefix=prefix)


def _with_commas(args):
    out = []
    for i, a in enumerate(args):
        if i:
            out.append(Comma())
            a.prefix = " "
        out.append(a)
    return out


def _wrapped(node):
    """``node`` as the object of a method call: parenthesized unless it is a name, a literal or a call."""
    if node.type in (token.NAME, token.STRING, token.NUMBER, syms.atom):
        return node
    # ``a ** b`` and ``await x`` are power nodes too, but a method call would bind to ``b`` or ``x``.
    if node.type == syms.power and not any(c.type in (token.DOUBLESTAR, token.AWAIT) for c in node.children):
        return node
    return parenthesize(node)
