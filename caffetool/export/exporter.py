"""``caffetool export``: a deploy net and its weights as an ONNX model or as PyTorch code, written only
once verified.

The order of work is the order of trust: refuse layers the format cannot hold (by name and reason),
let Caffe build the net with the weights in a child (a corrupt file or the weights of another net
abort Caffe there, not here), convert and finish the model as its format writes it (ONNX checked by
``onnx.checker``), run it beside pycaffe on the run's test images or on drawn images
(:mod:`.verify`), and only then write the model and its record,
beside it and named after it (``a.onnx``: ``a.export.json``; ``a.py`` and its weights ``a.pt``:
``a.pytorch.export.json``; per-layer errors, top-1 agreement, sha256s of deploy, weights and every
file written, the inputs' paths, versions), so any number of exports share a folder. A model past
the tolerance is not written. A run's export is ``RUN/export/model.onnx`` and ``model.export.json``
(``model.py``, ``model.pt`` and ``model.pytorch.export.json``);
what else a user keeps in that folder stays. An existing model is replaced only where its record
says caffetool wrote exactly those bytes (its sha256), so a model the user changed, or another
tool's file that a record merely names, is never overwritten. A folder's single ``export.json``,
which earlier versions wrote, is read as the record of the model it names only where it has that
record's keys and the sha256 of the model there, and then gives way to the model's own record when
that model is exported again; any other ``export.json`` is the user's and stays. The cache's
exports (:func:`verified_export`) are served only as caffetool sealed them, and made again otherwise.

The flow is the same for every format: what differs is the format's row in :data:`.formats.FORMATS`
(its files, options and functions, in :mod:`.onnxformat` and :mod:`.torchformat`), so this module
never asks which format it writes.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from caffetool import __version__, extras, fsio
from caffetool.checksum import sha256_file
from caffetool.choices import unwritable
from caffetool.engine import EngineInfo, import_caffe
from caffetool.errors import ConfigError, DataError, ExportError, RunError
from caffetool.export import formats, inputs, preprocessing, room, verify
from caffetool.export.request import ExportRequest
from caffetool.inference import modelfiles
from caffetool.nets import project
from caffetool.nets.check import validate
from caffetool.runs import labelfile
from caffetool.runs.folder import RunFolder

RUN_MODEL = "model"  # a run's export, with its format's suffix: RUN/export/model.onnx
LEGACY_RECORD = "export.json"  # one record per folder, as earlier versions wrote it
RUN_IMAGES, DRAWN_IMAGES = 10_000, 16  # verified on, by default
VERIFY_BATCH = 50
CHECK_SECONDS = 300.0  # export.check: loading a model file that is code, or one batch of it (a net takes far less)


@dataclass
class Exported:
    model: Path
    record: Path
    verification: verify.Verification
    seconds: dict[str, float] = field(default_factory=dict)


def run_model(run_dir: Path, to: str = formats.DEFAULT.name) -> Path:
    """Where a run's export to ``to`` goes: ``RUN/export/model.onnx`` (``model.py`` for PyTorch)."""
    return RunFolder(run_dir).export / f"{RUN_MODEL}{formats.named(to).suffix}"


def run_request(run_dir: Path, **options: Any) -> ExportRequest:
    """An export of a run's newest weights (or ``options['files']``) to ``RUN/export/model.onnx``
    (``model.py`` with ``to="pytorch"``)."""
    files = options.pop("files", None) or modelfiles.from_run(run_dir)
    return ExportRequest(files, run_model(run_dir, options.get("to", formats.DEFAULT.name)), **options)


def export(engine: EngineInfo, request: ExportRequest, say: Callable[[str], None] = print) -> Exported:
    """Convert, verify, and write the model and its record (nothing is written unless verified)."""
    started = time.perf_counter()
    form = formats.named(request.to)
    request = _applied(request, form)
    _need_extra(form)
    form.ready(request)
    _check_target(request, form)
    caffe, net_param, net = _load(engine, request.files, form.refusals)
    labels = _labels(request.files)
    converted = form.convert(net_param, net, request, _name(request.files))
    _check_labels(labels, net, net_param, converted, request.files)
    caffe_input, model_input = _io_names(converted, request.with_preprocessing)
    p = _preprocessing(caffe, request.files, net_param, model_input)
    written = form.finish(converted, p, labels, request)
    seconds = {"convert": time.perf_counter() - started}
    source, feeds = _feeds(caffe, request.files, converted, net_param, p, caffe_input, model_input, request)
    result = verify.verify(net, converted, feeds, request.tolerance, request.batch, source,
                           form.runner(written, converted, request.out.name))
    seconds["verify"] = time.perf_counter() - started - seconds["convert"]
    _reported(result, say, "", writing=True)
    record = {**_record_of_inputs(engine, request, result, p, seconds),
              **form.record(written, converted, labels, request)}
    record["versions"].update({module: importlib.import_module(module).__version__ for module in form.versions})
    _write(request, form.contents(written, request.out), record)
    return Exported(request.out, record_of(request.out), result, seconds)


def _applied(request: ExportRequest, form: formats.ExportFormat) -> ExportRequest:
    """``request`` with the options of other formats at their defaults: they do not apply to ``form``."""
    defaults = {f.name: f.default for f in fields(ExportRequest)}
    others = {option for f in formats.FORMATS.values() for option in f.options} - set(form.options)
    return replace(request, to=form.name, **{option: defaults[option] for option in others})


def _need_extra(form: formats.ExportFormat) -> None:
    """Refuse a format whose optional extra is not installed, saying how to install it."""
    if form.extra is not None:
        extras.need(form.extra, f"exporting to {form.title}", form.extra_hint)


def record_of(model: Path) -> Path:
    """Where ``model``'s record goes: beside it, named after it (``a.onnx``: ``a.export.json``,
    ``a.py``: ``a.pytorch.export.json``)."""
    return model.with_name(model.stem + formats.of_file(model).record_suffix)


def written_files(model: Path) -> list[Path]:
    """Every file an export of ``model`` writes but its record: the model, and what its format writes
    beside it (a PyTorch export's weights)."""
    return [model, *(model.with_suffix(suffix) for suffix in formats.of_file(model).beside)]


def record_for(model: Path) -> Path | None:
    """The record of ``model`` on disk: its own, else a folder's ``export.json`` of an earlier version
    that names it; None without either."""
    own = record_of(model)
    if own.exists():
        return own
    legacy = model.with_name(LEGACY_RECORD)
    return legacy if _is_legacy_record_of(legacy, model) else None


def _is_legacy_record_of(legacy: Path, model: Path) -> bool:
    """Whether ``legacy`` is provably the record an earlier version wrote for ``model`` as it is now: its
    keys (the ONNX model it names, the sha256s of deploy, weights and model, its verification and
    versions) and its model's sha256 that of the file there. Another tool's ``export.json``, or notes
    that merely name the model, are the user's: read as no record, never replaced or removed."""
    if model.suffix != formats.DEFAULT.suffix or not legacy.is_file() or not model.is_file():
        return False
    made = read_record(legacy)
    sha = made.get("sha256")
    if (made.get("model") != model.name or not isinstance(sha, dict)
            or not all(isinstance(sha.get(key), str) for key in ("deploy", "weights"))
            or not isinstance(made.get("verification"), dict)
            or not isinstance(made.get("versions"), dict) or "caffetool" not in made["versions"]):
        return False
    try:
        return sha.get(sha_key(model)) == sha256_file(model)
    except OSError:
        return False


def recorded_inputs(model: Path) -> dict[str, str | None]:
    """The run, or the deploy net and weights, that ``model``'s record says it was exported from."""
    record = record_for(model)
    made = read_record(record) if record is not None else {}
    if not made:
        raise ConfigError(f"{model} has no export record beside it ({record_of(model).name}): give the run it was "
                          "exported from, or --deploy FILE --weights FILE")
    return {key: made.get(key) if isinstance(made.get(key), str) else None for key in ("run", "deploy", "weights")}


def _check_target(request: ExportRequest, form: formats.ExportFormat) -> None:
    """Refuse, with nothing changed, an ``--out`` that names no model file of its format or would
    write over an input, and any file in the way that caffetool did not write."""
    _check_name(request, form)
    _check_replaceable(request, form)


def _check_name(request: ExportRequest, form: formats.ExportFormat) -> None:
    """The model's file name: its format's suffix, one the format can use (importable for PyTorch),
    outside a run's top folder, and none of the files written one of the inputs."""
    out = request.out
    if out.suffix != form.suffix:
        raise ConfigError(f"--out {out} should end in {form.suffix}{form.wrong_suffix}")
    form.check_name(out)
    if RunFolder(out.parent).manifest.is_file():
        raise ConfigError(f"--out {out} is in the top folder of the run {out.parent}, beside its manifest; a run's "
                          f"export goes to {RunFolder(out.parent).export} (`caffetool export {out.parent.name}`), "
                          "or choose a folder outside the run (nothing was changed)")
    targets = {t.resolve() for t in written_files(out)}
    for given in (request.files.deploy, request.files.weights):
        if Path(given).resolve() in targets:
            raise ConfigError(f"--out {out} would write over the input {given}; choose another file (nothing was "
                              "changed)")


def _check_replaceable(request: ExportRequest, form: formats.ExportFormat) -> None:
    """Replace only a model caffetool wrote: one whose record beside it names it and holds the sha256
    of every file it writes."""
    out = request.out
    # a run's own export (evaluate and the demo's backends make it too) has no --out to choose
    own = request.files.run is not None and out.parent == RunFolder(request.files.run).export
    way_out = (f"move it out of {out.parent}, where the run's export is written" if own else
               "move it away or choose another --out")
    if (found := unwritable(out.parent)) is not None:
        raise ConfigError(f"cannot write {out}: {found[0]} {found[1]}; "
                          f"{'make it writable' if own else 'choose another --out'} (nothing was changed)")
    targets = written_files(out)
    record = record_for(out)
    if record is None:
        if present := [t for t in targets if t.exists()]:
            raise ConfigError(f"{present[0]} exists and caffetool did not make it (no {record_of(out).name} beside "
                              f"it names {out.name}); {way_out} (nothing was changed)")
        return
    made = read_record(record)
    if made.get("model") != out.name:
        raise ConfigError(f"{record} is not the record of an export of {out.name} (it names {made.get('model')!r}); "
                          f"{way_out} (nothing was changed)")
    for target in targets:
        if target.exists() and sha256_file(target) not in _shas(made, target):
            what = "model" if target == out else form.beside[target.suffix]
            raise ConfigError(f"{target} is not the {what} caffetool wrote ({record} records another sha256): it was "
                              f"changed or replaced since; {way_out} (nothing was changed)")


def read_record(record: Path) -> dict[str, Any]:
    """An export record's contents; {} where it is not one (unreadable, not a JSON object)."""
    try:
        made = json.loads(record.read_text())
    except (OSError, ValueError):
        return {}
    return made if isinstance(made, dict) else {}


def sha_key(path: Path) -> str:
    """A written file's entry in the record's sha256s: its suffix (``onnx``, ``py``, ``pt``)."""
    return path.suffix.lstrip(".")


def _shas(made: dict[str, Any], path: Path) -> set[str]:
    """The sha256s a record vouches for as the file ``path``: the one it records and, until that is in
    place, the one it replaces (see :func:`_write`)."""
    sha = made.get("sha256")
    sha = sha if isinstance(sha, dict) else {}
    key = sha_key(path)
    return {v for v in (sha.get(key), sha.get(f"replaced_{key}")) if isinstance(v, str)}


def _preprocessing(caffe: Any, files: modelfiles.ModelFiles, net_param: Any,
                   model_input: str | None) -> preprocessing.Preprocessing | None:
    """How images become the input of a net that takes images (its run's transform, or the flags'); None
    for a net that takes something else."""
    if model_input is None:
        return None
    return preprocessing.Preprocessing.of(modelfiles.transform_of(caffe, files, net_param))


def _load(engine: EngineInfo, files: modelfiles.ModelFiles, refusals: Callable[[Any], None]) -> tuple[Any, Any, Any]:
    """pycaffe, the deploy NetParameter and the net with its weights, once ``refusals`` (the format's)
    found no layer it cannot write."""
    caffe = import_caffe(engine)
    for what, path in (("deploy net", files.deploy), ("weights", files.weights)):
        if not Path(path).is_file():
            raise (RunError if files.run else ConfigError)(f"{what} {path} not found")
    net_param, _ = project.read_net(engine, Path(files.deploy), caffe.proto.caffe_pb2)
    refusals(net_param)
    validate(engine, Path(files.deploy).parent, deploy=[Path(files.deploy).name],
                   weights=str(Path(files.weights).absolute()))
    caffe.set_mode_cpu()
    net = caffe.Net(str(files.deploy), str(files.weights), caffe.TEST)
    _check_finite(net, files.weights)
    return caffe, net_param, net


def _check_finite(net: Any, weights: Path | str) -> None:
    """Refuse weights that hold NaN or infinity, naming the layer: every answer of such a model is NaN."""
    for layer, blobs in net.params.items():
        bad = sum(int(b.data.size - np.count_nonzero(np.isfinite(b.data))) for b in blobs)
        if bad:
            raise ExportError(f"{weights}: the weights of layer {layer!r} hold {bad:,} values that are not finite "
                              "(NaN or infinity), so the model would answer NaN; export weights from before the "
                              "training diverged (an earlier snapshot)")


def _labels(files: modelfiles.ModelFiles) -> list[str] | None:
    return labelfile.read(Path(files.labels)) if files.labels and Path(files.labels).is_file() else None


def _check_labels(labels: list[str] | None, net: Any, net_param: Any, converted: formats.Conversion,
                  files: modelfiles.ModelFiles) -> None:
    """Labels go into the model's metadata (a PyTorch export's record): as many as the net's last
    output has values per image; a detection net's name its label ids, one line each, as many as its
    DetectionOutput's ``num_classes`` (the background's line included)."""
    if labels is None or not converted.outputs:
        return
    if modelfiles.is_detection(net_param):
        output = modelfiles.output_blob(net_param)
        layer = next(layer for layer in reversed(net_param.layer) if output in layer.top)
        classes = int(layer.detection_output_param.num_classes)
        if len(labels) != classes:
            raise ConfigError(f"{files.labels} names {len(labels)} labels, but the detection net's "
                              f"{modelfiles.DETECTION_OUTPUT} layer {layer.name!r} has num_classes {classes}: a "
                              "detection net's labels file names each label id on its own line, the background "
                              "(label 0) included; give the labels of this net (nothing was written)")
        return
    final = net.blobs[verify.output_blobs(converted)[converted.outputs[-1]]].data
    classes = int(np.prod(final.shape[1:]))
    if len(labels) != classes:
        raise ConfigError(f"{files.labels} names {len(labels)} classes, but the net's output "
                          f"{converted.outputs[-1]!r} has {classes} values per image; give the labels of this "
                          "net (nothing was written)")


def _name(files: modelfiles.ModelFiles) -> str:
    return files.run.name if files.run else Path(files.weights).stem


def _io_names(converted: formats.Conversion,
              with_preprocessing: bool) -> tuple[str, str | None]:
    """(the Caffe input images go to, the model's input for them); None when the net takes no images."""
    images = [name for name, shape in converted.inputs.items() if len(shape) == 3]
    if len(converted.inputs) != 1 or not images:
        if with_preprocessing:
            raise ConfigError("--with-preprocessing needs a net with one image input (N, C, H, W)")
        return "", None
    return images[0], preprocessing.IMAGE_INPUT if with_preprocessing else images[0]


def _feeds(caffe: Any, files: modelfiles.ModelFiles, converted: formats.Conversion,
           net_param: Any,
           p: preprocessing.Preprocessing | None, caffe_input: str, model_input: str | None,
           request: ExportRequest) -> tuple[str, Iterator[inputs.Feeds]]:
    size = room.pass_size(net_param, request.batch or VERIFY_BATCH, fixed=request.batch is not None)
    if model_input is None or p is None:
        count = request.images or DRAWN_IMAGES
        return f"{count} drawn inputs (seed {inputs.SEED})", _other_feeds(converted, net_param, count, size)
    transformer = p.transformer(caffe, caffe_input)
    if files.run is not None:
        count = request.images or RUN_IMAGES
        try:
            first = inputs.run_images(files.run, caffe.proto.caffe_pb2, converted.inputs[caffe_input], count)
            items = ((inputs.as_loaded(pixels, p) if request.with_preprocessing else None, blob)
                     for pixels, blob in first)
            return (_test_images_said(files.run, caffe.proto.caffe_pb2, count),
                    inputs.batched(_peeked(items), size, caffe_input, model_input, p, transformer))
        except (DataError, RunError):
            pass  # a run without a test database of its own: drawn images, as for a deploy net
    count = request.images or DRAWN_IMAGES
    drawn = ((image, None) for image in inputs.drawn_images(p, count))
    return (f"{count} drawn images (seed {inputs.SEED})",
            inputs.batched(drawn, size, caffe_input, model_input, p, transformer))


def _test_images_said(run: Path, caffe_pb2: Any, count: int) -> str:
    """Which of the run's test images the verification runs on, as the summary says it."""
    total = inputs.test_count(run, caffe_pb2)
    return f"the run's {total:,} test images" if count >= total else f"the run's first {count:,} test images"


def _peeked(items: Iterator) -> Iterator:
    """``items`` with its first element read now, so a database that cannot be read fails here."""
    first = next(items, None)
    if first is None:
        raise DataError("the run's test database holds no records")

    def chained() -> Iterator:
        yield first
        yield from items
    return chained()


def _other_feeds(converted: formats.Conversion, net_param: Any, count: int, size: int) -> Iterator[inputs.Feeds]:
    embeds = {layer.bottom[0]: layer.embed_param.input_dim for layer in net_param.layer if layer.type == "Embed"}
    rng = np.random.default_rng(inputs.SEED)
    for start in range(0, count, size):
        n = min(size, count - start)
        feeds = {name: inputs.other_inputs(shape, n, rng, embeds.get(name)) for name, shape in converted.inputs.items()}
        yield feeds, feeds


def _record_of_inputs(engine: EngineInfo, request: ExportRequest, result: verify.Verification,
                      p: preprocessing.Preprocessing | None, seconds: dict) -> dict:
    """What every export's record holds: what it was made from, how it was verified, with what."""
    files = request.files
    return {
        "model": request.out.name,
        # the written files' entries are filled once their bytes are final (_write)
        "sha256": {"deploy": sha256_file(Path(files.deploy)), "weights": sha256_file(Path(files.weights))},
        "deploy": str(Path(files.deploy).absolute()), "weights": str(Path(files.weights).absolute()),
        "run": str(files.run) if files.run else None,
        "preprocessing": p.steps() if p else None,
        "verification": result.record(),
        "versions": {"caffetool": __version__, "engine": engine.manifest.get("source", {}).get("version"),
                     "engine_built_at": engine.manifest.get("built_at")},
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "seconds": {k: round(v, 3) for k, v in seconds.items()},
    }


def _write(request: ExportRequest, contents: dict[Path, bytes], record: dict) -> None:
    """The export's files and its record, nothing else in their folder touched. The record goes first
    and also vouches for the files it replaces, so a write cut short between them leaves files that
    :func:`_check_target` still recognises (and :func:`verified_export` finds stale and redoes)."""
    out = request.out
    shas = record["sha256"]
    for path, data in contents.items():
        shas[sha_key(path)] = hashlib.sha256(data).hexdigest()
        if path.is_file():
            shas[f"replaced_{sha_key(path)}"] = sha256_file(path)
    legacy = record_for(out)
    fsio.write_atomic(record_of(out), json.dumps(record, indent=2) + "\n", ExportError)
    for path, data in contents.items():
        fsio.write_atomic(path, data, ExportError)
    for path in contents:
        shas.pop(f"replaced_{sha_key(path)}", None)
    fsio.write_atomic(record_of(out), json.dumps(record, indent=2) + "\n", ExportError)
    if legacy is not None and legacy != record_of(out):  # an earlier version's record of this model
        legacy.unlink(missing_ok=True)


def check(engine: EngineInfo, model_path: Path, files: modelfiles.ModelFiles, tolerance: float,
          images: int | None, say: Callable[[str], None] = print, seconds: float = CHECK_SECONDS
          ) -> verify.Verification:
    """``export.check``: an existing model against Caffe again, layer by layer and as its caller gets
    its outputs, on the same inputs as an export (its tensors carry Caffe's blob names, as caffetool's
    exports do; a PyTorch export's attributes are named after Caffe's layers), read and run as its
    format writes it. A format whose file is code (a PyTorch ``model.py``) runs in a child process,
    each step within ``seconds``."""
    form = formats.of_file(model_path)
    _need_extra(form)
    written = form.read(model_path)
    caffe, net_param, net = _load(engine, files, form.refusals)
    converted, options = form.reconvert(written, model_path, net_param, net, _name(files))
    request = ExportRequest(files, model_path, tolerance=tolerance, images=images, to=form.name, **options)
    caffe_input, model_input = _io_names(converted, request.with_preprocessing)
    p = _preprocessing(caffe, files, net_param, model_input)
    source, feeds = _feeds(caffe, files, converted, net_param, p, caffe_input, model_input, request)
    running = (form.checked(written, converted, model_path, seconds) if form.checked
               else contextlib.nullcontext(form.runner(written, converted, str(model_path))))
    with running as run:
        result = verify.verify(net, converted, feeds, tolerance, request.batch, source, run)
    _reported(result, say, f"{model_path}: ", writing=False)
    return result


def _reported(result: verify.Verification, say: Callable[[str], None], where: str, writing: bool) -> None:
    """The layer table and the summary said; a verification that failed raised, naming the first layer
    past the tolerance or not finite (``writing``: an export, which then writes nothing)."""
    for line in result.table():
        say(line)
    say(result.summary())
    past = result.first_past()
    if past is None:
        return
    unwritten = ": no model was written" if writing else ""
    if past.type == verify.RETURNED:  # the layers agree; what the model hands its caller does not
        differs = (f": {past.mismatch}" if past.mismatch else
                   f" by {past.rel:.3g} of its scale, past the tolerance of {result.tolerance:g}"
                   if past.max_abs < float("inf") else " in its shape or in values that are not finite")
        raise ExportError(f"{where}every layer agrees with Caffe, but the model's output {past.blob!r} as its caller "
                          f"gets it (what forward returns) differs from Caffe's{differs}{unwritten}")
    if past.failed:
        raise ExportError(f"{where}layer {past.layer!r} ({past.type}) gives {past.non_finite:,} values that are not "
                          "finite (NaN or infinity) in Caffe itself, from finite inputs (weights that overflow "
                          f"float32, a division by zero): a model that answers them is not verified{unwritten}")
    if past.mismatch:  # detections: another count, image or label, which no tolerance covers
        raise ExportError(f"{where}layer {past.layer!r} ({past.type}) gives other detections than Caffe: "
                          f"{past.mismatch}{unwritten}")
    hint = " (compare with --tolerance, or report the layer)" if writing else ""
    raise ExportError(f"{where}layer {past.layer!r} ({past.type}) differs from Caffe by {past.rel:.3g} of its "
                      f"scale, past the tolerance of {result.tolerance:g}{unwritten}{hint}")
