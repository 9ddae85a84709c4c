"""``caffetool demo.*``: serve a trained model over HTTP, classify images from the command line, or find
objects in them with a detection model (SSD)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from invoke import Collection, Context

from caffetool.backends import devices, dispatch
from caffetool.choices import PORT, Limit, bounded, choose, count, input_file, writable_folder
from caffetool.engine import EngineInfo, locate
from caffetool.errors import ConfigError, ImageError, RunError
from caffetool.inference import modelfiles
from caffetool.runs import labelfile, runrecord, snapshots
from caffetool.serving import classifier, detector
from caffetool.serving.batcher import Batching
from caffetool.tasks._common import pick, task

MODEL_HELP = {
    "run": "run name or directory (default: the newest run)", "deploy": "deploy.prototxt (instead of --run)",
    "weights": ".caffemodel (with --deploy, or to pick a snapshot of --run)", "labels": "labels.txt (with --deploy)",
    "mean": "mean .binaryproto or .npy (with --deploy)", "scale": "input scale, above 0 (with --deploy; default 1)",
    "backend": dispatch.help_text(), "runs_dir": "where runs are",
    "mean_values": "per-channel means, e.g. 104,117,123 (BGR; with --deploy, instead of --mean)",
    "channel_swap": "colour nets: channel order after RGB decoding (with --deploy; default 2,1,0: BGR)",
    "raw_scale": "colour nets: multiplies the [0, 1] pixels before the mean (with --deploy; default 255)",
    "image_dims": "colour nets: H,W to resize to before the centre crop, e.g. 256,256 for CaffeNet "
                  "(default: a run's training image size, else the net's input size)",
    "oversample": "colour nets: average 10 crops (corners, centre and their mirrors), as Caffe's classify.py",
}
SCALE = Limit("an input scale", 0, low_open=True)
RAW_SCALE = Limit("a raw scale", 0, low_open=True)
MEAN_VALUE = Limit("a mean value", -1e6, 1e6)
SIDE = Limit("a side in pixels", 1, 65535, kind=int)
CHANNEL = Limit("a channel index", 0, 1023, kind=int)
MAX_BODY = Limit("a size in bytes", 1, 2**31 - 1, kind=int)
WORKERS = Limit("a number of server processes", 1, 64, kind=int)
BATCH = Limit("a batch size", 1, 4096, kind=int)
DELAY_US = Limit("a delay in microseconds", 0, 10_000_000, kind=int)
QUEUE = Limit("a number of queued images", 1, 1_000_000, kind=int)
THRESHOLD = Limit("a confidence threshold", 0, 1)
DETECTED = "detections"  # demo.detect's folder when --out is not given


@dataclass(frozen=True)
class ColourFlags:
    """The colour-model flags as typed (texts, None when not given), checked by :func:`model_files`."""

    mean_values: str | None = None
    channel_swap: str | None = None
    raw_scale: str | None = None
    image_dims: str | None = None
    oversample: bool = False


def model_files(c: Context, run: str | None, deploy: str | None, weights: str | None, labels: str | None,
                mean: str | None, scale: str | None, runs_dir: str | None,
                colour: ColourFlags = ColourFlags(), need_labels: bool = True) -> modelfiles.ModelFiles:
    """The model's files from the flags: given one by one with --deploy, else those of a run
    (``need_labels`` False: a --deploy model's classes may go unnamed, as in an export)."""
    dims = numbers(colour.image_dims, "--image-dims", SIDE, 2)
    if deploy:
        if not weights or (need_labels and not labels):
            raise ConfigError("--deploy needs --weights and --labels too" if need_labels
                              else "--deploy needs --weights too")
        if mean and colour.mean_values:
            raise ConfigError("give --mean FILE or --mean-values, not both")
        return modelfiles.ModelFiles(input_file(deploy, "--deploy"), input_file(weights, "--weights"),
                                          input_file(labels, "--labels") if labels else None,
                                          input_file(mean, "--mean") if mean else None,
                                          bounded(scale, "--scale", SCALE),
                                          mean_values=numbers(colour.mean_values, "--mean-values", MEAN_VALUE),
                                          channel_swap=numbers(colour.channel_swap, "--channel-swap", CHANNEL),
                                          raw_scale=bounded(colour.raw_scale, "--raw-scale", RAW_SCALE),
                                          image_dims=dims, oversample=colour.oversample)
    given = [flag for flag, value in (("--mean", mean), ("--scale", scale), ("--mean-values", colour.mean_values),
                                      ("--channel-swap", colour.channel_swap), ("--raw-scale", colour.raw_scale))
             if value]
    if given:
        raise ConfigError(f"only a --deploy model takes {', '.join(given)}; a run is fed with its own training "
                          "transform")
    runs_root = Path(pick(runs_dir, c.runs.dir))
    run_dir = runrecord.find(runs_root, run) if run else newest_run(runs_root)
    files = modelfiles.from_run(run_dir)
    if weights:
        files.weights = input_file(weights, "--weights")
    files.image_dims, files.oversample = dims, colour.oversample
    return files


def numbers(text: str | None, flag: str, limit: Limit, length: int | None = None) -> tuple | None:
    """Comma-separated numbers (``104,117,123``), each within ``limit``; None when the flag was not given."""
    if text is None or text == "":
        return None
    values = tuple(bounded(part.strip(), flag, limit) for part in str(text).split(","))
    if length is not None and len(values) != length:
        raise ConfigError(f"{flag} {text!r} needs {length} comma-separated numbers")
    return values


def newest_run(runs_root: Path) -> Path:
    """The run whose newest .caffemodel is the most recent."""
    trained = [(weights.stat().st_mtime, run) for run in sorted(runs_root.glob("*/"))
               if (weights := snapshots.newest_weights(run)) is not None]
    if not trained:
        raise RunError(f"no trained run in {runs_root} — run `caffetool train` first, or pass --deploy/--weights/--labels")
    return max(trained, key=lambda pair: pair[0])[1]


@task(help={**MODEL_HELP, "host": "address to bind (127.0.0.1: this machine only)",
            "port": "TCP port, 1 to 65535 (default 8000)",
            "max_body": "largest accepted body in bytes (413 past it; default 10 MiB)",
            "workers": "server processes, 1 to 64 (default 1)",
            "gpu": "cpu (default), auto or one GPU id: where the caffe or pytorch backend runs the model",
            "max_batch": "images one forward pass may join from concurrent requests (default 1: no batching)",
            "max_queue_delay_us": "how long a pass may wait for more requests, in microseconds (default 0: it takes "
                                  "what is queued)",
            "max_queue": "images that may wait for a pass; past it a request gets 503 (default 256)",
            "model_repository": "serve every model of a folder in Triton's layout: NAME/1/, NAME/2/, each a run "
                                "folder (or a link to one) or an ONNX export's model.onnx (instead of --run)"})
def serve(c: Context, run: str | None = None, deploy: str | None = None, weights: str | None = None,
          labels: str | None = None, mean: str | None = None, scale: str | None = None, backend: str = "caffe",
          host: str = "127.0.0.1", port: str = "8000", max_body: str = str(10 * 1024 * 1024),
          workers: str = "1", runs_dir: str | None = None, mean_values: str | None = None,
          channel_swap: str | None = None, raw_scale: str | None = None, image_dims: str | None = None,
          oversample: bool = False, gpu: str = "cpu", max_batch: str = "1", max_queue_delay_us: str = "0",
          max_queue: str = "256", model_repository: str | None = None) -> None:
    """Serve a trained model: web page (upload or draw), JSON API, the Open Inference Protocol (/v2), health."""
    from caffetool.demo import launcher  # noqa: PLC0415 - uvicorn only when serving

    tcp_port = bounded(port, "--port", PORT)
    body_limit, processes = bounded(max_body, "--max-body", MAX_BODY), bounded(workers, "--workers", WORKERS)
    engine_kind = choose(backend, dispatch.BACKENDS, "--backend")
    colour = ColourFlags(mean_values, channel_swap, raw_scale, image_dims, oversample)
    engine = locate(c.engine.prefix, probe=False, gpus=gpu.strip().lower() != "cpu")
    device = devices.for_pycaffe(engine, gpu)
    if model_repository and (run or deploy or weights):
        raise ConfigError("give --model-repository DIR or one model (--run, --deploy, --weights), not both")
    # a detection net names its classes without a labels file ("class N"); the net is read only when
    # none is given, so the options' own errors come first
    need_labels = bool(labels) or not (deploy and detector.detects(engine, input_file(deploy, "--deploy")))
    source = Path(model_repository).expanduser() if model_repository else \
        model_files(c, run, deploy, weights, labels, mean, scale, runs_dir, colour, need_labels=need_labels)
    batching = Batching(bounded(max_batch, "--max-batch", BATCH), bounded(max_queue_delay_us, "--max-queue-delay-us",
                                                                           DELAY_US) / 1e6,
                        bounded(max_queue, "--max-queue", QUEUE))
    launcher.serve(engine, source, engine_kind, host, tcp_port, body_limit, processes, device, batching)


@task(positional=["images"], help={**MODEL_HELP, "images": "image files, comma-separated, or a folder",
                                   "top": "classes to show per image (default 5, or every class of a net of fewer)",
                                   "annotate": "folder for labelled copies",
                                   "labelled": "score the images (accuracy, confusion matrix): IMAGES is a folder "
                                               "with one sub-folder per class (named as a label or its index), or "
                                               "a file of 'PATH LABEL' lines as convert_imageset reads",
                                   "out": "folder for the scores with --labelled (default: a new one under the "
                                          "run's eval/)",
                                   "gpu": "cpu (default), auto or one GPU id: where the caffe or pytorch backend runs the model"})
def classify(c: Context, images: str, run: str | None = None, deploy: str | None = None,
             weights: str | None = None, labels: str | None = None, mean: str | None = None,
             scale: str | None = None, backend: str = "caffe", top: str | None = None, annotate: str | None = None,
             runs_dir: str | None = None, labelled: bool = False, out: str | None = None,
             mean_values: str | None = None, channel_swap: str | None = None, raw_scale: str | None = None,
             image_dims: str | None = None, oversample: bool = False, gpu: str = "cpu") -> None:
    """Classify images from the command line (top-k each; --annotate writes labelled copies; --labelled also
    scores them: accuracy and a confusion matrix)."""
    from caffetool.serving import annotation  # noqa: PLC0415

    shown = count(top, "--top")
    engine_kind = choose(backend, dispatch.BACKENDS, "--backend")
    labelled_copies = writable_folder(annotate, "--annotate") if annotate else None
    colour = ColourFlags(mean_values, channel_swap, raw_scale, image_dims, oversample)
    engine = locate(c.engine.prefix, probe=False, gpus=gpu.strip().lower() != "cpu")
    device = devices.for_pycaffe(engine, gpu)
    if labelled:
        return classify_labelled(c, images, out, shown, labelled_copies,
                                 (run, deploy, weights, labels, mean, scale, runs_dir, colour), engine_kind,
                                 engine, device)
    if out:
        raise ConfigError("--out is for the scores of --labelled images")
    paths = image_files(images)
    files = model_files(c, run, deploy, weights, labels, mean, scale, runs_dir, colour)
    model = classifier.load(engine, files, engine_kind, device=device)
    shown = labelfile.top_k(shown, len(model.labels))
    failures = 0
    for path in paths:
        try:
            data = path.read_bytes()  # one image at a time: any number of files, bounded memory
            result = model.classify(data, shown)
            best = result["top"][0]
            if labelled_copies:
                annotation.annotate(data, best["label"], best["prob"], labelled_copies / f"{path.stem}.annotated.png")
        except (OSError, ImageError) as e:
            print(f"{path}: {e}")
            failures += 1
            continue
        print(result_line(path, result))
    if failures:
        raise ImageError(f"{failures} file(s) could not be classified")


def classify_labelled(c: Context, images: str, out: str | None, shown: int | None, annotate: Path | None,
                      model: tuple, engine_kind: str, engine: EngineInfo, device: devices.PycaffeDevice) -> None:
    """``demo.classify IMAGES --labelled``: each image's line with its true class, then the scores."""
    from caffetool.evaluation import scoring  # noqa: PLC0415 - matplotlib only when scoring
    from caffetool.serving import annotation  # noqa: PLC0415

    source = Path(images).expanduser()
    if not source.exists():
        raise ConfigError(f"IMAGES {source} does not exist; --labelled takes a folder of class sub-folders "
                          "or a file of 'PATH LABEL' lines")
    files = model_files(c, *model)
    if out is None and files.run is None:
        raise ConfigError("without a run, give --out DIR for the scores")
    folder = writable_folder(out, "--out") if out else scoring.default_folder(files.run)
    loaded = classifier.load(engine, files, engine_kind, device=device)
    items = (scoring.from_folder(source, loaded.labels) if source.is_dir()
             else scoring.from_list(input_file(source, "IMAGES"), len(loaded.labels)))

    def show(item: scoring.Item, result: dict | None, error: str | None) -> None:
        if result is None:
            print(f"{item.path}: {error}")
            return
        if annotate:
            best = result["top"][0]
            annotation.annotate(item.path.read_bytes(), best["label"], best["prob"],
                               annotate / f"{item.path.stem}.annotated.png")
        print(result_line(item.path, result) + f" (true: {loaded.labels[item.label]})")

    outcome = scoring.evaluate(loaded, items, shown, folder, str(source.absolute()), show)
    for line in outcome.lines():
        print(line)
    if outcome.failures:
        raise ImageError(f"{len(outcome.failures)} file(s) could not be classified")


def result_line(path: Path, result: dict) -> str:
    """One image's line: its top-k labels and probabilities."""
    flag = " (inverted)" if result["inverted"] else ""
    return f"{path}: " + ", ".join(f"{t['label']} {t['prob']:.4f}" for t in result["top"]) + flag


def image_files(spec: str) -> list[Path]:
    """The files named by ``spec``: comma-separated paths, a folder standing for its files.

    Only names are listed (the images are read one at a time later); naming none is an error, so a
    typo does not pass as a successful run over nothing.
    """
    paths: list[Path] = []
    for part in (p for p in spec.split(",") if p):
        path = Path(part)
        paths += sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    if not paths:
        raise ConfigError(f"IMAGES {spec!r} names no files; give image files, comma-separated, or a folder")
    return paths


@task(positional=["images"], help={
    **{k: MODEL_HELP[k] for k in ("deploy", "weights", "mean", "scale", "backend", "mean_values", "channel_swap")},
    "images": "image files, comma-separated, or a folder (`caffetool demo.detect A.png B.png` takes them as words)",
    "labels": "a file of class names, one a line from label 0 (default: labels shown as 'class N')",
    "out": f"folder for IMAGE-detected.png copies, detections.csv and detections.json (default: {DETECTED})",
    "threshold": "the lowest confidence of a box kept, 0 to 1 (default 0.5)",
    "gpu": "cpu (default), auto or one GPU id: where the caffe or pytorch backend runs the model"})
def detect(c: Context, images: str, deploy: str | None = None, weights: str | None = None, labels: str | None = None,
           mean: str | None = None, scale: str | None = None, backend: str = "caffe", out: str = DETECTED,
           threshold: str = str(detector.DEFAULT_THRESHOLD), mean_values: str | None = None,
           channel_swap: str | None = None, gpu: str = "cpu") -> None:
    """Find objects in images with a detection model (SSD): copies with the boxes drawn, detections.csv
    and detections.json; one line per image."""
    from caffetool.serving import detections  # noqa: PLC0415 - only for this command

    cutoff = bounded(threshold, "--threshold", THRESHOLD)
    engine_kind = choose(backend, dispatch.BACKENDS, "--backend")
    if not deploy:
        raise ConfigError("demo.detect needs the detection net's files: --deploy DEPLOY.prototxt --weights "
                          "MODEL.caffemodel (and --mean-values, --scale as the net was trained)")
    folder = writable_folder(out, "--out")
    paths = detections.checked_images(image_files(images))
    engine = locate(c.engine.prefix, probe=False, gpus=gpu.strip().lower() != "cpu")
    device = devices.for_pycaffe(engine, gpu)
    files = model_files(c, None, deploy, weights, labels, mean, scale, None,
                        ColourFlags(mean_values, channel_swap), need_labels=False)
    model = detector.load(engine, files, engine_kind, device=device)
    found = detections.detect_all(model, paths, cutoff, folder, print)
    boxes = sum(len(item.result["detections"]) for item in found)
    print(f"{boxes} box(es) in {len(found)} image(s) at or above {cutoff:g}: {folder}/ holds the annotated copies, "
          f"{detections.CSV_NAME} and {detections.JSON_NAME}")


ns = Collection("demo", serve, classify, detect)
