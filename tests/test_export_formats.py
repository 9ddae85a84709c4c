"""The export formats as data: each is one module plus one row of ``formats.FORMATS``, the rows are
what ``caffetool export --to`` accepts, and neither the exporter nor the task asks which format it
writes; ``verified_export`` gives a verified PyTorch export as it gives an ONNX one (made once,
reused while its record vouches for it, made again when it is not)."""

from __future__ import annotations

import ast
import json
import shutil
from dataclasses import fields
from pathlib import Path

import pytest

from caffetool import config, extras
from caffetool.checksum import sha256_file
from caffetool.errors import ConfigError
from caffetool.export import exporter, formats, reuse
from caffetool.inference import modelfiles
from caffetool.tasks.export import HELP

from .conftest import PROJECT
from .test_export_layers import write_net
from .test_project_cli import caffetool

CONVERTERS = {"caffetool.export.onnxnet", "caffetool.export.torchnet"}  # the nets' converters, shared
FUNCTIONS = [f.name for f in fields(formats.ExportFormat)
             if f.type.startswith("Callable") and not f.type.endswith("| None")]  # every format's own
OPTIONAL = [f.name for f in fields(formats.ExportFormat) if f.type.startswith("Callable") and f.type.endswith("| None")]
GENERIC = [PROJECT / "caffetool" / "export" / "exporter.py", PROJECT / "caffetool" / "tasks" / "export.py"]
NET = """layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 dim: 8 dim: 8 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv" convolution_param { num_output: 4 kernel_size: 3 } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" }
layer { name: "ip" type: "InnerProduct" bottom: "conv" top: "ip" inner_product_param { num_output: 5 } }
"""


def own_modules(form: formats.ExportFormat) -> set[str]:
    """The modules a row's functions come from, but the converters' refusals and the table's defaults."""
    return {getattr(form, name).__module__ for name in FUNCTIONS} - CONVERTERS - {formats.__name__}


@pytest.mark.parametrize("form", formats.FORMATS.values(), ids=formats.FORMATS)
def test_a_format_is_one_module_and_one_row(form):
    assert all(callable(getattr(form, name)) for name in FUNCTIONS)
    assert all(getattr(form, name) is None or callable(getattr(form, name)) for name in OPTIONAL)
    (module,) = own_modules(form) | {getattr(form, name).__module__ for name in OPTIONAL if getattr(form, name)}
    assert module.startswith("caffetool.export.") and module.endswith("format")
    assert set(form.options) <= {f.name for f in fields(exporter.ExportRequest)}
    assert form.extra is None or form.extra in extras.EXTRAS
    assert form.suffix.startswith(".") and form.record_suffix.endswith(".export.json")
    assert form.suffix not in form.beside


def test_the_rows_share_no_name_suffix_or_module():
    rows = list(formats.FORMATS.values())
    for key in ("name", "suffix", "record_suffix"):
        assert len({getattr(f, key) for f in rows}) == len(rows), key
    assert len(set.union(*map(own_modules, rows))) == len(rows)


def test_neither_the_exporter_nor_the_task_asks_which_format_it_writes():
    """No comparison with a format's name or suffix, and no import of a format's own modules."""
    named = {text for f in formats.FORMATS.values() for text in (f.name, f.suffix, f.title)}
    for path in GENERIC:
        tree = ast.parse(path.read_text())
        compared = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Compare)
                    for side in (node.left, *node.comparators)
                    if isinstance(side, ast.Constant) and side.value in named]
        imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                    for alias in node.names if alias.name in ("onnxnet", "torchnet", "onnxformat", "torchformat")]
        assert (compared, imported) == ([], []), path


def test_the_rows_are_what_export_to_accepts_and_its_help_names(tmp_path):
    done = caffetool("export", "--deploy", "deploy.prototxt", "--weights", "w.caffemodel", "--to", "keras",
                     cwd=tmp_path)
    assert done.returncode == 1 and list(tmp_path.iterdir()) == []
    assert done.stderr.strip() == f"Error: unknown --to 'keras'; choose one of: {', '.join(formats.FORMATS)}"
    assert all(name in HELP["to"] for name in formats.FORMATS)


def test_an_option_of_another_format_is_refused_naming_whose_it_is():
    pytorch, onnx = formats.FORMATS["pytorch"], formats.FORMATS["onnx"]
    with pytest.raises(ConfigError, match=r"^--with-preprocessing is for ONNX exports; a PyTorch module takes any "):
        formats.refuse_other_options(pytorch, {"opset": None, "with_preprocessing": True})
    formats.refuse_other_options(pytorch, {"opset": None, "batch": None})
    formats.refuse_other_options(onnx, {"opset": "17", "batch": "4", "with_preprocessing": True})


def test_each_format_names_its_files_and_record_by_its_row():
    assert exporter.record_of(Path("a.onnx")) == Path("a.export.json")
    assert exporter.written_files(Path("d/a.py")) == [Path("d/a.py"), Path("d/a.pt")]
    assert exporter.record_of(Path("d/a.py")) == Path("d/a.pytorch.export.json")
    assert exporter.record_of(Path("a.bin")) == Path("a.export.json")  # a suffix no format writes: ONNX's


@pytest.mark.engine
def test_verified_export_to_pytorch_is_made_once_reused_and_made_again_when_its_weights_change(
        engine, caffe, tmp_path, monkeypatch):
    monkeypatch.setattr(config, "cache_home", lambda: tmp_path / "cache")
    files = write_net(caffe, tmp_path, NET)
    said: list[str] = []
    model = reuse.verified_export(engine, files, to="pytorch", say=said.append)
    entry = model.parent
    assert entry.parent == tmp_path / "cache" / "exports" and model.name == "model.py"
    assert said == [f"exporting weights.caffemodel to PyTorch ({model}), verified against Caffe first"]
    assert sorted(p.name for p in entry.iterdir()) == ["model.pt", "model.py", "model.pytorch.export.json",
                                                       "model.pytorch.export.json.sha256"]
    record = json.loads((entry / "model.pytorch.export.json").read_text())
    assert record["verification"]["passed"] and record["format"] == "pytorch"
    assert record["sha256"]["pt"] == sha256_file(entry / "model.pt")

    made = {p.name: p.stat().st_mtime_ns for p in entry.iterdir()}
    assert reuse.verified_export(engine, files, to="pytorch", say=said.append) == model
    assert len(said) == 1 and {p.name: p.stat().st_mtime_ns for p in entry.iterdir()} == made

    assert reuse.verified_export(engine, files, say=said.append) == entry / "model.onnx"  # beside it
    assert len(said) == 2 and (entry / "model.export.json").is_file()

    weights = entry / "model.pt"
    weights.write_bytes(weights.read_bytes() + b"\0")
    assert reuse.verified_export(engine, files, to="pytorch", say=said.append) == model
    assert len(said) == 3 and said[-1].startswith("the cached PyTorch export of weights.caffemodel is damaged")
    record = json.loads((entry / "model.pytorch.export.json").read_text())
    assert record["sha256"]["pt"] == sha256_file(weights)
    assert not [key for key in record["sha256"] if key.startswith("replaced_")]


@pytest.mark.engine
def test_a_runs_verified_pytorch_export_is_its_export_folders_and_a_changed_one_is_refused(
        engine, trained_run, tmp_path):
    run = tmp_path / trained_run.name
    shutil.copytree(trained_run, run, symlinks=True)
    files = modelfiles.from_run(run)
    said: list[str] = []
    model = reuse.verified_export(engine, files, to="pytorch", say=said.append)
    assert model == run / "export" / "model.py" and (run / "export" / "model.pytorch.export.json").is_file()
    assert reuse.verified_export(engine, files, to="pytorch", say=said.append) == model and len(said) == 1
    (run / "export" / "model.pt").write_bytes(b"a user's weights")
    with pytest.raises(ConfigError, match=r"model\.pt is not the weights file caffetool wrote .* move it out of "):
        reuse.verified_export(engine, files, to="pytorch", say=said.append)
    assert (run / "export" / "model.pt").read_bytes() == b"a user's weights"
