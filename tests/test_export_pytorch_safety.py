"""The PyTorch export against what a net or a file may hold: ``export.check`` judges what ``forward``
returns and runs the file in a child within a time limit (a file that exits, loops or changes its
outputs fails, with one ``Error:`` line naming it); the verification of a fresh export compares
forward's outputs too; every name and number of a net reaches ``model.py`` as Python reads it back
(quotes and backslashes in a net's name, layer names Python folds by NFKC or refuses, ``inf`` and
``nan``); a model file that would hide a module Python imports is refused."""

from __future__ import annotations

import ast
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import torch

from caffetool.errors import ExportError
from caffetool.export import exporter, formats, torchformat, torchnet, verify
from caffetool.inference import modelfiles

from .test_export import refused
from .test_export_layers import write_net
from .test_export_pytorch import imported
from .test_project_cli import caffetool

pytestmark = pytest.mark.engine
IMAGES = 4

SMALL = """layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 dim: 6 dim: 6 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" inner_product_param { num_output: 10 } }
layer { name: "prob" type: "Softmax" bottom: "ip" top: "prob" }
"""


def export(engine: Any, files: modelfiles.ModelFiles, out: Path) -> exporter.Exported:
    return exporter.export(engine, exporter.ExportRequest(files, out, images=IMAGES, to="pytorch"), say=lambda _: None)


def check(engine: Any, model: Path, files: modelfiles.ModelFiles, seconds: float = 120) -> verify.Verification:
    return exporter.check(engine, model, files, 1e-4, IMAGES, say=lambda _: None, seconds=seconds)


@pytest.fixture(scope="module")
def small(engine, caffe, tmp_path_factory):
    """A small net exported to PyTorch: (its files, model.py's text)."""
    folder = tmp_path_factory.mktemp("small")
    files = write_net(caffe, folder, SMALL)
    export(engine, files, folder / "small.py")
    return files, (folder / "small.py").read_text()


def changed(folder: Path, small: tuple[modelfiles.ModelFiles, str], old: str, new: str) -> Path:
    """The small export copied to ``folder`` with ``old`` in model.py replaced by ``new``."""
    files, source = small
    assert old in source
    (folder / "small.py").write_text(source.replace(old, new))
    (folder / "small.pt").write_bytes((files.deploy.parent / "small.pt").read_bytes())
    return folder / "small.py"


@pytest.mark.parametrize("returned", ["prob.flip(1)", "prob * 1.001", "ip"])
def test_export_check_fails_a_forward_that_returns_other_outputs_than_its_layers(engine, small, tmp_path, returned):
    files, _ = small
    assert check(engine, changed(tmp_path, small, "return prob", "return prob"), files).passed
    model = changed(tmp_path, small, "        return prob\n", f"        return {returned}\n")
    with pytest.raises(ExportError, match=rf"^{tmp_path / 'small.py'}: every layer agrees with Caffe, but the model's "
                                          r"output 'prob' as its caller gets it \(what forward returns\) differs from "
                                          r"Caffe's by [0-9.e-]+ of its scale, past the tolerance of 0\.0001$"):
        check(engine, model, files)


def test_the_verification_of_a_fresh_export_compares_what_forward_returns(engine, caffe, small):
    """verify() with the export's own runner: a forward whose return differs fails, its layers agreeing."""
    files, source = small
    net_param, net = exporter._load(engine, files, torchnet.refusals)[1:]
    converted = torchnet.convert(net_param, net, "small", "", "small.pt")
    weights = torchnet.serialised(converted)
    feeds = [({"data": np.random.default_rng(1).random((3, 3, 6, 6), np.float32)},) * 2]
    honest = verify.verify(net, converted, feeds, 1e-4, None, "drawn", torchnet.runner(source, weights, converted))
    assert honest.passed and [f.type for f in honest.returned] == [verify.RETURNED]
    flipped = source.replace("        return prob\n", "        return prob.flip(1)\n")
    result = verify.verify(net, converted, feeds, 1e-4, None, "drawn", torchnet.runner(flipped, weights, converted))
    assert all(f.rel <= 1e-4 for f in result.layers)
    assert result.first_past() is result.returned[0] and not result.passed
    assert result.record()["returned"][0]["blob"] == "prob"


def test_a_model_py_that_exits_fails_its_check_with_one_error_line(engine, small, tmp_path):
    files, _ = small
    model = changed(tmp_path, small, "def load(", "raise SystemExit(0)\n\n\ndef load(")
    done = caffetool("export.check", str(model), "--deploy", str(files.deploy), "--weights", str(files.weights),
                     "--images", "2", cwd=tmp_path)
    assert done.returncode == 1 and "agrees" not in done.stdout, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {model} ended the check's process while loading it with "
                                                   "its weights (exit 0)"), done.stderr
    model = changed(tmp_path, small, "        return prob\n", "        import os\n        os._exit(0)\n")
    with pytest.raises(ExportError, match=r"small\.py ended the check's process while running a batch \(exit 0\)"):
        check(engine, model, files)


@pytest.mark.parametrize("where, doing", [("def load(", "loading it with its weights"),
                                          ("        return prob\n", "running a batch")])
def test_a_model_py_that_hangs_is_stopped_at_the_time_limit(engine, small, tmp_path, where, doing):
    files, _ = small
    loop = "while True:\n    pass\n\n\n" if where.startswith("def") else "        while True:\n            pass\n"
    model = changed(tmp_path, small, where, loop + where)
    started = time.monotonic()
    with pytest.raises(ExportError, match=rf"^{model} did not finish {doing} within 30 s \(export\.check --timeout\)"):
        check(engine, model, files, seconds=30)
    assert time.monotonic() - started < 75
    left = [p for p in psutil.Process().children(recursive=True)
            if "caffetool.export.torchchild" in " ".join(p.cmdline())]
    assert left == []  # the child that ran the file is gone with its check, not only when caffetool exits


def test_timeout_is_refused_for_an_onnx_model_and_bounded(small, tmp_path):
    files, _ = small
    (tmp_path / "m.onnx").write_bytes(b"")
    done = caffetool("export.check", str(tmp_path / "m.onnx"), "--deploy", str(files.deploy), "--weights",
                     str(files.weights), "--timeout", "5", cwd=tmp_path)
    assert done.returncode == 1 and done.stderr.startswith("Error: --timeout is for a PyTorch export's model.py"), \
        done.stderr


def test_a_model_py_that_prints_does_not_disturb_its_check(engine, small, tmp_path):
    model = changed(tmp_path, small, "        return prob\n", "        print('ready')\n        return prob\n")
    assert check(engine, model, small[0]).passed


NAMED = """name: "tri\\"\\"\\"ple \\\\u00e9 net"
layer { name: "data" type: "Input" top: "ｓｅｌｆ" input_param { shape { dim: 1 dim: 3 dim: 6 dim: 6 } } }
layer { name: "ｔｒａｉｎｉｎｇ" type: "InnerProduct" bottom: "ｓｅｌｆ" top: "torch"
        inner_product_param { num_output: 6 } }
layer { name: "ﬁ" type: "ReLU" bottom: "torch" top: "fi" }
layer { name: "fi" type: "Power" bottom: "fi" top: "a²" power_param { power: 0 scale: inf } }
layer { name: "a²" type: "Power" bottom: "a²" top: "class" power_param { power: 0 shift: nan } }
layer { name: "__x" type: "Eltwise" bottom: "class" bottom: "fi" top: "__x" }
layer { name: "training" type: "Softmax" bottom: "__x" top: "F" }
"""


def test_names_and_numbers_of_a_net_reach_model_py_as_python_reads_them(engine, caffe, tmp_path):
    files = write_net(caffe, tmp_path, NAMED.split("\n", 1)[1])
    files.deploy.write_text(NAMED)
    result = export(engine, files, tmp_path / "named.py")
    assert result.verification.passed
    source = (tmp_path / "named.py").read_text()
    tree = ast.parse(source)
    assert ast.get_docstring(tree, clean=False).startswith('tri"""ple \\u00e9 net as PyTorch code')
    assert "float('inf')" in source and "float('nan')" in source
    module = imported(tmp_path / "named.py")
    model = module.load()
    names = [name for name, _ in model.named_children()]
    assert all(n.isascii() and n.isidentifier() for n in names) and len(set(names)) == len(names) == 6
    assert "training" not in names and model.training is False
    x = torch.from_numpy(np.random.default_rng(3).random((2, 3, 6, 6), np.float32))
    with torch.inference_mode():
        got = model(x)
    assert got.shape == (2, 6) and torch.allclose(got.sum(1), torch.ones(2))
    assert check(engine, tmp_path / "named.py", files).passed


@pytest.mark.parametrize("name", ["torch", "numpy", "math", "typing"])
def test_a_model_file_that_would_hide_a_module_python_imports_is_refused(small, tmp_path, name):
    files, _ = small
    message = refused(tmp_path, "--deploy", str(files.deploy), "--weights", str(files.weights), "--to", "pytorch",
                      "--out", f"{name}.py")
    assert message == (f"Error: --out {tmp_path / name}.py: {name!r} is the name of a module Python already imports (the model "
                       f"imports torch, and torch the standard library and more), which {name}.py would hide from "
                       f"any program run beside it; choose another name, such as {name}_model.py (nothing was "
                       "changed)")


def test_a_default_model_file_name_hides_no_module(tmp_path):
    assert formats.named("pytorch").stem_of("torch") == "torch_model"
    assert torchnet.module_name("ｍｏｄｅｌ") == "model" and not torchnet.importable("ｍｏｄｅｌ")
    torchformat.check_name(tmp_path / "lenet.py")


def test_identifiers_are_ascii_and_meet_no_other_after_nfkc():
    names = torchnet._Names({"training", "self"})
    given = [names.of(n) for n in ["ｔｒａｉｎｉｎｇ", "training", "ﬁ", "fi", "ｓｅｌｆ", "a²", "__x", "class", "9"]]
    assert given == ["training_2", "training_3", "fi", "fi_2", "self_2", "a2", "_x", "class_", "_9"]
