"""``caffetool export``: a deploy net and its weights as an ONNX model or as PyTorch code, written only
once verified.

The order of work is the order of trust: refuse layers ONNX cannot hold (by name and reason), let
Caffe build the net with the weights in a child (a corrupt file or the weights of another net abort
Caffe there, not here), convert (:mod:`.onnxnet`; :mod:`.torchnet` for PyTorch), let
``onnx.checker`` check an ONNX model with its shape inference, run the model beside pycaffe on the
run's test images or on drawn images (:mod:`.verify`), and only then write the model and its record,
beside it and named after it (``a.onnx``: ``a.export.json``; ``a.py`` and its weights ``a.pt``:
``a.pytorch.export.json``; per-layer errors, top-1 agreement, sha256s of deploy, weights and every
file written, the inputs' paths, versions), so any number of exports share a folder. A model past
the tolerance is not written. A run's export is ``RUN/export/model.onnx`` and ``model.export.json``
(``model.py``, ``model.pt`` and ``model.pytorch.export.json``);
what else a user keeps in that folder stays. An existing model is replaced only where its record
says caffetool wrote exactly those bytes (its sha256), so a model the user changed, or another
tool's file that a record merely names, is never overwritten. A folder's single ``export.json``,
which earlier versions wrote, is read as the record of the model it names and gives way to the
model's own record when that model is exported again.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from caffetool import __version__, config, fsio
from caffetool.checksum import sha256_file
from caffetool.choices import unwritable
from caffetool.engine import EngineInfo, import_caffe
from caffetool.errors import ConfigError, DataError, ExportError, RunError
from caffetool.export import inputs, onnxnet, preprocessing, room, runtime, torchnet, verify
from caffetool.inference import modelfiles
from caffetool.nets import project
from caffetool.nets.check import validate
from caffetool.runs import labelfile
from caffetool.runs.folder import RunFolder

MODEL = "model.onnx"  # a run's export
ONNX, PYTORCH = "onnx", "pytorch"
SUFFIXES = {ONNX: ".onnx", PYTORCH: ".py"}  # the model file of each format
WEIGHTS_SUFFIX = ".pt"  # a PyTorch export's state_dict, beside its model.py
RECORD_SUFFIX = ".export.json"  # a model's record: a.onnx -> a.export.json
RECORD_SUFFIXES = {".onnx": RECORD_SUFFIX, ".py": ".pytorch" + RECORD_SUFFIX}
LEGACY_RECORD = "export.json"  # one record per folder, as earlier versions wrote it
DEFAULT_OPSET = 17
DEFAULT_TOLERANCE = 1e-4
RUN_IMAGES, DRAWN_IMAGES = 10_000, 16  # verified on, by default
VERIFY_BATCH = 50


@dataclass
class ExportRequest:
    files: modelfiles.ModelFiles
    out: Path  # the model file
    opset: int = DEFAULT_OPSET
    batch: int | None = None  # None: dynamic
    tolerance: float = DEFAULT_TOLERANCE
    images: int | None = None
    with_preprocessing: bool = False
    to: str = ONNX


@dataclass
class Exported:
    model: Path
    record: Path
    verification: verify.Verification
    seconds: dict[str, float] = field(default_factory=dict)


def run_request(run_dir: Path, **options: Any) -> ExportRequest:
    """An export of a run's newest weights (or ``options['files']``) to ``RUN/export/model.onnx``
    (``model.py`` with ``to="pytorch"``)."""
    files = options.pop("files", None) or modelfiles.from_run(run_dir)
    model = RunFolder(run_dir).export / MODEL
    return ExportRequest(files, model.with_suffix(SUFFIXES[options.get("to", ONNX)]), **options)


def export(engine: EngineInfo, request: ExportRequest, say: Callable[[str], None] = print) -> Exported:
    """Convert, verify, and write the model and its record (nothing is written unless verified)."""
    started = time.perf_counter()
    if request.to == PYTORCH:
        torchnet.torch_module()
    else:
        _check_opset(request.opset)
    _check_target(request)
    caffe, net_param, net = _load(engine, request.files, torchnet.refusals if request.to == PYTORCH
                                  else onnxnet.refusals)
    labels = _labels(request.files)
    if request.to == PYTORCH:
        return _to_pytorch(engine, request, caffe, net_param, net, labels, say, started)
    converted = onnxnet.convert(net_param, net, request.opset, request.batch, _name(request.files))
    _check_labels(labels, net, converted, request.files)
    caffe_input, onnx_input = _io_names(converted, request.with_preprocessing)
    p = _preprocessing(caffe, request.files, net_param, onnx_input)
    model = _finished(converted, p, labels, request)
    seconds = {"convert": time.perf_counter() - started}
    source, feeds = _feeds(caffe, request.files, converted, net_param, p, caffe_input, onnx_input, request)
    result = verify.verify(net, converted, feeds, request.tolerance, request.batch, source,
                           verify.onnx_runner(model, converted))
    seconds["verify"] = time.perf_counter() - started - seconds["convert"]
    _reported(result, say, "", writing=True)
    record = _record(engine, request, model, result, p, seconds)
    _write(request, {request.out: model.SerializeToString()}, record)
    return Exported(request.out, record_of(request.out), result, seconds)


def _to_pytorch(engine: EngineInfo, request: ExportRequest, caffe: Any, net_param: Any, net: Any,
                labels: list[str] | None, say: Callable[[str], None], started: float) -> Exported:
    """The PyTorch export: model.py and its weights, verified as the very text and bytes written."""
    files, weights_file = request.files, weights_of(request.out)
    about = (f"{net_param.name or _name(files)} as PyTorch code: Caffe's deploy net {Path(files.deploy).name} "
             f"with the weights {Path(files.weights).name}, exported by caffetool {__version__} and verified "
             f"against Caffe layer by layer (see {record_of(request.out).name}).")
    converted = torchnet.convert(net_param, net, _name(files), about, weights_file.name)
    _check_labels(labels, net, converted, files)
    caffe_input, image_input = _io_names(converted, False)
    p = _preprocessing(caffe, files, net_param, image_input)
    weights = torchnet.serialised(converted)
    seconds = {"convert": time.perf_counter() - started}
    source, feeds = _feeds(caffe, files, converted, net_param, p, caffe_input, image_input, request)
    result = verify.verify(net, converted, feeds, request.tolerance, None, source,
                           torchnet.runner(converted.source, weights, converted, request.out.name))
    seconds["verify"] = time.perf_counter() - started - seconds["convert"]
    _reported(result, say, "", writing=True)
    torch = torchnet.torch_module()
    record = {**_record_of_inputs(engine, request, result, p, seconds),
              "format": PYTORCH, "weights_file": weights_file.name, "class": converted.class_name,
              "inputs": {blob: ["N", *shape] for blob, shape in converted.inputs.items()},
              "outputs": [verify.output_blobs(converted)[o] for o in converted.outputs],
              "labels": labels}
    record["versions"]["torch"] = torch.__version__
    _write(request, {request.out: converted.source.encode(), weights_file: weights}, record)
    return Exported(request.out, record_of(request.out), result, seconds)


def record_of(model: Path) -> Path:
    """Where ``model``'s record goes: beside it, named after it (``a.onnx``: ``a.export.json``,
    ``a.py``: ``a.pytorch.export.json``)."""
    return model.with_name(model.stem + RECORD_SUFFIXES.get(model.suffix, RECORD_SUFFIX))


def weights_of(model: Path) -> Path:
    """A PyTorch export's weights: beside its model.py, named after it."""
    return model.with_suffix(WEIGHTS_SUFFIX)


def written_files(model: Path) -> list[Path]:
    """Every file an export of ``model`` writes but its record: the model, and a PyTorch export's weights."""
    return [model, weights_of(model)] if model.suffix == SUFFIXES[PYTORCH] else [model]


def record_for(model: Path) -> Path | None:
    """The record of ``model`` on disk: its own, else a folder's ``export.json`` of an earlier version
    that names it; None without either."""
    own = record_of(model)
    if own.exists():
        return own
    legacy = model.with_name(LEGACY_RECORD)
    return legacy if legacy.is_file() and _written(legacy).get("model") == model.name else None


def recorded_inputs(model: Path) -> dict[str, str | None]:
    """The run, or the deploy net and weights, that ``model``'s record says it was exported from."""
    record = record_for(model)
    made = _written(record) if record is not None else {}
    if not made:
        raise ConfigError(f"{model} has no export record beside it ({record_of(model).name}): give the run it was "
                          "exported from, or --deploy FILE --weights FILE")
    return {key: made.get(key) if isinstance(made.get(key), str) else None for key in ("run", "deploy", "weights")}


def _check_opset(opset: int) -> None:
    newest = onnx.defs.onnx_opset_version()
    if not onnxnet.MIN_OPSET <= opset <= newest:
        raise ConfigError(f"--opset {opset} is outside {onnxnet.MIN_OPSET}..{newest} (the onnx package here "
                          f"knows opsets up to {newest}; the export needs {onnxnet.MIN_OPSET} or later)")


def _check_target(request: ExportRequest) -> None:
    """Refuse, with nothing changed, an ``--out`` that names no model file of its format or would
    write over an input, and any file in the way that caffetool did not write."""
    _check_name(request)
    _check_replaceable(request)


def _check_name(request: ExportRequest) -> None:
    """The model's file name: its format's suffix, importable for PyTorch, outside a run's top folder,
    and none of the files written one of the inputs."""
    out = request.out
    suffix = SUFFIXES[request.to]
    if out.suffix != suffix:
        raise ConfigError(f"--out {out} should end in {suffix}" + (
            f" (--to {PYTORCH} writes a Python module, its weights beside it as NAME{WEIGHTS_SUFFIX})"
            if request.to == PYTORCH else ""))
    if request.to == PYTORCH and not torchnet.importable(out.stem):
        raise ConfigError(f"--out {out}: {out.stem!r} is not a name Python can import; choose one such as "
                          f"{torchnet.module_name(out.stem)}{suffix} (nothing was changed)")
    if RunFolder(out.parent).manifest.is_file():
        raise ConfigError(f"--out {out} is in the top folder of the run {out.parent}, beside its manifest; a run's "
                          f"export goes to {RunFolder(out.parent).export} (`caffetool export {out.parent.name}`), "
                          "or choose a folder outside the run (nothing was changed)")
    targets = {t.resolve() for t in written_files(out)}
    for given in (request.files.deploy, request.files.weights):
        if Path(given).resolve() in targets:
            raise ConfigError(f"--out {out} would write over the input {given}; choose another file (nothing was "
                              "changed)")


def _check_replaceable(request: ExportRequest) -> None:
    """Replace only a model caffetool wrote: one whose record beside it names it and holds the sha256
    of every file it writes."""
    out = request.out
    # a run's own export (evaluate and the demo's onnxruntime backend make it too) has no --out to choose
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
    made = _written(record)
    if made.get("model") != out.name:
        raise ConfigError(f"{record} is not the record of an export of {out.name} (it names {made.get('model')!r}); "
                          f"{way_out} (nothing was changed)")
    for target in targets:
        if target.exists() and sha256_file(target) not in _shas(made, target):
            what = "model" if target == out else "weights file"
            raise ConfigError(f"{target} is not the {what} caffetool wrote ({record} records another sha256): it was "
                              f"changed or replaced since; {way_out} (nothing was changed)")


def _written(record: Path) -> dict[str, Any]:
    """An export record's contents; {} where it is not one (unreadable, not a JSON object)."""
    try:
        made = json.loads(record.read_text())
    except (OSError, ValueError):
        return {}
    return made if isinstance(made, dict) else {}


def _sha_key(path: Path) -> str:
    """A written file's entry in the record's sha256s: its suffix (``onnx``, ``py``, ``pt``)."""
    return path.suffix.lstrip(".")


def _shas(made: dict[str, Any], path: Path) -> set[str]:
    """The sha256s a record vouches for as the file ``path``: the one it records and, until that is in
    place, the one it replaces (see :func:`_write`)."""
    sha = made.get("sha256")
    sha = sha if isinstance(sha, dict) else {}
    key = _sha_key(path)
    return {v for v in (sha.get(key), sha.get(f"replaced_{key}")) if isinstance(v, str)}


def _preprocessing(caffe: Any, files: modelfiles.ModelFiles, net_param: Any,
                   onnx_input: str | None) -> preprocessing.Preprocessing | None:
    """How images become the input of a net that takes images (its run's transform, or the flags'); None
    for a net that takes something else."""
    if onnx_input is None:
        return None
    return preprocessing.Preprocessing.of(modelfiles.transform_of(caffe, files, net_param))


def _load(engine: EngineInfo, files: modelfiles.ModelFiles,
          refusals: Callable[[Any], None] = onnxnet.refusals) -> tuple[Any, Any, Any]:
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


def _check_labels(labels: list[str] | None, net: Any, converted: onnxnet.Converted | torchnet.TorchConverted,
                  files: modelfiles.ModelFiles) -> None:
    """Labels go into the model's metadata (a PyTorch export's record): as many as the net's last
    output has values per image."""
    if labels is None or not converted.outputs:
        return
    final = net.blobs[verify.output_blobs(converted)[converted.outputs[-1]]].data
    classes = int(np.prod(final.shape[1:]))
    if len(labels) != classes:
        raise ConfigError(f"{files.labels} names {len(labels)} classes, but the net's output "
                          f"{converted.outputs[-1]!r} has {classes} values per image; give the labels of this "
                          "net (nothing was written)")


def _name(files: modelfiles.ModelFiles) -> str:
    return files.run.name if files.run else Path(files.weights).stem


def _io_names(converted: onnxnet.Converted | torchnet.TorchConverted,
              with_preprocessing: bool) -> tuple[str, str | None]:
    """(the Caffe input images go to, the model's input for them); None when the net takes no images."""
    images = [name for name, shape in converted.inputs.items() if len(shape) == 3]
    if len(converted.inputs) != 1 or not images:
        if with_preprocessing:
            raise ConfigError("--with-preprocessing needs a net with one image input (N, C, H, W)")
        return "", None
    return images[0], preprocessing.IMAGE_INPUT if with_preprocessing else images[0]


def _finished(converted: onnxnet.Converted, p: preprocessing.Preprocessing | None, labels: list[str] | None,
              request: ExportRequest) -> onnx.ModelProto:
    """The model as written: metadata, the preprocessing in the graph when asked, checked by onnx."""
    model = converted.model
    if request.with_preprocessing:
        model = preprocessing.prepend(model, next(iter(converted.inputs)), p,
                                      request.batch if request.batch is not None else onnxnet.DYNAMIC_BATCH)
    props = {**(p.metadata() if p else {}),
             preprocessing.IN_GRAPH: str(request.with_preprocessing).lower()}
    if labels is not None:
        props[preprocessing.LABELS] = json.dumps(labels)
    onnx.helper.set_model_props(model, props)
    model.producer_version = __version__
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        raise ExportError(f"onnx's checker refused the converted model: {str(e).strip().splitlines()[0]}") from None
    return model


def _feeds(caffe: Any, files: modelfiles.ModelFiles, converted: onnxnet.Converted | torchnet.TorchConverted,
           net_param: Any,
           p: preprocessing.Preprocessing | None, caffe_input: str, onnx_input: str | None,
           request: ExportRequest) -> tuple[str, Iterator[inputs.Feeds]]:
    size = room.pass_size(net_param, request.batch or VERIFY_BATCH, fixed=request.batch is not None)
    if onnx_input is None or p is None:
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
                    inputs.batched(_peeked(items), size, caffe_input, onnx_input, p, transformer))
        except (DataError, RunError):
            pass  # a run without a test database of its own: drawn images, as for a deploy net
    count = request.images or DRAWN_IMAGES
    drawn = ((image, None) for image in inputs.drawn_images(p, count))
    return (f"{count} drawn images (seed {inputs.SEED})",
            inputs.batched(drawn, size, caffe_input, onnx_input, p, transformer))


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


def _other_feeds(converted: onnxnet.Converted | torchnet.TorchConverted, net_param: Any, count: int, size: int) -> Iterator[inputs.Feeds]:
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


def _record(engine: EngineInfo, request: ExportRequest, model: onnx.ModelProto, result: verify.Verification,
            p: preprocessing.Preprocessing | None, seconds: dict) -> dict:
    import onnxruntime  # noqa: PLC0415

    record = {**_record_of_inputs(engine, request, result, p, seconds),
              "opset": request.opset, "ir_version": model.ir_version,
              "batch": request.batch if request.batch is not None else "dynamic",
              "inputs": {i.name: _dims(i) for i in model.graph.input},
              "outputs": {o.name: _dims(o) for o in model.graph.output},
              "preprocessing_in_graph": request.with_preprocessing}
    record["versions"].update(onnx=onnx.__version__, onnxruntime=onnxruntime.__version__)
    return record


def _dims(value: onnx.ValueInfoProto) -> list[int | str] | None:
    t = value.type.tensor_type
    return [d.dim_param or d.dim_value for d in t.shape.dim] if t.HasField("shape") else None


def _write(request: ExportRequest, contents: dict[Path, bytes], record: dict) -> None:
    """The export's files and its record, nothing else in their folder touched. The record goes first
    and also vouches for the files it replaces, so a write cut short between them leaves files that
    :func:`_check_target` still recognises (and :func:`verified_export` finds stale and redoes)."""
    out = request.out
    shas = record["sha256"]
    for path, data in contents.items():
        shas[_sha_key(path)] = hashlib.sha256(data).hexdigest()
        if path.is_file():
            shas[f"replaced_{_sha_key(path)}"] = sha256_file(path)
    legacy = record_for(out)
    fsio.write_atomic(record_of(out), json.dumps(record, indent=2) + "\n", ExportError)
    for path, data in contents.items():
        fsio.write_atomic(path, data, ExportError)
    for path in contents:
        shas.pop(f"replaced_{_sha_key(path)}", None)
    fsio.write_atomic(record_of(out), json.dumps(record, indent=2) + "\n", ExportError)
    if legacy is not None and legacy != record_of(out):  # an earlier version's record of this model
        legacy.unlink(missing_ok=True)


def check(engine: EngineInfo, model_path: Path, files: modelfiles.ModelFiles, tolerance: float,
          images: int | None, say: Callable[[str], None] = print) -> verify.Verification:
    """``export.check``: an existing model against Caffe again, layer by layer, on the same inputs as
    an export (its tensors carry Caffe's blob names, as caffetool's exports do; a PyTorch export's
    attributes are named after Caffe's layers)."""
    if model_path.suffix == SUFFIXES[PYTORCH]:
        return _check_pytorch(engine, model_path, files, tolerance, images, say)
    caffe, net_param, net = _load(engine, files)
    model = runtime.read_model(model_path)
    opset = _opset(model, model_path)
    first = model.graph.input[0].type.tensor_type.shape.dim[0] if model.graph.input else None
    batch = first.dim_value if first is not None and first.dim_value else None
    converted = onnxnet.convert(net_param, net, opset, batch, _name(files))
    _check_interface(model, model_path, converted)
    missing = [name for c in converted.compared for _, name in c.outputs
               if name not in {t for node in model.graph.node for t in node.output}]
    if missing:
        raise ExportError(f"{model_path} has no tensor {missing[0]!r} for the deploy net's blob of that name: it "
                          "is not an export of this net (or was made by another tool)")
    with_preprocessing = any(i.name == preprocessing.IMAGE_INPUT for i in model.graph.input)
    caffe_input, onnx_input = _io_names(converted, with_preprocessing)
    p = _preprocessing(caffe, files, net_param, onnx_input)
    request = ExportRequest(files, model_path, opset, batch, tolerance, images,
                            with_preprocessing)
    source, feeds = _feeds(caffe, files, converted, net_param, p, caffe_input, onnx_input, request)
    result = verify.verify(net, converted, feeds, tolerance, batch, source, verify.onnx_runner(model, converted))
    _reported(result, say, f"{model_path}: ", writing=False)
    return result


def _check_pytorch(engine: EngineInfo, model_path: Path, files: modelfiles.ModelFiles, tolerance: float,
                   images: int | None, say: Callable[[str], None]) -> verify.Verification:
    """``export.check`` of a PyTorch export: its model.py with the weights beside it, as written."""
    torchnet.torch_module()
    weights_file = weights_of(model_path)
    try:
        source, weights = model_path.read_text(), weights_file.read_bytes()
    except (OSError, UnicodeDecodeError) as e:
        raise ExportError(f"cannot read the PyTorch export {model_path} and its weights {weights_file.name} "
                          f"({e.strerror if isinstance(e, OSError) else 'not text'}): export the model again") from None
    caffe, net_param, net = _load(engine, files, torchnet.refusals)
    converted = torchnet.convert(net_param, net, _name(files), "", weights_file.name)
    caffe_input, image_input = _io_names(converted, False)
    p = _preprocessing(caffe, files, net_param, image_input)
    request = ExportRequest(files, model_path, tolerance=tolerance, images=images, to=PYTORCH)
    source_said, feeds = _feeds(caffe, files, converted, net_param, p, caffe_input, image_input, request)
    result = verify.verify(net, converted, feeds, tolerance, None, source_said,
                           torchnet.runner(source, weights, converted, str(model_path)))
    _reported(result, say, f"{model_path}: ", writing=False)
    return result


def _opset(model: onnx.ModelProto, path: Path) -> int:
    """The ONNX operator set ``model`` declares; a model that declares none is damaged."""
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if not versions:
        raise ExportError(f"{path} declares no ONNX operator set (its opset_import is empty): it is damaged or "
                          "not an export; export the model again")
    return versions[0]


def _check_interface(model: onnx.ModelProto, path: Path, converted: onnxnet.Converted) -> None:
    """The model's inputs and outputs are the deploy net's: each input by name with the net's shape
    (batch aside), each output of the net present."""
    given = {i.name: i for i in model.graph.input}
    for name, shape in converted.inputs.items():
        if name not in given and preprocessing.IMAGE_INPUT not in given:
            raise ExportError(f"{path} has no input {name!r}, which the deploy net takes: it is not an export of "
                              "this net")
        if name in given:
            dims = [d.dim_value or d.dim_param for d in given[name].type.tensor_type.shape.dim][1:]
            if [d for d in dims if isinstance(d, int)] and dims != list(shape):
                raise ExportError(f"{path}: its input {name!r} takes {'x'.join(map(str, dims))} per item, the deploy "
                                  f"net {'x'.join(map(str, shape))}: it is not an export of this net")
    outputs = {o.name for o in model.graph.output}
    missing = [name for name in converted.outputs if name not in outputs]
    if missing:
        raise ExportError(f"{path} has no graph output {missing[0]!r}, which the deploy net gives: it is damaged "
                          "or not an export of this net; export the model again")


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
    if past.failed:
        raise ExportError(f"{where}layer {past.layer!r} ({past.type}) gives {past.non_finite:,} values that are not "
                          "finite (NaN or infinity) in Caffe itself, from finite inputs (weights that overflow "
                          f"float32, a division by zero): a model that answers them is not verified{unwritten}")
    hint = " (compare with --tolerance, or report the layer)" if writing else ""
    raise ExportError(f"{where}layer {past.layer!r} ({past.type}) differs from Caffe by {past.rel:.3g} of its "
                      f"scale, past the tolerance of {result.tolerance:g}{unwritten}{hint}")



def verified_export(engine: EngineInfo, files: modelfiles.ModelFiles,
                    say: Callable[[str], None] = print) -> Path:
    """The verified export of exactly these deploy net and weights (its record's sha256s match), made now
    if missing or stale: a run's in its export folder, other files' in caffetool's cache (one folder per
    pair of deploy and weights). What the ``onnxruntime`` backend runs, and OpenCV 5's."""
    if files.run is not None:
        model, request = RunFolder(files.run).export / MODEL, run_request(files.run, files=files)
        named = files.run.name
    else:
        pair = sha256_file(Path(files.deploy)) + sha256_file(Path(files.weights))
        model = config.cache_home() / "exports" / hashlib.sha256(pair.encode()).hexdigest()[:16] / MODEL
        request, named = ExportRequest(files, model), Path(files.weights).name
    record = record_for(model)
    try:
        made = json.loads(record.read_text()) if record is not None else {}
        fresh = (made["sha256"]["weights"] == sha256_file(Path(files.weights))
                 and made["sha256"]["deploy"] == sha256_file(Path(files.deploy))
                 and made["sha256"]["onnx"] == sha256_file(model) and not made.get("preprocessing_in_graph"))
    except (OSError, ValueError, KeyError, TypeError):
        fresh = False
    if not fresh:
        say(f"exporting {named} to ONNX ({model}), verified against Caffe first")
        export(engine, request, say=lambda _: None)
    return model
