"""The house's plan, checked against the code: each layer imports only the layers below it (none of
its own packages imports another, so no circle can form between packages), every module name and
every class name is used once, and the development page's table of layers is this table.

The layers are declared here as data, from the bottom up; a new package or top-level module must be
placed in one, and docs/development.md's table of layers is written from them (the test says
what to paste where it differs)."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

from .conftest import PROJECT

PACKAGE = PROJECT / "caffetool"
LAYERS: list[tuple[str, str]] = [  # (the units of a layer, what they hold)
    ("__init__ errors config glog fsio", "what everything shares: the version, the errors, where files go, "
     "Caffe's log lines, files written atomically"),
    ("checksum choices proc extras figures download layers", "checksums, checked choices, processes, the optional "
     "extras, figures, downloads; the layer catalogue (every Caffe layer type: its shapes and memory, its ONNX and "
     "PyTorch translations)"),
    ("apt runs", "apt; what a run leaves on disk, through one door: its folder (`folder`), manifest (`runrecord`), "
     "owner, snapshots, log parser, metrics files, final figures, runs compared"),
    ("engine", "the engine: recipe, patches, build, install, bundles, CUDA architectures and libraries"),
    ("backends data dockerimg upgrade notebooks", "the inference backends (pycaffe, onnxruntime, OpenCV, PyTorch) and "
     "the devices they run on; data sets (registry, fetch, IDX and image conversion, databases, the Datum codec); "
     "the Docker images as argument lists; old Caffe projects upgraded (Python 2 to 3, Caffe's upgrade tools); "
     "Jupyter notebooks on the engine's pycaffe"),
    ("nets", "model declarations, net and solver builders, a user's Caffe project, test nets, validation"),
    ("inference memory runpage track", "the model at inference (model files, image preprocessing, records); "
     "memory estimates and measurements; what a server shows of a run (its summary, curves, evaluation and example "
     "images); MLflow tracking"),
    ("export train", "the ONNX and PyTorch exports, one module per format; training: the session, the runner that "
     "watches `caffe train`, the final test, plots, TensorBoard"),
    ("evaluation serving sweep", "evaluation of a run against `caffe test`, and of labelled images; the models a "
     "server serves (loaded models, ONNX exports, the model repository, batchers, Prometheus series); sweeps on Ray "
     "Tune"),
    ("demo", "the demo server: page, JSON API, the Open Inference Protocol, connections with deadlines"),
    ("tasks", "the Invoke tasks (wiring only), their settings schema and shared solver flags"),
    ("cli", "the `caffetool` command"),
]
LAYER_OF = {unit: i for i, (units, _) in enumerate(LAYERS) for unit in units.split()}


def unit_of(module: str) -> str:
    """A module's unit of the plan: its package (``caffetool.runs.folder`` -> ``runs``) or itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(path.relative_to(PROJECT).with_suffix("").parts).removesuffix(".__init__")
        found[name] = path
    return found


def imports(path: Path) -> list[tuple[int, str]]:
    """Every caffetool module ``path`` imports (at its top or inside a function), with its line."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "caffetool":
            names = [f"{node.module}.{a.name}" for a in node.names] if node.module == "caffetool" else [node.module]
            out += [(node.lineno, name) for name in names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "caffetool"]
    return out


def test_every_package_and_module_has_its_layer():
    units = {unit_of(name) for name in modules()}
    assert sorted(units - set(LAYER_OF)) == [], "place these in LAYERS"
    assert sorted(set(LAYER_OF) - units) == [], "LAYERS names these, which no longer exist"


def test_no_import_runs_upward_or_sideways():
    wrong = []
    for name, path in modules().items():
        mine = LAYER_OF[unit_of(name)]
        for line, target in imports(path):
            unit = unit_of(target)
            if unit == unit_of(name):
                continue
            if LAYER_OF.get(unit, -1) >= mine:
                wrong.append(f"{path.relative_to(PROJECT)}:{line} imports {target} "
                             f"(layer {LAYER_OF.get(unit)} from layer {mine})")
    assert wrong == []


def test_a_lower_layer_importing_a_higher_one_is_caught(tmp_path, monkeypatch):
    """The check above, on a module that breaks the rule: runs/ importing train/."""
    planted = tmp_path / "caffetool" / "runs" / "planted.py"
    planted.parent.mkdir(parents=True)
    planted.write_text("def late():\n    from caffetool.train import session  # noqa\n")
    (line, target), = imports(planted)
    assert (line, target) == (2, "caffetool.train")
    assert LAYER_OF[unit_of(target)] > LAYER_OF[unit_of("caffetool.runs.planted")]


def test_module_and_class_names_are_used_once():
    stems = Counter(path.stem for path in PACKAGE.rglob("*.py") if path.name != "__init__.py")
    assert [stem for stem, n in stems.items() if n > 1] == []
    classes = Counter(node.name for path in PACKAGE.rglob("*.py")
                      for node in ast.parse(path.read_text()).body if isinstance(node, ast.ClassDef))
    assert [name for name, n in classes.items() if n > 1] == []


def test_no_import_renames_a_caffetool_module():
    renamed = [f"{path.relative_to(PROJECT)}:{line}" for root in ("caffetool", "tests", "benchmarks")
               for path in (PROJECT / root).rglob("*.py")
               for line, text in enumerate(path.read_text().splitlines(), 1)
               if re.match(r"\s*(from caffetool[\w.]* import .+ as \w+|import caffetool[\w.]* as \w+)", text)]
    assert renamed == []


def readme_table() -> str:
    rows = ["| layer | packages and modules | what they hold |", "| --- | --- | --- |"]
    for i, (units, what) in reversed(list(enumerate(LAYERS))):
        shown = ", ".join(f"`{u}/`" if (PACKAGE / u).is_dir() else f"`{u}.py`" for u in units.split())
        rows.append(f"| {i} | {shown} | {what} |")
    return "\n".join(rows)


def test_the_development_page_shows_these_layers():
    text = (PROJECT / "docs" / "development.md").read_text()
    table = readme_table()
    assert table in text, f"docs/development.md's table of layers should read:\n{table}"


# Where each kind of change goes: (the change, the files a newcomer touches, the table that lists every
# thing of that kind, as MODULE:NAME). The development page shows this table; the tests below hold it
# against the code.
CHANGES: list[tuple[str, str, str]] = [
    ("a Caffe layer type", "one class in a family module `caffetool/layers/FAMILY.py` (its `memory`, `onnx` and "
     "`pytorch`, or `Refused` with the reason), and the engine's own code as a patch in "
     "`caffetool/engine/patches/` where the engine lacks the type (a new family module also joins `FAMILIES` in "
     "`caffetool/layers/catalogue.py`); the layer types page follows",
     "caffetool.layers.catalogue:CATALOGUE"),
    ("an export format", "a module `caffetool/export/NAMEformat.py` and one row of `FORMATS` in "
     "`caffetool/export/formats.py`; `caffetool export --to` and `export.check` follow",
     "caffetool.export.formats:FORMATS"),
    ("an inference backend", "a module `caffetool/backends/NAME.py` (`READS` and `load`) and one row of `BACKENDS` "
     "in `caffetool/backends/dispatch.py`; `--backend` of `evaluate`, `demo.serve` and `demo.classify` follows",
     "caffetool.backends.dispatch:BACKENDS"),
    ("an HTTP route", "its handler in `caffetool/demo/webapp.py` (`caffetool/demo/v2.py` under `/v2`) and one "
     "`Endpoint` row of its route table; the HTTP routes page follows", "caffetool.demo.webapp:ROUTES"),
]


def changes_table() -> str:
    rows = ["| to add | touch | every one is listed in |", "| --- | --- | --- |"]
    for change, files, table in CHANGES:
        module, name = table.split(":")
        rows.append(f"| {change} | {files} | `{name}` (`{module.replace('.', '/')}.py`) |")
    return "\n".join(rows)


def test_the_development_page_says_where_each_change_goes():
    text = (PROJECT / "docs" / "development.md").read_text()
    table = changes_table()
    assert table in text, f"docs/development.md's table of where changes go should read:\n{table}"


def test_each_kind_of_change_is_one_place_in_the_code():
    """The files the table names exist, each table it names is the code's, and every thing of each
    kind is where the table says: every layer type in a family module of the catalogue, every export
    format's and backend's code in a module of its own, every route's handler in the server."""
    import importlib

    from caffetool.backends.dispatch import BACKENDS
    from caffetool.demo.webapp import ROUTES
    from caffetool.export.formats import FORMATS
    from caffetool.layers import catalogue

    for _, files, table in CHANGES:
        for path in re.findall(r"`(caffetool/[\w/]+(?:\.py|/))`", files):
            pattern = path.replace("FAMILY", "*").replace("NAMEformat", "*format").replace("NAME", "*")
            assert list(PROJECT.glob(pattern)), path
        module, name = table.split(":")
        assert getattr(importlib.import_module(module), name), table
    families = {path.stem for path in (PACKAGE / "layers").glob("*.py")
                if any(isinstance(node, ast.ClassDef) and any(getattr(b, "id", "") == "LayerType" for b in node.bases)
                       for node in ast.parse(path.read_text()).body)}
    assert families == {f.__name__.rsplit(".", 1)[-1] for f in catalogue.FAMILIES}
    for name, kind in catalogue.CATALOGUE.items():
        assert kind.__module__ in {f.__name__ for f in catalogue.FAMILIES}, name
    for row in FORMATS.values():
        assert re.fullmatch(r"caffetool\.export\.\w+format", row.convert.__module__), row.name
    for row in BACKENDS.values():
        assert (PACKAGE / "backends" / f"{row.module}.py").is_file(), row.name
        assert row.reads in ("caffe", "onnx", "pytorch"), row.name
    assert {endpoint.handler for endpoint in ROUTES}
