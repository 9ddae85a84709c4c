"""What MLflow holds of a run, read from the run's own record: one mapping for live logging and for
``track.import``, so a run imported later looks as it would have looked logged live.

* params: every field the run's ``solver.prototxt`` sets, by its name (``base_lr``, ``max_iter``,
  ``test_iter`` with repeated values joined by commas, ``train_state.stage``; an inline net as its
  name and layer count), and ``type`` (Caffe's ``SGD`` when unset); ``batch_size`` and
  ``test_batch_size`` of the first data layer of the train and test nets that has one; from the
  manifest, ``model``, ``dataset`` with ``dataset.sha256`` (the sha256 of its files' checksums, one
  ``NAME SHA256`` line each, sorted) and ``dataset.backend``, or for a ``--solver`` run
  ``solver_file`` and ``project.sha256`` (the same over every file it reads); ``weights`` it started
  from, ``device``, the engine build (``engine.version``, ``engine.blas``, ``engine.cuda``, ...,
  ``engine.build``: the first 16 hex digits of the sha256 of the engine's manifest) and the thread
  variables Caffe ran with (``threads.OMP_NUM_THREADS``, ...).
* tags: ``status`` (caffetool's: finished, failed, diverged, interrupted, stopped early),
  ``host``, ``gpu`` (the device label, or ``cpu``), ``caffetool.version``, ``caffetool.git_commit``,
  ``caffetool.run_dir`` (the absolute run folder), ``caffetool.command``.
* metrics: every display and test row, with the iteration as step, under the tags of
  :mod:`caffetool.runs.scalars`, and the manifest's ``final`` figures as ``final/train/<output>``
  and ``final/test<k>/<output>`` (step: the iteration each was measured at).
* artifacts: ``manifest.json``, the run's prototxt files (deploy, solver, nets), ``labels.txt``,
  ``plots/*.png`` (under ``plots``) and the newest complete ``.caffemodel`` (under ``weights``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from caffetool.errors import CaffetoolError
from caffetool.nets import prototxt, testnets
from caffetool.runs import runrecord
from caffetool.runs.folder import RunFolder
from caffetool.runs.logparse import ROW_KEYS
from caffetool.runs.scalars import Scalar

# caffetool's statuses as MLflow's (RunStatus); the rest (setting-up, running) are not an end.
MLFLOW_STATUS = {"finished": "FINISHED", "failed": "FAILED", "diverged": "FAILED", "interrupted": "KILLED",
                 "stopped early": "KILLED"}
ENGINE_OPTIONS = {"blas": "engine.blas", "cpu_only": "engine.cpu_only", "use_cudnn": "engine.cudnn",
                  "use_nccl": "engine.nccl", "openmp": "engine.openmp", "stock": "engine.stock",
                  "cuda_arch": "engine.cuda_arch"}


def params(manifest: runrecord.Manifest, run_dir: Path, caffe_pb2: ModuleType) -> dict[str, str]:
    """The run's params (see the module's description); a solver that cannot be read gives none of its own."""
    out: dict[str, str] = {}
    try:
        solver = prototxt.read(RunFolder(run_dir).solver, caffe_pb2.SolverParameter())
    except CaffetoolError:
        solver = None
    if solver is not None:
        out.update(solver_fields(solver))
        out.setdefault("type", solver.type or "SGD")
        out.update(batch_sizes(solver, run_dir, caffe_pb2))
    out["model"] = manifest.model
    dataset = manifest.dataset
    if dataset.get("files"):
        out.update({"dataset": dataset.get("name"), "dataset.sha256": digest(dataset["files"]),
                    "dataset.backend": dataset.get("backend")})
    if project := manifest.project:
        out.update({"solver_file": project.get("solver"), "project.sha256": digest(project.get("files_sha256") or {})})
    out["weights"] = manifest.caffe_flag("weights")
    out["device"] = manifest.device.get("label")
    out.update(engine(manifest.engine.get("manifest") or {}))
    out.update({f"threads.{k}": v for k, v in manifest.threads.items() if v})
    return {k: str(v) for k, v in out.items() if v not in (None, "")}


def solver_fields(solver: Message) -> dict[str, str]:
    """The fields ``solver`` sets, as text, by name (a nested message's as ``outer.inner``)."""
    out: dict[str, str] = {}
    for field, value in solver.ListFields():
        values = list(value) if field.is_repeated else [value]
        if field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.name == "NetParameter":
            out[field.name] = "; ".join(f"inline net {net.name or ''} ({len(net.layer)} layers)" for net in values)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            for i, message in enumerate(values):
                at = f"{field.name}.{i}" if field.is_repeated and len(values) > 1 else field.name
                out.update({f"{at}.{k}": v for k, v in solver_fields(message).items()})
        else:
            out[field.name] = ",".join(_text(field, v) for v in values)
    return out


def _text(field: FieldDescriptor, value: Any) -> str:
    """A scalar field's value as its prototxt writes it (a float32 as ``0.01``, not ``0.009999999776``)."""
    if field.type == FieldDescriptor.TYPE_ENUM:
        return field.enum_type.values_by_number[value].name if value in field.enum_type.values_by_number else str(value)
    if field.type == FieldDescriptor.TYPE_FLOAT:
        return repr(float(str(np.float32(value))))  # the shortest digits of the float32, as Python writes them
    if field.type == FieldDescriptor.TYPE_BOOL:
        return "true" if value else "false"
    return str(value)


def batch_sizes(solver: Message, run_dir: Path, caffe_pb2: ModuleType) -> dict[str, str]:
    """``batch_size`` of the train net's first data layer that has one, ``test_batch_size`` of the
    first test net's; nets that cannot be read give none."""
    out: dict[str, str] = {}
    try:
        if solver.HasField("train_net_param") or solver.HasField("net_param"):
            train = solver.train_net_param if solver.HasField("train_net_param") else solver.net_param
        else:
            train = prototxt.read(run_dir / (solver.train_net or solver.net), caffe_pb2.NetParameter())
        if (size := _batch(train, caffe_pb2.TRAIN)) is not None:
            out["batch_size"] = str(size)
        tests = testnets.test_nets(RunFolder(run_dir).solver, run_dir, caffe_pb2)
        if tests and (size := _batch(tests[0].net, caffe_pb2.TEST)) is not None:
            out["test_batch_size"] = str(size)
    except (CaffetoolError, OSError):
        pass
    return out


def _batch(net: Message, phase: int) -> int | None:
    for layer in net.layer:
        if layer.include and not any(rule.phase == phase for rule in layer.include if rule.HasField("phase")):
            continue
        for field, value in layer.ListFields():
            if field.type == FieldDescriptor.TYPE_MESSAGE and not field.is_repeated \
                    and "batch_size" in field.message_type.fields_by_name and value.HasField("batch_size"):
                return value.batch_size
    return None


def digest(files: dict[str, Any]) -> str:
    """The sha256 of ``NAME SHA256`` lines, sorted, of a manifest's files (a file's entry is its
    checksum, or a record holding one as ``sha256``)."""
    lines = sorted(f"{name} {entry.get('sha256') if isinstance(entry, dict) else entry}\n" for name, entry in files.items())
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def engine(built: dict) -> dict[str, Any]:
    """The engine build's params, from its manifest."""
    if not built:
        return {}
    options = built.get("options") or {}
    out: dict[str, Any] = {"engine.version": (built.get("source") or {}).get("version"),
                           "engine.build": hashlib.sha256(json.dumps(built, sort_keys=True, default=str).encode())
                           .hexdigest()[:16], "engine.built_at": built.get("built_at")}
    for key, param in ENGINE_OPTIONS.items():
        if key in options:
            value = options[key]
            out[param] = ",".join(map(str, value)) if isinstance(value, list) else value
    return out


def tags(manifest: runrecord.Manifest, run_dir: Path) -> dict[str, str]:
    """The run's tags (see the module's description)."""
    device = manifest.device
    caffetool = manifest.caffetool
    out = {"status": manifest.status, "host": manifest.host.get("hostname"),
           "gpu": device.get("label") if device.get("gpu") else "cpu", "caffetool.version": caffetool.get("version"),
           "caffetool.git_commit": caffetool.get("git_commit"), "caffetool.run_dir": str(run_dir.absolute()),
           "caffetool.command": manifest.command}
    return {k: str(v) for k, v in out.items() if v is not None}


def final_scalars(final: dict) -> list[Scalar]:
    """The manifest's ``final`` figures as scalars: ``final/train/<output>``, ``final/test<k>/<output>``."""
    out: list[Scalar] = [(final.get("iteration", 0), f"final/train/{k}", v) for k, v in (final.get("train") or {}).items()
                         if v is not None]
    for key, row in sorted(final.items()):
        if re.fullmatch(r"test\d+", key) and isinstance(row, dict):
            out += [(row.get("NumIters", final.get("iteration", 0)), f"final/{key}/{k}", v) for k, v in row.items()
                    if k not in ROW_KEYS and v is not None]
    return out


def artifacts(run_dir: Path, weights: Path | None) -> list[tuple[Path, str | None]]:
    """The run's files for MLflow, each with the artifact folder it goes in (``None``: the top)."""
    return list(_artifacts(run_dir, weights))


def _artifacts(run_dir: Path, weights: Path | None) -> Iterator[tuple[Path, str | None]]:
    folder = RunFolder(run_dir)
    for path in [folder.manifest, *sorted(run_dir.glob("*.prototxt")), folder.labels]:
        if path.is_file():
            yield path, None
    for plot in sorted(folder.plots.glob("*.png")):
        yield plot, folder.plots.name
    if weights is not None and weights.is_file():
        yield weights, "weights"


def mlflow_status(status: str | None) -> str:
    """MLflow's end status for caffetool's ``status`` (a run that never ended is KILLED)."""
    return MLFLOW_STATUS.get(status or "", "KILLED")
