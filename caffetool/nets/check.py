"""Validation by Caffe itself, in a child process.

Caffe reports bad nets with glog ``CHECK`` failures, which abort the process; building the nets in
a child keeps the caller alive and turns the ``F...`` line into a caffetool error. The child builds
the solver (so both the TRAIN and the TEST net, with their data layers) and any deploy nets, and
prints what it built as JSON.

``Python`` layers are imported by Caffe through Boost.Python, which prints the import error and
then fails with a ``SystemError`` that names nothing; the child therefore imports each Python
layer's module and class itself first, and names the one that cannot be imported.

    python -P -m caffetool.nets.check [--solver S] [--deploy D ...] [--weights W [--partial]] [--imports-only]
    (paths relative to the cwd)
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from caffetool import glog
from caffetool.engine import EngineInfo
from caffetool.errors import CaffeRefused, NetError, PythonLayerError
from caffetool.nets import weights
from caffetool.proc import exit_status, last_lines

# The child's exit status for a net it refused itself (before Caffe saw it); stderr is the reason.
REFUSED = 3


def summary(net: Any) -> dict:
    """Layer and parameter counts and every blob's shape of a built ``caffe.Net``."""
    params = sum(blob.data.size for blobs in net.params.values() for blob in blobs)
    return {
        "layers": len(net.layers),
        "params": int(params),
        "param_shapes": {name: [list(b.data.shape) for b in blobs] for name, blobs in net.params.items()},
        "blobs": {name: list(blob.data.shape) for name, blob in net.blobs.items()},
    }


def python_layers(engine: EngineInfo, cwd: Path, solver: str) -> None:
    """Import every ``Python`` layer's module and class the nets of ``solver`` name, as Caffe will
    (run from ``cwd``, with this environment's ``PYTHONPATH``), without building the nets: a
    missing module is named before a run or a sweep starts, not after Caffe aborts on it."""
    validate(engine, cwd, solver, imports_only=True)


def validate(engine: EngineInfo, cwd: Path, solver: str | None = None, deploy: Sequence[str] = (),
             weights: str | None = None, complete: bool = True, imports_only: bool = False) -> dict:
    """Build ``solver`` (train and test nets) and each deploy net in Caffe; with ``weights``, check
    they hold weights for the deploy nets (else the train net) first (:mod:`caffetool.nets.weights`;
    ``complete``: for every layer with parameters, else for some: fine-tuning) and load them into
    the deploy nets. The report's ``fresh`` names the layers the weights leave at their fillers."""
    # -P: sys.path without the current folder, as the Python inside Caffe has it
    argv = [sys.executable, "-P", "-m", "caffetool.nets.check", *(["--imports-only"] if imports_only else [])]
    if weights:
        argv += ["--weights", weights, *([] if complete else ["--partial"])]
    if solver:
        argv += ["--solver", solver]
    for d in deploy:
        argv += ["--deploy", d]
    env = {**os.environ, "GLOG_minloglevel": "1", "PYTHONPATH": os.pathsep.join(
        [str(engine.python_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, errors="replace", env=env)
    if done.returncode == 0:
        return json.loads(done.stdout)
    if (fatal := glog.fatal(done.stderr)) is not None:
        subject = f"the net with weights {weights}" if weights else "the net"
        raise CaffeRefused(f"Caffe refused {subject} ({fatal.where}): {fatal.message}")
    if done.returncode == REFUSED:
        raise NetError(done.stderr.strip())
    if (error := glog.python_error(done.stderr)) is not None:
        raise PythonLayerError(error)
    raise NetError(f"Caffe could not build the net ({exit_status(done.returncode)}):\n{last_lines(done.stderr)}")


def python_layer_problem(net: Any, source: str) -> str | None:
    """Why a ``Python`` layer of ``net`` (a ``NetParameter`` from ``source``) cannot be made, if it cannot."""
    for layer in net.layer:
        if layer.type != "Python":
            continue
        module, name = layer.python_param.module, layer.python_param.layer
        where = f"the Python layer '{layer.name}' in {source}"
        try:
            found: ModuleType = importlib.import_module(module)
        except Exception as e:  # any error while importing the user's module is its fault, shown as such
            return (f"{where} needs module '{module}', which cannot be imported ({type(e).__name__}: {e}); "
                    "put the module's folder on PYTHONPATH, or correct the layer's python_param.module")
        if not hasattr(found, name):
            return (f"{where} needs class '{name}' from module '{module}' ({found.__file__}), which has none; "
                    "correct the layer's python_param.layer")
    return None


def _nets(caffe_pb2: ModuleType, solver: str | None, deploy: Sequence[str]) -> Iterator[tuple[Any, str]]:
    """Every ``NetParameter`` that building ``solver`` and ``deploy`` reads, with where it comes from.

    A file that does not parse is left out: Caffe reads it next and says what is wrong with it.
    """
    from google.protobuf import text_format  # noqa: PLC0415 - with pycaffe, in the child only

    def read(path: str, message: Any) -> Any | None:
        try:
            return text_format.Merge(Path(path).read_text(), message)
        except (OSError, UnicodeDecodeError, text_format.ParseError):
            return None

    s = read(solver, caffe_pb2.SolverParameter()) if solver else None
    if s is not None:
        for inline in [s.net_param, s.train_net_param, *s.test_net_param]:
            yield inline, solver
    files = [*([s.net, s.train_net, *s.test_net] if s is not None else []), *deploy]
    for path in filter(None, files):
        if (net := read(path, caffe_pb2.NetParameter())) is not None:
            yield net, path


def main() -> None:
    """The child: check Python layers, build everything in Caffe, print the summaries as JSON."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--solver")
    parser.add_argument("--deploy", action="append", default=[])
    parser.add_argument("--weights")
    parser.add_argument("--partial", action="store_true")
    parser.add_argument("--imports-only", action="store_true")
    args = parser.parse_args()
    import caffe  # noqa: PLC0415 - on PYTHONPATH from validate()

    for net, source in _nets(caffe.proto.caffe_pb2, args.solver, args.deploy):
        if problem := python_layer_problem(net, source):
            _refuse(problem)
    if args.imports_only:
        json.dump({}, sys.stdout)
        return
    caffe.set_mode_cpu()
    report: dict = {}
    if args.solver:
        solver = caffe.get_solver(args.solver)
        report["train"] = summary(solver.net)
        report["test"] = [summary(net) for net in solver.test_nets]
    try:
        deploy = {d: caffe.Net(d, caffe.TEST) for d in args.deploy}
    except getattr(caffe, "NetDefinitionError", ()) as e:  # pycaffe's own check of a net it cannot build
        _refuse(str(e))
    if args.weights:
        source, why = weights.read(Path(args.weights), caffe.proto.caffe_pb2)
        report["fresh"] = []
        for net in deploy.values() or [solver.net]:
            target = {name: [tuple(b.data.shape) for b in blobs] for name, blobs in net.params.items()}
            if problem := weights.problem(Path(args.weights), source, why, target, not args.partial):
                _refuse(problem)
            report["fresh"] = weights.fresh(source, target)
        for net in deploy.values():
            net.copy_from(args.weights)
    report["deploy"] = {d: summary(net) for d, net in deploy.items()}
    json.dump(report, sys.stdout)


def _refuse(problem: str) -> None:
    print(problem, file=sys.stderr)
    sys.exit(REFUSED)


if __name__ == "__main__":
    main()
