"""``model.generate``: the three prototxt files of a model for a data set, validated first.

Inside the output (run) directory files refer to each other relatively — the solver's ``net`` is
``train_val.prototxt`` and snapshots go to ``snapshots/<model>`` — so Caffe runs with that directory
as its working directory, and the directory can be moved. Everything outside it (the databases) is
referred to by absolute path. All files are built, round-tripped through ``text_format`` and
accepted by Caffe (train, test and deploy nets) in a staging sibling before any is written: a new
directory appears complete in one rename; in an existing one (a run directory, or ``--force``)
each file is replaced in one rename and the rest of the directory is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from caffetool import fsio
from caffetool.choices import count
from caffetool.data.layout import Dataset
from caffetool.engine import EngineInfo, import_caffe
from caffetool.errors import ConfigError, NetError, RunError
from caffetool.nets import builders, check, prototxt, solvers
from caffetool.nets.declaration import Model
from caffetool.runs.folder import NAMES

# The files written, by their names in a run folder: the output folder is one, or is laid out like one.
TRAIN_VAL, DEPLOY, SOLVER, SNAPSHOTS = (NAMES[key] for key in ("train_val", "deploy", "solver", "snapshots"))


@dataclass
class Generated:
    out: Path
    files: dict[str, Path]
    report: dict


def generate(engine: EngineInfo, model: Model | None, dataset: Dataset, out: Path,
             options: solvers.SolverOptions, batch: int | None = None, test_batch: int | None = None,
             net_file: Path | None = None, force: bool = False, validate: bool = True) -> Generated:
    """Write train_val/deploy/solver prototxt for ``model`` (or the user's ``net_file``).

    ``validate=False`` skips the child-process check, for callers that start Caffe on the files at
    once and treat a refusal before its first iteration as the validation failure (``train``).
    """
    if model is None and net_file is None:
        raise ConfigError("give --model NAME or --net FILE")
    caffe = import_caffe(engine)
    pb = caffe.proto.caffe_pb2
    default_batch = model.batch if model else (64, 100)
    batch = default_batch[0] if batch is None else batch
    test_batch = default_batch[1] if test_batch is None else test_batch
    batch, test_batch = count(batch, "--batch-size"), count(test_batch, "--test-batch-size")
    texts: dict[str, str] = {}
    if model is not None:
        shape = _shape(model, dataset)
        source = builders.DataSource(str(dataset.db("train")), str(dataset.db("test")), dataset.backend)
        texts[TRAIN_VAL] = prototxt.round_trip(
            builders.train_val(caffe, model, shape, source, batch, test_batch), TRAIN_VAL)
        texts[DEPLOY] = prototxt.round_trip(builders.deploy(caffe, model, shape), DEPLOY)
        prefix = f"{SNAPSHOTS}/{model.name}"
    else:
        net = prototxt.read(net_file, pb.NetParameter())
        _check_sources(net, net_file)
        test_batch = _test_batch(net) or test_batch
        texts[TRAIN_VAL] = prototxt.round_trip(net, str(net_file))
        prefix = f"{SNAPSHOTS}/{net_file.stem}"
    params = solvers.build(caffe, options, TRAIN_VAL, prefix, dataset.count("test"), test_batch)
    texts[SOLVER] = prototxt.round_trip(params, SOLVER)
    return _write_validated(engine, texts, out, force, validate)


def _shape(model: Model, dataset: Dataset) -> builders.Shape:
    channels, height, width = dataset.shape
    if height != width:
        raise ConfigError(f"data set {dataset.name} has {height}x{width} images; the models take square input")
    if model.crop and height < model.size:
        raise ConfigError(
            f"data set {dataset.name} has {height}x{width} images, smaller than {model.name}'s "
            f"{model.size}x{model.size} crop; use --model lenet, or a data set of at least that size")
    return builders.Shape(channels, model.size if model.crop else height, len(dataset.classes))


def _check_sources(net: Any, net_file: Path) -> None:
    for layer in net.layer:
        if layer.type == "Data":
            where = Path(layer.data_param.source)
            if not where.is_absolute():
                raise NetError(f"{net_file}: layer {layer.name!r} reads {where}, a relative path; "
                               "give the database's absolute path")
            if not where.exists():
                raise NetError(f"{net_file}: layer {layer.name!r} reads {where}, which does not exist")


def _test_batch(net: Any) -> int | None:
    for layer in net.layer:
        if layer.type == "Data" and any(rule.phase == 1 for rule in layer.include):
            return layer.data_param.batch_size
    return None


def _write_validated(engine: EngineInfo, texts: dict[str, str], out: Path, force: bool,
                     validate: bool = True) -> Generated:
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; give a folder for the generated files")
    existing = [name for name in texts if (out / name).exists()]
    if existing and not force:
        raise ConfigError(f"{out} already has {', '.join(existing)}; use --force to replace them or another --out")
    if out.is_dir():
        with fsio.staging_folder(out, RunError) as scratch:
            report = _write_and_check(engine, texts, scratch, validate)
            (out / SNAPSHOTS).mkdir(exist_ok=True)
            for name, text in texts.items():
                fsio.write_atomic(out / name, text, RunError)
    else:
        with fsio.staged_dir(out, RunError) as built:
            report = _write_and_check(engine, texts, built, validate)
    return Generated(out, {name: out / name for name in texts}, report)


def _write_and_check(engine: EngineInfo, texts: dict[str, str], folder: Path, validate: bool) -> dict:
    """Write the files into ``folder`` and, if ``validate``, have Caffe accept them there."""
    for name, text in texts.items():
        fsio.write_atomic(folder / name, text, RunError)
    (folder / SNAPSHOTS).mkdir()
    return check.validate(engine, folder, SOLVER, [DEPLOY] if DEPLOY in texts else []) if validate else {}
