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
    ("__init__ errors config glog", "what everything shares: the version, the errors, where files go, "
     "Caffe's log lines"),
    ("fsio checksum choices proc extras", "files written atomically, checksums, checked choices, processes, the "
     "optional extras"),
    ("figures download apt", "figures, downloads, apt"),
    ("engine", "the engine: recipe, patches, build, install, bundles, CUDA architectures and libraries"),
    ("data dockerimg upgrade notebooks", "data sets (registry, fetch, IDX and image conversion, databases, the Datum codec); "
     "the Docker images as argument lists; old Caffe projects upgraded (Python 2 to 3, Caffe's upgrade tools); "
     "Jupyter notebooks on the engine's pycaffe"),
    ("runs", "what a run leaves on disk, through one door: its folder (`folder`), manifest (`runrecord`), "
     "owner, snapshots, log parser, metrics files, final figures, runs compared"),
    ("nets", "model declarations, net and solver builders, a user's Caffe project, test nets, Caffe's "
     "geometry, validation"),
    ("inference memory track", "the model at inference (model files, image preprocessing, records); "
     "memory estimates and measurements; MLflow tracking"),
    ("train", "training: the session, the runner that watches `caffe train`, devices, the final test, plots, "
     "TensorBoard"),
    ("export sweep", "the ONNX and PyTorch exports; sweeps on Ray Tune"),
    ("evaluation", "evaluation of a run against `caffe test`, and of labelled images"),
    ("runpage", "what a server shows of a run: its summary, curves, evaluation and example images"),
    ("serving", "the models a server serves: loaded models, ONNX exports, the model repository, batchers, "
     "Prometheus series"),
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
