"""``caffetool upgrade`` on Jupyter notebooks: those of nbformat 1 to 3 converted to 4 by nbformat,
JSON of other shapes named in the report and copied unchanged, IPython's help told from comments and
strings, report lines as the cells read, and everything but the converted code kept as it was."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from caffetool import extras
from caffetool.errors import ConfigError
from caffetool.upgrade import ipynb, upgraded

CAFFETOOL = Path(sys.executable).with_name("caffetool")
PY2_CELL = 'from cStringIO import StringIO\nprint "hi"'


def notebook(*sources: str | list[str], **metadata) -> dict:
    """An nbformat 4 notebook with a code cell for each of ``sources``."""
    cells = [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": s}
             for s in sources]
    return {"cells": cells, "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}


def converted(book: dict) -> tuple[dict, list[ipynb.CellNote]]:
    new, notes, _ = ipynb.convert(json.dumps(book, indent=1), "nb.ipynb")
    return json.loads(new), notes


def code_of(book: dict) -> list[str]:
    return ["".join(c["source"]) for c in book["cells"] if c["cell_type"] == "code"]


# An IPython 2 notebook (nbformat 3) as Caffe's first notebooks were saved: cells in a worksheet, code
# in "input", "prompt_number", the "pyout" and "display_data" outputs, a heading cell.
V3 = {
    "metadata": {"name": "old", "signature": "sha256:0123"},
    "nbformat": 3, "nbformat_minor": 0,
    "worksheets": [{"metadata": {}, "cells": [
        {"cell_type": "heading", "level": 1, "metadata": {}, "source": "Caffe, 2014 ✓"},
        {"cell_type": "markdown", "metadata": {}, "source": ["Some *text*, ü\n", "and more"]},
        {"cell_type": "code", "collapsed": False, "language": "python", "metadata": {}, "prompt_number": 1,
         "input": ["from cStringIO import StringIO\n", "import numpy as np\n", "print \"hi\"\n", "np.zeros?"],
         "outputs": [{"output_type": "stream", "stream": "stdout", "text": ["hi\n"]}]},
        {"cell_type": "code", "collapsed": False, "language": "python", "metadata": {}, "prompt_number": 2,
         "input": "n = 10\nprint n / 4",
         "outputs": [{"output_type": "pyout", "prompt_number": 2, "metadata": {}, "text": ["2"]},
                     {"output_type": "display_data", "metadata": {}, "png": "iVBORw0KGgo=", "text": ["<Figure>"]}]},
        {"cell_type": "raw", "metadata": {}, "source": "raw text"}]}],
}
# nbformat 2 (IPython 0.12): no nbformat_minor, no cell metadata.
V2 = {"metadata": {"name": "older"}, "nbformat": 2, "worksheets": [{"cells": [
    {"cell_type": "code", "collapsed": False, "input": PY2_CELL, "language": "python", "outputs": [],
     "prompt_number": 1},
    {"cell_type": "markdown", "source": "md"}]}]}


@pytest.mark.parametrize("old", [V3, V2], ids=["nbformat-3", "nbformat-2"])
def test_an_old_notebook_becomes_a_valid_nbformat_4_one_with_its_python_2_converted(tmp_path, old):
    """nbformat 3 and 2 notebooks through the walk: converted to 4 by nbformat (the result passes
    nbformat's own validation of v4, and is written as Jupyter saves it), the code as Python 3,
    IPython's help kept, the outputs as nbformat converts them, the report saying so, and the same
    notebook upgrading the same each time (cell ids made from the cells, not drawn at random)."""
    (tmp_path / "proj").mkdir()
    text = json.dumps(old, indent=1, ensure_ascii=False)
    (tmp_path / "proj" / "old.ipynb").write_text(text, encoding="utf-8")
    report = upgraded.upgrade(tmp_path / "proj", None, None)
    written = (report.target / "old.ipynb").read_text(encoding="utf-8")
    book = nbformat.reads(written, as_version=nbformat.NO_CONVERT)
    nbformat.validate(book)
    assert book.nbformat == 4 and book.metadata.kernelspec.name == "python3"
    code = code_of(book)
    assert "from io import StringIO" in code[0] and 'print("hi")' in code[0]
    assert (tmp_path / "proj" / "old.ipynb").read_text(encoding="utf-8") == text
    said = {(e.path, e.what) for e in report.entries if e.changed}
    assert ("old.ipynb", f"nbformat {old['nbformat']} -> 4 (nbformat's conversion, as Jupyter's on opening it)") in said
    assert ("old.ipynb", "kernelspec: none -> python3") in said
    assert ipynb.convert(text, "old.ipynb")[0] == written
    assert "orig_nbformat" not in book.metadata and written.endswith("}\n")
    assert json.loads(written)["cells"][-2 if old is V3 else 0]["source"][0].endswith("\n")  # lines, as Jupyter saves
    if old is V3:
        assert code[0].endswith("np.zeros?") and code[1] == "n = 10\nprint(n // 4)"
        assert [c.cell_type for c in book.cells] == ["markdown", "markdown", "code", "code", "raw"]
        assert book.cells[0].source == "# Caffe, 2014 ✓" and "✓" in written
        assert book.cells[2].outputs == [{"output_type": "stream", "name": "stdout", "text": "hi\n"}]
        result, figure = book.cells[3].outputs
        assert result.output_type == "execute_result" and result.execution_count == 2
        assert figure.data == {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}


def test_without_nbformat_an_old_notebook_is_copied_unchanged_and_the_report_names_the_pip_install(tmp_path):
    """Where the notebook extra is not installed (nbformat unimportable in a child Python), an nbformat 3
    notebook is copied byte for byte and the report's line says what adds it; a current notebook in
    the same project is upgraded all the same."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "old.ipynb").write_text(json.dumps(V3))
    (project / "new.ipynb").write_text(json.dumps(notebook(PY2_CELL)))
    child = ("import sys; sys.modules['nbformat'] = None\n"
             "from pathlib import Path\nfrom caffetool.upgrade import upgraded\n"
             f"print(upgraded.upgrade(Path({str(project)!r}), None, None).text())")
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    target = tmp_path / "proj-upgraded"
    assert (target / "old.ipynb").read_bytes() == (project / "old.ipynb").read_bytes()
    assert ("old.ipynb: check: a notebook of nbformat 3, which only nbformat converts to 4, and it is not installed "
            f"here: {extras.install_command('notebook')}; it was copied unchanged") in done.stdout, done.stdout
    assert 'print("hi")' in code_of(json.loads((target / "new.ipynb").read_text()))[0]


DEEP = "[" * 100_000 + "]" * 100_000
# JSON that is no notebook nbformat can read (or no Python one), and the reason the report gives.
MISSHAPEN = {
    "cells-object": ('{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": {"a": 1}}',
                     "cells is an object, not an array"),
    "metadata-list": (json.dumps({**notebook("x = 1"), "metadata": []}), "metadata is an array, not an object"),
    "kernelspec-string": (json.dumps(notebook("x = 1", kernelspec="python2")),
                          "metadata.kernelspec is a string, not an object"),
    "source-number": (json.dumps(notebook(3)), "cells[0].source is a number, not a string or an array of strings"),
    "source-list-of-numbers": (json.dumps(notebook([1, 2])),
                               "cells[0].source[0] is a number, not a string"),
    "cell-not-object": (json.dumps({**notebook("x = 1"), "cells": [notebook("y")["cells"][0], "print 1"]}),
                        "cells[1] is a string, not an object"),
    "cell-type-number": (json.dumps({**notebook(), "cells": [{"cell_type": 1, "source": "x"}]}),
                         "cells[0].cell_type is a number, not a string"),
    "deep-array": (DEEP, "its JSON nests deeper than Python can read"),
    "deep-in-metadata": ('{"nbformat": 4, "nbformat_minor": 5, "cells": [], "metadata": {"x": ' + DEEP + "}}",
                         "its JSON nests deeper than Python can read"),
    "invalid-json": ('{"nbformat": 4, "cells": [},', "not JSON (Expecting value: line 1 column 27 (char 26))"),
    "empty": ("", "the file is empty"),
    "blank": ("\n  \n", "the file is empty"),
    "top-level-array": ("[1, 2]", "the top level is an array, not an object"),
    "no-cells": ('{"metadata": {}}', "nbformat is null, not a version number such as 4"),
    "v4-without-cells": ('{"nbformat": 4, "nbformat_minor": 5, "metadata": {}}', "it has no 'cells' array"),
    "nbformat-string": ('{"nbformat": "4", "cells": []}', "nbformat is a string, not a version number such as 4"),
    "nbformat-5": ('{"nbformat": 5, "cells": []}', "nbformat 5 is not a version nbformat reads (1 to 4)"),
    "v3-cell-not-object": ('{"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": [{"cells": ["x"]}]}',
                           "nbformat 3, ValidationError: The notebook is invalid and is missing an expected key: "
                           "'str' object has no attribute 'cell_type'"),
    "v3-without-worksheets": ('{"nbformat": 3, "nbformat_minor": 0, "metadata": {}}',
                              "nbformat 3, ValidationError: The notebook is invalid and is missing an expected key: "
                              "worksheets"),
    "v3-input-number": (json.dumps({**V3, "worksheets": [{"cells": [{"cell_type": "code", "input": 5, "outputs": []}]}]}),
                        "cells[0].source is a number, not a string or an array of strings"),
}


@pytest.mark.parametrize("case", sorted(MISSHAPEN))
def test_json_of_another_shape_is_named_with_its_reason(case):
    text, reason = MISSHAPEN[case]
    with pytest.raises(ConfigError) as refused:
        ipynb.convert(text, "nb.ipynb")
    assert str(refused.value) == f"nb.ipynb: not a notebook nbformat can read: {reason}; it was copied unchanged"


def test_misshapen_notebooks_in_a_project_are_copied_unchanged_and_named_in_one_line_each(tmp_path):
    """``caffetool upgrade`` on a folder of them: no traceback, every one copied byte for byte and
    named with its reason, notebooks of other languages (R in nbformat 4's metadata, Julia in an
    nbformat 3 cell's) copied as they are, and the project's good notebook upgraded."""
    project = tmp_path / "proj"
    project.mkdir()
    for case, (text, _) in MISSHAPEN.items():
        (project / f"{case}.ipynb").write_text(text)
    (project / "r.ipynb").write_text(json.dumps(notebook("x <- 7 / 2", kernelspec={"name": "ir", "language": "R"})))
    julia = {**V3, "worksheets": [{"cells": [{"cell_type": "code", "input": "x = 7 / 2", "language": "julia",
                                              "outputs": []}]}]}
    (project / "julia.ipynb").write_text(json.dumps(julia))
    (project / "good.ipynb").write_text(json.dumps(notebook(PY2_CELL)))
    done = subprocess.run([str(CAFFETOOL), "upgrade", str(project)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    target = tmp_path / "proj-upgraded"
    for case, (_, reason) in MISSHAPEN.items():
        assert (target / f"{case}.ipynb").read_bytes() == (project / f"{case}.ipynb").read_bytes()
        assert f"  {case}.ipynb: check: not a notebook nbformat can read: {reason}; it was copied unchanged\n" in done.stdout
    assert (target / "r.ipynb").read_bytes() == (project / "r.ipynb").read_bytes()
    assert ("r.ipynb: check: a notebook of R, not Python (its metadata says so): only Python is upgraded; it was "
            "copied unchanged") in done.stdout
    assert (target / "julia.ipynb").read_bytes() == (project / "julia.ipynb").read_bytes()
    assert "julia.ipynb: check: a notebook of julia, not Python" in done.stdout
    assert 'print("hi")' in code_of(json.loads((target / "good.ipynb").read_text()))[0]


def test_a_notebook_jupyter_opens_despite_schema_errors_is_upgraded():
    """nbformat's validation fails on a code cell without ``outputs`` or ``execution_count``, a field
    the schema does not know and a missing ``nbformat_minor``; Jupyter opens such a notebook all the
    same (it logs the errors), and so the upgrade converts it and writes those fields back as they
    were."""
    book = notebook(PY2_CELL, "y = 1")
    del book["cells"][0]["outputs"], book["cells"][0]["execution_count"]
    del book["nbformat_minor"]
    book["cells"][1]["made_by"] = "an old tool"
    book["extra"] = {"kept": True}
    with pytest.raises(nbformat.ValidationError):
        nbformat.validate(nbformat.from_dict(book), version=4)
    nbformat.reads(json.dumps(book), as_version=4)  # what Jupyter's server reads a notebook with: no error
    new, _ = converted(book)
    assert code_of(new)[0] == 'from io import StringIO\nprint("hi")'
    expected = copy.deepcopy(book)
    expected["cells"][0]["source"] = code_of(new)[0]
    assert new == expected


def test_ipython_help_is_told_from_comments_and_strings_that_end_in_a_question_mark():
    """``np.zeros?``, ``caffe.Net??`` and ``?len`` are IPython's and kept; a comment or a string that
    ends in ``?``, a line starting with ``%`` or ``!`` inside a string or inside brackets, and a
    line a bracket carries on, are Python and converted."""
    cell = ("# what is the learning rate?\n"
            'print "why?"\n'
            "print lr  # is it 0.01?\n"
            "np.zeros?\n"
            "caffe.Net??\n"
            "?len\n"
            "if True:\n"
            "    caffe.Net?\n"
            'doc = """a docstring\n'
            "%not a magic\n"
            '!not a shell command?"""\n'
            'label = ("%d"\n'
            "         % 3)\n"
            "x = !ls\n"
            "files = !ls \\\n"
            "    -l\n"
            "print 'end'")
    masked, kept = ipynb.mask(cell)
    assert kept == ["np.zeros?", "caffe.Net??", "?len", "    caffe.Net?", "x = !ls", "files = !ls \\\n    -l"]
    assert len(masked.split("\n")) == len(cell.split("\n"))
    assert ipynb.mask(cell.replace("\n", "\r\n"))[1] == [k.replace("\n", "\r\n") + "\r" for k in kept]
    new, notes = converted(notebook(cell))
    assert code_of(new)[0] == cell.replace('print "why?"', 'print("why?")').replace(
        "print lr  #", "print(lr)  #").replace("print 'end'", "print('end')")
    assert [(n.cell, n.note.line) for n in notes if n.note.what.startswith("print")] == [(1, 2), (1, 3), (1, 17)]


def test_a_cell_magic_of_another_language_is_kept_whole_and_the_cells_still_share_their_names():
    """A ``%%bash`` cell is not Python, all of it: kept as it was, while the other cells are still
    converted as one namespace (``n`` set in one cell, divided in another, becomes ``//``);
    ``%%time``'s body is Python and converted."""
    bash = "%%bash\necho \"don't\"\nif [ -x a ]; then ls; fi"
    new, _ = converted(notebook("n = 10", bash, "%%time\nprint n / 4"))
    assert code_of(new) == ["n = 10", bash, "%%time\nprint(n // 4)"]


def test_report_lines_show_the_cells_own_lines_at_the_right_place():
    """A fixer's change on the first line of the second cell, after an IPython line carried on by a
    backslash, and on a cell's last line: the cell and line as Jupyter shows them, and the text as
    the cell reads (no marker of the upgrade's own); the same where cells are converted one by one
    (the notebook has a cell that is not Python), with an IPython line inside the text shown."""
    cells = ("import os\nx = 1", "print 'first'\n!ls \\\n  -l\nfor k, v in d.iteritems():\n    %time f()\n    print k",
             "try:\n    !ls\nexcept E, e:\n    print e\nprint 'last'")
    for book in (notebook(*cells), notebook(*cells, "def (:")):
        new, notes = converted(book)
        assert [(n.cell, n.note.line, n.note.what) for n in notes] == [
            (2, 1, "print: print 'first'"), (2, 4, "dict: d.iteritems()"), (2, 6, "print: print k"),
            (3, 1, "except: try: !ls except E, e: print e"), (3, 4, "print: print e"), (3, 5, "print: print 'last'"),
            *[(4, 1, "left as it was: not Python 2 or 3 (line 1)")][:len(book["cells"]) - 3]]
        assert code_of(new)[1:3] == ["print('first')\n!ls \\\n  -l\nfor k, v in d.items():\n    %time f()\n    print(k)",
                                     "try:\n    !ls\nexcept E as e:\n    print(e)\nprint('last')"]


def test_a_note_on_a_block_that_ends_a_cell_shows_no_marker_of_the_next_cell():
    """A fixer's text of a ``try`` block ending a cell takes in the comment after it, which is the
    upgrade's marker of the next cell, cut short by the note's width: the note shows the cell's own
    code (its IPython line as written) and its own ``pass``, at the cell's line."""
    new, notes = converted(notebook("if x:\n    try:\n        !ls\n    except E, e:\n        pass", "y = 1"))
    assert [(n.cell, n.note.line, n.note.what) for n in notes] == [(1, 2, "except: try: !ls except E, e: pass...")]
    assert code_of(new) == ["if x:\n    try:\n        !ls\n    except E as e:\n        pass", "y = 1"]


def test_a_notebooks_other_content_is_kept_as_it_was():
    """Outputs (stream, image, error with its ANSI codes), markdown with attachments, raw cells, cell
    and notebook metadata, ``nbformat_minor``, the key order and the UTF-8 text as it was (not
    escaped): only the converted sources and the kernelspec differ, a source that was a string stays
    a string and one that was a list stays a list."""
    book = notebook('print "a"', ['print "b"\n', "x = 1"], "y = 2", kernelspec={
        "name": "python2", "display_name": "Python 2", "language": "python"},
        language_info={"name": "python", "version": "2.7.6"}, celltoolbar="Tags", ünïcode="✓")
    book["nbformat_minor"] = 2
    book["cells"][0]["outputs"] = [
        {"name": "stdout", "output_type": "stream", "text": ["a ✓\n"]},
        {"data": {"image/png": "iVBORw0KGgo=\n", "text/plain": ["<Figure size 640x480>"]}, "metadata": {
            "needs_background": "light"}, "output_type": "display_data"},
        {"ename": "ZeroDivisionError", "evalue": "division by zero", "output_type": "error",
         "traceback": ["\u001b[0;31m---------\u001b[0m", "ZeroDivisionError: division by zero"]}]
    book["cells"][0]["execution_count"] = 7
    book["cells"][1]["metadata"] = {"tags": ["parameters"], "collapsed": True}
    book["cells"].insert(0, {"attachments": {"a.png": {"image/png": "iVBORw0KGgo="}}, "cell_type": "markdown",
                             "metadata": {}, "source": ['print "not code"\n', "![a](attachment:a.png) ü"]})
    book["cells"].append({"cell_type": "raw", "metadata": {"format": "text/latex"}, "source": "print 'raw'"})
    text = json.dumps(book, indent=1, ensure_ascii=False) + "\n"
    new, notes, _ = ipynb.convert(text, "nb.ipynb")
    expected = copy.deepcopy(book)
    expected["cells"][1]["source"] = 'print("a")'
    expected["cells"][2]["source"] = ['print("b")\n', "x = 1"]
    expected["metadata"]["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    assert json.loads(new) == expected
    assert new == json.dumps(expected, indent=1, ensure_ascii=False) + "\n"
    assert ("kernelspec: python2 -> python3", True) in [(n.note.what, n.note.changed) for n in notes if n.cell == 0]


@pytest.mark.parametrize("layout", [{"indent": 1, "ensure_ascii": False}, {"indent": 2, "ensure_ascii": True},
                                    {"indent": None, "ensure_ascii": False}, {"indent": "\t", "ensure_ascii": False}])
def test_a_notebook_keeps_its_layout_and_one_with_nothing_to_change_is_copied_byte_for_byte(layout):
    """A notebook already Python 3 comes back as it was, byte for byte, whatever its layout (another
    tool's indent, escaped non-ASCII, one line, a byte order mark, no final newline); one with a change
    is written in the layout it had."""
    book = notebook("print('ok ✓')", "x = 1", kernelspec={"name": "python3", "language": "python"})
    text = json.dumps(book, **layout)
    for original in (text, text + "\n", "\ufeff" + text):
        assert ipynb.convert(original, "nb.ipynb")[0] == original
    book["cells"][1]["source"] = 'print "changed ✓"'
    text = json.dumps(book, **layout) + "\n"
    new = ipynb.convert(text, "nb.ipynb")[0]
    book["cells"][1]["source"] = 'print("changed ✓")'
    assert new == json.dumps(book, **layout) + "\n"


def test_a_lone_surrogate_in_a_notebook_is_written_as_the_escape_it_was():
    """JSON can hold half a UTF-16 pair only as an escape, and Python compiles no source holding one:
    its cell is left as it was and named, and the notebook written as UTF-8 with the escape."""
    text = json.dumps(notebook('print "x"', 'y = "\ud800 ✓"'), ensure_ascii=False).replace("\ud800", "\\ud800")
    text.encode("utf-8")
    new, notes, _ = ipynb.convert(text, "nb.ipynb")
    new.encode("utf-8")
    assert code_of(json.loads(new)) == ['print("x")', 'y = "\ud800 ✓"'] and "\\ud800" in new
    assert [(n.cell, n.note.line, n.note.changed) for n in notes if "UTF-16" in n.note.what] == [(2, 1, False)]
