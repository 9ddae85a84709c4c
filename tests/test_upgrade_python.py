"""``caffetool upgrade``'s Python conversion (:mod:`caffetool.upgrade.python2`) on what is not a
plain Python 2 script: Python 3 files, odd encodings and line endings, many files, inputs past its
bounds, statements in every position for caffetool's own fixers, and the fall back to 2to3's
fixers alone."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import time
from pathlib import Path

import pytest

from caffetool.errors import ConfigError
from caffetool.upgrade import bytesflow, python2, sourcetext

CAFFETOOL = Path(sys.executable).with_name("caffetool")

PYTHON3_FILES = {
    "print_values.py": 'loss = 0.5\nprint("loss", loss)\n',
    "print_file.py": 'import sys\nx = 3\nprint(x, file=sys.stderr)\nprint("done", end="")\n',
    "fstring.py": 'n = 7\nhalf = n / 2\nitems = map(str, range(n))\nname = input(f"name {n}? ")\nprint(name)\n',
    "annotations.py": ('from __future__ import annotations\n\n\ndef mean(values: list[float], *, weights=None) -> float:\n'
                       '    keys = {"a": 1}.keys()\n    total = 4 / 2\n    return sum(values) / len(values)\n'),
    "nonlocal.py": ('def counter():\n    count = 0\n\n    def step():\n        nonlocal count\n        count += 1\n'
                    '        return count\n    return step\n'),
    "async.py": 'import asyncio\n\n\nasync def main():\n    await asyncio.sleep(0)\n    return zip([1], [2])\n',
    "fallback.py": ('try:\n    import cPickle as pickle\nexcept ImportError:\n    import pickle\nx: int = 3\n'
                    'print(u"caf\\u00e9", pickle.dumps(x))\n'),
    "iterator.py": ('class Steps:\n    def __iter__(self):\n        return self\n\n    def next(self) -> int:\n'
                    '        return 1\n'),
    "sort.py": 'def ordered(xs: list) -> list:\n    return sorted(xs, key=len,)\n',
    "match.py": 'def kind(x):\n    match x:\n        case 1:\n            return "one"\n        case _:\n            return x / 2\n',
}


@pytest.mark.parametrize("name", sorted(PYTHON3_FILES))
def test_a_python_3_file_comes_out_byte_for_byte(name):
    """A Python 3 file is not reconverted: no ``print(("loss", 0.5))``, no ``list(map())``,
    ``eval(input())``, ``__next__`` or ``list(d.keys())``, its ``/`` and ``from __future__`` lines
    kept; one that fissix cannot read (``match``) is left as it is with a note, not an error."""
    source = PYTHON3_FILES[name]
    converted, notes = python2.convert(source, name)
    assert converted == source
    assert all(not n.changed for n in notes)
    if name == "match.py":
        assert [n.what for n in notes] == ["Python 3 already, in syntax 2to3's grammar does not read: left as it was"]


def test_a_python_3_file_gets_only_what_python_3_lacks():
    """What does not exist in Python 3 (``xrange``, ``d.iteritems()``, ``unicode``) is still fixed
    in a Python 3 file; the rest of it is kept."""
    source = 'def f(d: dict):\n    for i in xrange(3):\n        print(i, d.iteritems(), d.keys(), unicode(i), u"x")\n'
    converted, notes = python2.convert(source, "mixed.py")
    assert converted == 'def f(d: dict):\n    for i in range(3):\n        print(i, iter(d.items()), d.keys(), str(i), u"x")\n'
    assert {n.what.split(":")[0] for n in notes if n.changed} == {"xrange", "dict", "unicode"}


def test_a_python_2_file_that_python_3_also_parses_keeps_its_print_calls():
    """Read as 2to3 -p reads it: ``print(x)`` stays, integer division is still Python 2's."""
    converted, _ = python2.convert("n = 7\nprint(n / 2)\nfor i in xrange(n):\n    pass\n", "both.py")
    assert converted == "n = 7\nprint(n // 2)\nfor i in range(n):\n    pass\n"


def test_the_command_copies_python_3_files_unchanged_and_reports_no_error(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    for name, source in PYTHON3_FILES.items():
        (project / name).write_text(source)
    done = subprocess.run([str(CAFFETOOL), "upgrade", str(project)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "not Python 2 or 3" not in done.stdout and "Traceback" not in done.stderr
    for name, source in PYTHON3_FILES.items():
        assert (tmp_path / "project-upgraded" / name).read_text() == source, name
    assert "match.py:2: check: Python 3 already" in done.stdout


def round_trip(data: bytes, folder: Path) -> tuple[str, bytes]:
    """``data`` as a file read, converted and written back: the converted text and the bytes written."""
    (folder / "coded.py").write_bytes(data)
    text, stored = sourcetext.read_source(folder / "coded.py")
    converted, _ = python2.convert(text, "coded.py")
    sourcetext.write_source(folder / "coded-upgraded.py", converted, stored)
    return converted, (folder / "coded-upgraded.py").read_bytes()


def test_a_coding_line_is_read_and_the_file_written_back_in_its_encoding(tmp_path):
    data = '# -*- coding: latin-1 -*-\nname = "café"\nprint name\n'.encode("latin-1")
    converted, written = round_trip(data, tmp_path)
    assert converted == '# -*- coding: latin-1 -*-\nname = "café"\nprint(name)\n'
    assert written == '# -*- coding: latin-1 -*-\nname = "café"\nprint(name)\n'.encode("latin-1")


def test_a_bom_and_crlf_line_endings_are_kept(tmp_path):
    data = b'\xef\xbb\xbfname = "caf\xc3\xa9"\r\nprint name\r\n'
    _, written = round_trip(data, tmp_path)
    assert written == b'\xef\xbb\xbfname = "caf\xc3\xa9"\r\nprint(name)\r\n'


def test_mixed_line_endings_stay_as_they_were_line_by_line(tmp_path):
    data = b"x = 1\r\nprint x\nprint 2\r\n"
    _, written = round_trip(data, tmp_path)
    assert written == b"x = 1\r\nprint(x)\nprint(2)\r\n"


def test_bytes_that_are_not_text_in_the_declared_encoding_are_refused_as_such():
    with pytest.raises(UnicodeDecodeError):
        sourcetext.decode_source(b"x = '\xff'\n")
    with pytest.raises(UnicodeDecodeError):
        sourcetext.decode_source(b"# coding: no-such-codec\nx = 1\n")


def test_reusing_the_tool_keeps_no_state_from_one_file_to_the_next():
    """One tool converts every file: the notes, the fixers' log and their per-file state are the
    file's own (a file with a Transformer hides the setters' notes, one without shows them)."""
    with_transformer = "import caffe\nt = caffe.io.Transformer({})\nt.set_mean('data', m)\nprint 1\n"
    without = "import caffe\nnet.set_mean('data', m)\n"
    _, first = python2.convert(with_transformer, "a.py")
    _, second = python2.convert(without, "b.py")
    _, third = python2.convert(with_transformer, "c.py")
    assert not any("set_mean" in n.what for n in first) and first == third
    assert [n.what for n in second] == [
        "set_mean(): preprocessing is caffe.io.Transformer's now: transformer.set_mean('data', mean)"]


def test_two_hundred_small_scripts_convert_in_seconds():
    """Each file was given a new RefactoringTool (34 s for 200 two-line scripts): one is built a process."""
    python2.convert("print 1\n", "warm.py")
    start = time.perf_counter()
    for n in range(200):
        python2.convert(f"x = {n}\nprint x / 2\n", f"s{n}.py")
    assert time.perf_counter() - start < 10


def test_a_four_megabyte_line_is_refused_by_name_at_once():
    source = "data = [" + ", ".join(["123456"] * 520_000) + "]\nprint data\n"
    assert len(source) > 4_000_000
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=r"^huge.py: 4,160,\d{3} characters, more than the 1,000,000 the converter "
                                          r"takes .*copied unchanged: move such data into a file of its own"):
        python2.convert(source, "huge.py")
    assert time.perf_counter() - start < 3


def test_a_long_line_within_the_size_bound_is_refused_by_name():
    source = "print 1\ndata = [" + ", ".join(["1"] * 20_000) + "]\n"
    with pytest.raises(ConfigError, match=r"^wide.py: line 2: 60,007 characters, more than the 20,000"):
        python2.convert(source, "wide.py")


DEEP = "x = " + "\n".join(["(" * 100] * 100) + "1" + ")" * 10_000 + "\n"  # 10,000 deep, in lines of 100


@pytest.mark.parametrize("source, error", [
    (DEEP + "print x\n", "line 2: brackets nested more than 100 deep"),
    ("x = " + "not " * 3_000 + "y\nprint x\n", "nested too deeply to convert (past Python's recursion limit)"),
    ("x = " + "-" * 5_000 + "1\n", "nested too deeply to convert (past Python's recursion limit)"),
])
def test_deep_nesting_is_refused_by_name_not_a_traceback(source, error):
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=rf"^deep.py: {error.replace('(', '.').replace(')', '.')}.*copied unchanged"):
        python2.convert(source, "deep.py")
    assert time.perf_counter() - start < 5


def test_the_command_copies_a_file_past_the_bounds_unchanged_and_names_it(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    huge = "data = [" + ", ".join(["123456"] * 520_000) + "]\n"
    (project / "huge.py").write_text(huge)
    (project / "deep.py").write_text(DEEP)
    (project / "old.py").write_text("print 'ok'\n")
    done = subprocess.run([str(CAFFETOOL), "upgrade", str(project)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "project-upgraded"
    assert (out / "huge.py").read_text() == huge and (out / "old.py").read_text() == "print('ok')\n"
    assert "huge.py: check: 4,160,00" in done.stdout and "more than the 1,000,000 the converter takes" in done.stdout
    assert "deep.py: check: line 2: brackets nested more than 100 deep" in done.stdout, done.stdout
    assert "Traceback" not in done.stderr


PYCAFFE_POSITIONS = {
    "block start": ("def f(net):\n    net.set_mode_gpu()\n", "def f(net):\n    caffe.set_mode_gpu()\n"),
    "after a comment": ("def f(net):\n    x = 1\n    # the GPU\n    net.set_mode_gpu()\n    return x\n",
                        "def f(net):\n    x = 1\n    # the GPU\n    caffe.set_mode_gpu()\n    return x\n"),
    "after a decorator": ("@timed\ndef f(net):\n    # first\n    net.set_mode_gpu()\n",
                          "@timed\ndef f(net):\n    # first\n    caffe.set_mode_gpu()\n"),
    "one-line suite": ("if gpu: net.set_mode_gpu()\n", "if gpu: caffe.set_mode_gpu()\n"),
    "module level after a comment": ("x = 1\n# the GPU\nclassifier.net.set_mode_gpu()\n",
                                     "x = 1\n# the GPU\ncaffe.set_mode_gpu()\n"),
    "caffe's own, after a comment": ("if gpu:\n    y = 2\n    # the GPU\n    caffe.set_mode_gpu()\n    net.set_device(0)\n",
                                     "if gpu:\n    y = 2\n    # the GPU\n    caffe.set_mode_gpu()\n    caffe.set_device(0)\n"),
}


@pytest.mark.parametrize("position", sorted(PYCAFFE_POSITIONS))
def test_pycaffe_helpers_keep_their_comments_and_indentation(position):
    source, expected = PYCAFFE_POSITIONS[position]
    converted, notes = python2.convert("import caffe\n" + source, "gpu.py")
    assert converted == "import caffe\n" + expected
    assert all("#" not in n.what for n in notes)


def test_string_functions_keep_comments_indentation_and_a_variable_named_string():
    source = ("import string\n\n\ndef f(words, a, b):\n    x = 1\n    # joined\n    s = string.join(words, ',')\n"
              "    return string.upper(a ** b), s\n\n\ndef g(string):\n    return string.replace('a', 'b')\n")
    converted, _ = python2.convert(source, "s.py")
    assert converted == ("import string\n\n\ndef f(words, a, b):\n    x = 1\n    # joined\n    s = ','.join(words)\n"
                         "    return (a ** b).upper(), s\n\n\ndef g(string):\n    return string.replace('a', 'b')\n")


def test_where_caffetools_fixer_breaks_a_line_2to3s_fixers_alone_convert_the_file(tmp_path):
    """Python 2's ``string.zfill`` takes a number; caffetool's fixer makes ``5.zfill(3)`` of it,
    which Python 3 does not parse: the file is converted by 2to3's fixers alone, the line named."""
    source = "import string\nprint string.zfill(5, 3)\nprint string.upper('a')\n"
    converted, notes = python2.convert(source, "pad.py")
    assert converted == "import string\nprint(string.zfill(5, 3))\nprint(string.upper('a'))\n"
    ast.parse(converted)
    assert [n for n in notes if not n.changed] == [python2.Note(
        2, "string_module: caffetool's fixer made this line invalid Python 3 (invalid decimal literal); the file was "
           "converted by 2to3's fixers alone, without caffetool's: make its changes by hand", False)]
    (tmp_path / "pad.py").write_text(source)
    done = subprocess.run([str(CAFFETOOL), "upgrade", str(tmp_path / "pad.py")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "pad-upgraded.py").read_text() == converted
    assert "pad-upgraded.py:2: check: string_module: caffetool's fixer made this line invalid" in done.stdout


def test_where_2to3s_fixers_fail_too_the_file_is_named_with_its_line():
    with pytest.raises(ConfigError, match=r"^bad.py: not Python 2 or 3 \(line 2\); it was copied unchanged"):
        python2.convert("x = 1\nprint x y\n", "bad.py")


def test_sort_of_an_imported_module_or_with_no_function_is_not_taken_for_python_2s_cmp():
    """2to3's fix_sorted takes any ``X.sort(arg)`` for ``list.sort(cmp)``; ``np.sort(index)``
    sorts ``index``, and ``a.sort(0)`` is numpy's axis: those stay, a list's cmp is still converted."""
    source = ("import numpy as np\nimport torch\nfrom numpy import random\norder = np.sort(index)\n"
              "values, _ = torch.sort(scores, 0)\nnumbers = random.sort(x)\nblobs.sort(0)\nrows.sort(-1)\n"
              "names.sort(by_length)\npairs.sort(lambda a, b: a - b)\nranked = sorted(names, by_length)\n")
    converted, notes = python2.convert(source, "sorts.py")
    assert converted == ("import numpy as np\nimport torch\nfrom numpy import random\nfrom functools import cmp_to_key\n"
                         "order = np.sort(index)\nvalues, _ = torch.sort(scores, 0)\nnumbers = random.sort(x)\n"
                         "blobs.sort(0)\nrows.sort(-1)\nnames.sort(key=cmp_to_key(by_length))\n"
                         "pairs.sort(key=cmp_to_key(lambda a, b: a - b))\nranked = sorted(names, key=cmp_to_key(by_length))\n")
    assert [(n.line, n.what) for n in notes if n.changed] == [
        (9, "sorted: names.sort(by_length)"), (10, "sorted: pairs.sort(lambda a, b: a - b)"),
        (11, "sorted: sorted(names, by_length)")]


def test_a_module_bound_in_a_function_is_still_a_module_for_sort():
    source = "def order(index):\n    import numpy\n    return numpy.sort(index)\n"
    assert python2.convert(source, "inner.py") == (source, [])


def sibling_project(folder: Path, package: bool) -> Path:
    """A folder of two Python 2 modules, one importing the other without a dot."""
    folder.mkdir()
    (folder / "sibling.py").write_text("def f():\n    return 1\n")
    (folder / "user.py").write_text("from sibling import f\nimport sibling\nprint f()\n")
    if package:
        (folder / "__init__.py").write_text("")
    return folder


@pytest.mark.parametrize("package", [True, False])
def test_sibling_imports_are_found_beside_the_file_not_the_current_folder(tmp_path, package):
    """2to3 makes ``from sibling import f`` relative where a module of that name is beside the file
    in a package (an ``__init__.py``); a folder of scripts is run with itself on sys.path, so its
    imports stay. The file's real place decides, wherever the command is run from."""
    project = sibling_project(tmp_path / "lib", package)
    source = (project / "user.py").read_text()
    converted, notes = python2.convert(source, "lib/user.py", path=project / "user.py")
    if package:
        assert converted == "from .sibling import f\nfrom . import sibling\nprint(f())\n"
        assert [(n.line, n.what) for n in notes] == [
            (1, "import: from sibling import f"), (2, "import: import sibling"), (3, "print: print f()")]
    else:
        assert converted == "from sibling import f\nimport sibling\nprint(f())\n"


def test_without_the_files_path_sibling_imports_are_kept(tmp_path, monkeypatch):
    """With no path (a notebook's cells, a text on its own), no folder is looked in, the current
    one included: a notebook imports the modules beside it absolutely."""
    monkeypatch.chdir(sibling_project(tmp_path / "lib", True))
    source = "from sibling import f\nprint f()\n"
    assert python2.convert(source, "user.py")[0] == "from sibling import f\nprint(f())\n"


def test_every_note_is_numbered_by_the_original_files_lines():
    """``from functools import reduce`` added on top shifts the converted lines; the division and
    bytes notes, made on the converted text, still name the lines of the file as it was."""
    source = ("import os\nx = reduce(f, [1])\nn = 7\nprint n / 2\nimport hashlib\n"
              "data = open('a.jpg').read()\nprint hashlib.md5(data).hexdigest()\n")
    converted, notes = python2.convert(source, "lines.py")
    assert converted == ("import os\nfrom functools import reduce\nx = reduce(f, [1])\nn = 7\nprint(n // 2)\n"
                         "import hashlib\ndata = open('a.jpg', 'rb').read()\nprint(hashlib.md5(data).hexdigest())\n")
    assert [(n.line, n.what.split(":")[0].split(" (")[0]) for n in notes] == [
        (4, "/ -> //"), (4, "print"), (6, "open() in binary mode"), (7, "print")]


def test_a_future_division_import_counts_from_its_original_line():
    """``from __future__ import division`` below an added line still makes every ``/`` after it true division."""
    source = "from __future__ import division\nx = reduce(f, [1])\nprint 7 / 2\n"
    converted, notes = python2.convert(source, "future.py")
    assert converted == "from functools import reduce\n\nx = reduce(f, [1])\nprint(7 / 2)\n"
    assert [(n.line, n.what) for n in notes] == [
        (1, "future: from __future__ import division"), (3, "print: print 7 / 2")]


STDLIB = ("threading", "doctest", "configparser")


@pytest.mark.parametrize("module", STDLIB)
def test_the_bytes_pass_ends_quickly_on_names_and_functions_that_refer_to_each_other(module):
    """Python's own modules are full of names assigned from each other and functions calling each
    other: following bytes through them ends, at once, and changes nothing."""
    path = Path(importlib.import_module(module).__file__)
    source = path.read_text(encoding="utf-8")
    started = time.perf_counter()
    assert bytesflow.bytes_flow(source) == (source, [])
    assert time.perf_counter() - started < 5


def test_a_python_3_file_gets_no_bytes_pass():
    """A Python 3 file's ``str`` is text as its author meant, as its ``/`` divides as they meant."""
    source = 'import hashlib\ndata = open("a.txt").read()\nprint(f"{hashlib.md5(data)}")\n'
    assert python2.convert(source, "modern.py") == (source, [])
    python_2 = 'import hashlib\ndata = open("a.txt").read()\nprint hashlib.md5(data)\n'
    assert python2.convert(python_2, "old.py")[0] == \
        'import hashlib\ndata = open("a.txt", \'rb\').read()\nprint(hashlib.md5(data))\n'


def test_bytes_are_followed_through_many_assignments_and_cycles_in_linear_time():
    """A name assigned in two places from a name assigned in two places, forty deep, is 2**40 paths
    when each is followed on its own; with each name's origins found once, it takes no time, and
    functions calling each other end as well."""
    chain = "".join(f"x{i} = x{i - 1}\nx{i} = x{i - 1}\n" for i in range(1, 40))
    source = ("import hashlib\nx0 = open('a.jpg').read()\n" + chain +
              "def ping(data, n):\n    return pong(data, n - 1) if n else data\n\n"
              "def pong(data, n):\n    return ping(data, n)\n\n"
              "hashlib.md5(x39)\nhashlib.sha1(ping(x39, 3))\ny = str(y)\nhashlib.md5(y)\n")
    started = time.perf_counter()
    converted, flows = bytesflow.bytes_flow(source)
    assert time.perf_counter() - started < 2
    assert converted == source.replace("open('a.jpg')", "open('a.jpg', 'rb')")
    assert [(f.line, f.what.split(":")[0], f.changed) for f in flows] == [
        (2, "open() in binary mode", True), (89, "str() goes where bytes are needed", False)]


def test_a_chain_of_names_deeper_than_python_recurses_is_left_unknown_not_an_error():
    """Two thousand names each assigned from the one before: past the depth followed, where the
    bytes come from is not known, so nothing changes, and no RecursionError."""
    source = ("import hashlib\nx0 = open('a.jpg').read()\n" + "".join(f"x{i} = x{i - 1}\n" for i in range(1, 2000))
              + "hashlib.md5(x1999)\n")
    assert bytesflow.bytes_flow(source) == (source, [])


def test_the_command_makes_a_packages_sibling_imports_relative_from_any_folder(tmp_path):
    """Run from another folder, the command still finds ``sibling.py`` beside ``user.py`` in a
    package and converts as 2to3 does there; in a folder of scripts (no ``__init__.py``) it keeps them."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for package in (True, False):
        project = sibling_project(tmp_path / ("package" if package else "scripts"), package)
        done = subprocess.run([str(CAFFETOOL), "upgrade", str(project)], capture_output=True, text=True,
                              timeout=300, cwd=elsewhere)
        assert done.returncode == 0, done.stderr
        expected = ("from .sibling import f\nfrom . import sibling\n" if package else
                    "from sibling import f\nimport sibling\n") + "print(f())\n"
        assert (tmp_path / f"{project.name}-upgraded" / "user.py").read_text() == expected
        report = (tmp_path / f"{project.name}-upgraded" / "UPGRADE-REPORT.txt").read_text()
        assert ("user.py:1: changed: import: from sibling import f\nuser.py:2: changed: import: import sibling\n"
                in report) is package, report


def test_next_of_an_imported_module_is_a_function_not_an_iterators_method():
    """fix_next makes ``it.next()`` ``next(it)``; ``reader.next()`` of a module the file imports
    is that module's function, kept."""
    source = "import reader\nfrom data import feed\nbatch = reader.next()\nitem = feed.queue.next()\nrow = rows.next()\n"
    converted, notes = python2.convert(source, "feeds.py")
    assert converted == "import reader\nfrom data import feed\nbatch = reader.next()\nitem = feed.queue.next()\nrow = next(rows)\n"
    assert notes == [python2.Note(5, "next: rows.next()", True)]
