"""``caffetool upgrade``'s division: Python 2's ``/`` as ``//`` where Python 2 divided integers, on
sources written here; each converted source is run by Python 3 where the result is a value to check."""

from __future__ import annotations

import json
import subprocess
import sys

from caffetool.upgrade import division, ipynb, python2, upgraded

INTEGERS, INDEX, CHECK = division.INTEGERS, division.INDEX, division.CHECK


def floored(source: str) -> tuple[str, list[tuple[int, int, str]]]:
    """``source`` through :func:`division.floor_divisions`, and (line, column, reason) of each division."""
    out, found = division.floor_divisions(source)
    return out, [(d.line, d.col, d.reason) for d in found]


def printed(source: str) -> str:
    done = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def division_notes(notes: list[python2.Note]) -> list[tuple[int, str, bool]]:
    return [(n.line, n.what, n.changed) for n in notes if n.what in (INTEGERS, INDEX, CHECK)]


# from __future__ import division


def test_a_module_with_future_division_keeps_every_slash_and_has_nothing_to_check():
    source = "from __future__ import division\nn = 7\nprint n / 2, len('abc') / 2, n / 2.0\nn /= 2\n"
    out, notes = python2.convert(source, "old.py")
    assert out == "\nn = 7\nprint(n / 2, len('abc') / 2, n / 2.0)\nn /= 2\n"
    assert division_notes(notes) == []
    assert printed(out) == "3.5 1.5 3.5\n"


def test_future_division_among_other_names_in_brackets_after_a_docstring_is_seen():
    """fissix keeps a bracketed ``from __future__ import (...)``; the docstring and comments before it
    and ``as`` do not hide it."""
    source = ('# -*- coding: utf-8 -*-\n"""Doc."""\nfrom __future__ import (absolute_import,\n'
              "    division)\nprint 7 / 2\n")
    out, notes = python2.convert(source, "old.py")
    assert out.endswith("    division)\nprint(7 / 2)\n") and division_notes(notes) == []
    out, found = division.floor_divisions("from __future__ import division as _d\nx = 7 / 2\n")
    assert out.endswith("x = 7 / 2\n") and [(d.floor, d.reason) for d in found] == [(False, "")]
    assert division.future_division_line("import os\ndef f():\n    from __future__ import division\n") is None
    assert division.future_division_line("from __future__ import print_function\nx = `1`\n") is None
    assert division.future_division_line("'''d'''\nfrom __future__ import print_function, division\n") == 2


def test_in_a_notebook_future_division_holds_from_its_cell_on():
    """IPython keeps a cell's ``__future__`` flags for the cells after it: before it, Python 2's ``/``."""
    cells = ["print 7 / 2", "from __future__ import division", "print 7 / 2\nprint 9 / 2"]
    book = {"nbformat": 4, "nbformat_minor": 2, "metadata": {},
            "cells": [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": s}
                      for s in cells]}
    text, notes, sources = ipynb.convert(json.dumps(book), "book.ipynb")
    assert sources == ["print(7 // 2)", "", "print(7 / 2)\nprint(9 / 2)"]
    assert [(n.cell, n.note.line, n.note.what) for n in notes if n.note.what in (INTEGERS, CHECK)] == \
        [(1, 1, INTEGERS)]


# Byte and character columns.

MULTIBYTE = '''s = "日本語"; n = len(s) / 2; t = "a/b/日"
print("é", 7 / 2, "ü/ö", 9 // 2, n / 1, "→")
k = (len("ñandú") +  # ünïcödé / comment
     3) / 2
x = "→"; y = 2.5 / 2; z = 7 / 2  # ≠ / ≠
\x0c
w = "\u2028 / \u2028"; v = 9 / 2; u = 9 // 2 / 2
print(n, k, y, z, v, u)
'''


def test_slashes_after_multibyte_text_are_found_by_their_characters_not_their_bytes():
    """ast counts UTF-8 bytes, tokenize characters: the right ``/`` changes on lines with non-ASCII
    text before and after it, ``//`` already there and ``/`` inside strings and comments kept, and a
    form feed or U+2028 (line breaks to ``str.splitlines``, not to Python) moves no line."""
    out, found = floored(MULTIBYTE)
    assert out == '''s = "日本語"; n = len(s) // 2; t = "a/b/日"
print("é", 7 // 2, "ü/ö", 9 // 2, n // 1, "→")
k = (len("ñandú") +  # ünïcödé / comment
     3) // 2
x = "→"; y = 2.5 / 2; z = 7 // 2  # ≠ / ≠
\x0c
w = "\u2028 / \u2028"; v = 9 // 2; u = 9 // 2 // 2
print(n, k, y, z, v, u)
'''
    assert found == [(1, 22, INTEGERS), (2, 13, INTEGERS), (2, 35, INTEGERS), (4, 8, INTEGERS), (5, 17, ""),
                     (5, 28, INTEGERS), (7, 19, INTEGERS), (7, 35, INTEGERS)]
    assert {MULTIBYTE.split("\n")[line - 1][col] for line, col, _ in found} == {"/"}
    assert printed(out) == "é 3 ü/ö 4 1 →\n1 4 1.25 3 4 2\n"
    endings = 'n = len("日本")\r\nx = n / 2\ry = "é" + str(n / 2)\r\n'  # Windows' and old Macs' line ends
    assert division.floor_divisions(endings)[0] == 'n = len("日本")\r\nx = n // 2\ry = "é" + str(n // 2)\r\n'


def test_a_python_2_script_with_multibyte_text_converts_and_prints_what_python_2_printed(tmp_path):
    source = '# -*- coding: utf-8 -*-\ns = u"日本語日本語"; half = len(s) / 2\nprint u"é", half / 2, 7 / 2.0\n'
    (tmp_path / "old.py").write_text(source, encoding="utf-8")
    report = upgraded.upgrade(tmp_path / "old.py", None, None)
    out = report.target.read_text(encoding="utf-8")
    assert out == ('# -*- coding: utf-8 -*-\ns = "日本語日本語"; half = len(s) // 2\n'
                   'print("é", half // 2, 7 / 2.0)\n')
    assert printed(out) == "é 1 3.5\n"
    assert [(e.line, e.what) for e in report.entries if "/" in e.what[:2]] == [(2, INTEGERS), (3, INTEGERS)]


# Scopes: which binding a name is.


def test_a_global_rebound_to_a_float_in_a_function_is_not_an_integer_anywhere():
    source = ("n = 4\nm = 4\ndef grow():\n    global n\n    n = 2.5\ndef reads():\n    global m\n"
              "    return m / 2\nprint(n / 2)\ndef other():\n    return n / 2\n")
    out, found = floored(source)
    assert out == source.replace("m / 2", "m // 2")
    assert found == [(8, 13, INTEGERS), (9, 8, CHECK), (11, 13, CHECK)]


def test_nonlocal_rebinds_the_enclosing_functions_name_and_a_plain_assignment_does_not():
    source = ("def outer():\n    n = 4\n    def inner():\n        nonlocal n\n        n = 2.5\n    inner()\n"
              "    return n / 2\ndef kept():\n    n = 4\n    def inner():\n        n = 2.5\n        return n / 2\n"
              "    return n / 2, inner()\nprint(outer(), kept())\n")
    out, found = floored(source)
    assert found == [(7, 13, CHECK), (12, 17, ""), (13, 13, INTEGERS)]
    assert printed(out) == "1.25 (2, 1.25)\n"


def test_a_class_body_is_a_scope_its_methods_and_comprehensions_do_not_see():
    source = ("n = 4\nclass A:\n    n = 2.5\n    half = n / 2\n    halves = [n / 2 for _ in range(2)]\n"
              "    def method(self):\n        return n / 2\nclass B:\n    n = 3\n    del n\n    third = n / 2\n"
              "print(A.half, A.halves, A().method(), B.third)\n")
    out, found = floored(source)
    assert found == [(4, 13, ""), (5, 16, INTEGERS), (7, 17, INTEGERS), (11, 14, CHECK)]
    assert printed(out) == "1.25 [2, 2] 2 2.0\n"


def test_int_len_and_ord_the_code_binds_itself_are_not_the_builtins():
    source = ("int = float\ndef len(x):\n    return 2.5\nfrom chars import ord\na = int(7) / 2\nb = len('ab') / 2\n"
              "c = ord('a') / 2\ndef f(size):\n    int = size\n    return int(7) / 2\n"
              "def g():\n    return len('a') / 2\n"
              "def h():\n    return abs(-3) / 2, range(4)[3] / 2\n")
    out, found = floored(source)
    assert out == source
    assert [reason for _, _, reason in found] == [CHECK] * 7


def test_exec_and_star_imports_leave_the_names_they_may_bind_unknown():
    source = ("from pylab import *\nn = 4\nprint(n / 2, len(x) / 2)\nfor i in range(3):\n    print(i / 2)\n"
              "k = 5\nfrom os.path import *\nprint(k / 2)\n")
    out, found = floored(source)
    assert found == [(3, 8, CHECK), (3, 20, CHECK), (5, 12, CHECK), (8, 8, CHECK)]
    source = ("n = 4\ndef f():\n    k = 4\n    exec('global n; n = 2.5')\n    return k / 2\nprint(f(), n / 2)\n"
              "m = 4\nexec('m = 2.5', {})\n")
    out, found = floored(source)
    assert found == [(5, 13, INTEGERS), (6, 13, CHECK)]
    assert printed(out) == "2 1.25\n"
    out, found = floored("m = 4\nexec('m = 2.5', {})\nprint(m / 2)\n")
    assert found == [(3, 8, INTEGERS)]


def test_comprehensions_bind_their_own_names_and_a_walrus_binds_around_them():
    source = ("i = 2.5\nys = [i / 2 for i in range(4)]\nprint(ys, i / 2)\nn = 4\n"
              "zs = [(n := x * 0.5) for x in range(3)]\nprint(n / 2)\n"
              "def f(data):\n    m = 4\n    [(m := v) for v in data]\n    return m / 2\n"
              "g = lambda n=len('abc') / 2: n / 2\nprint(g())\n")
    out, found = floored(source)
    assert found == [(2, 8, INTEGERS), (3, 12, ""), (6, 8, CHECK), (10, 13, CHECK), (11, 24, INTEGERS),
                     (11, 31, CHECK)]
    assert printed(out) == "[0, 0, 1, 1] 1.25\n0.5\n0.5\n"


# Indices, slice bounds, range().

CROP = '''import numpy as np
def crop(img, size):
    h, w = img.shape[:2]
    top, left = (h - size) / 2, img.shape[1] / 2
    return img[(h - size) / 2:(h + size) / 2, (w - size) / 2:(w + size) / 2], top, left
def pick(a, i, n):
    return a[i / 2], a[(i / 2) + 1], a[n / 2:], [k for k in range(n / 2)], {3.5: "half"}[i / 2.0 if n else 0]
def counts(img, step):
    rows, cols, channels = img.shape
    return rows / 2, len(img) / 3, int(step / 2), range(0, rows, step / 2)[-1]
img = np.zeros((300, 301, 3))
part, top, left = crop(img, 224)
print(part.shape, top, left)
print(pick(list(range(10)), 7, 5))
print(counts(img, 9))
'''


def test_a_quotient_used_as_an_index_slice_bound_or_range_argument_becomes_floor_division():
    """Where Python 3 needs an integer a float is a TypeError, so Python 2 divided integers there:
    ``//`` even where the operands' types are not known, unless a side is a float. Elements of a
    ``.shape`` and ``len()`` are integers wherever they are."""
    out, found = floored(CROP)
    lines = CROP.split("\n")
    lines[3] = "    top, left = (h - size) / 2, img.shape[1] // 2"
    lines[4] = "    return img[(h - size) // 2:(h + size) // 2, (w - size) // 2:(w + size) // 2], top, left"
    lines[6] = ("    return a[i // 2], a[(i // 2) + 1], a[n // 2:], [k for k in range(n // 2)], "
                '{3.5: "half"}[i / 2.0 if n else 0]')
    lines[9] = "    return rows // 2, len(img) // 3, int(step / 2), range(0, rows, step // 2)[-1]"
    assert out == "\n".join(lines)
    assert found == [(4, 27, CHECK), (4, 45, INTEGERS), (5, 26, INDEX), (5, 41, INDEX), (5, 57, INDEX),
                     (5, 72, INDEX), (7, 15, INDEX), (7, 26, INDEX), (7, 41, INDEX), (7, 68, INDEX),
                     (7, 91, ""), (10, 16, INTEGERS), (10, 30, INTEGERS), (10, 44, CHECK), (10, 70, INDEX)]
    assert printed(out) == ("(224, 224, 3) 38.0 150\n(3, 4, [2, 3, 4, 5, 6, 7, 8, 9], [0, 1], 'half')\n"
                            "(150, 100, 4, 296)\n")


def test_the_report_says_why_each_slash_changed(tmp_path):
    (tmp_path / "old.py").write_text("def f(a, i):\n    return a[i / 2], len(a) / 2, i / 2\n")
    report = upgraded.upgrade(tmp_path / "old.py", None, None)
    assert report.target.read_text() == "def f(a, i):\n    return a[i // 2], len(a) // 2, i / 2\n"
    lines = (tmp_path / "old-upgraded.py").read_text()
    assert lines.count("//") == 2
    assert [str(e) for e in report.entries if "/" in e.what[:2]] == [
        "old-upgraded.py:2: changed: / -> // (an index, slice bound or range() argument needs an integer)",
        "old-upgraded.py:2: changed: / -> // (both sides integers, as Python 2 divided them)",
        "old-upgraded.py:2: check: / is true division now: where Python 2 divided integers here, use //"]


def test_names_set_through_globals_are_unknown_and_tuples_bind_pairwise():
    out, found = floored("n = 4\nfor k, v in cfg.items():\n    globals()[k] = v\nprint(n / 2)\n")
    assert out.endswith("print(n / 2)\n") and found == [(4, 8, CHECK)]
    out, found = floored("class A:\n    n = 4\n    vars()['n'] = 2.5\n    half = n / 2\n")
    assert found == [(4, 13, CHECK)]
    out, found = floored("a, b = 7, 2.5\n(h, w), c = (3, 4), x\nprint(a / 2, b / 2, h / w, c / 2)\n")
    assert found == [(3, 8, INTEGERS), (3, 15, ""), (3, 22, INTEGERS), (3, 29, CHECK)]
    assert out.endswith("print(a // 2, b / 2, h // w, c / 2)\n")
