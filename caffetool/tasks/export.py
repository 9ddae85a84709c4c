"""``caffetool export``: a trained model as ONNX or as PyTorch code, verified against Caffe layer by layer
before it is written."""

from __future__ import annotations

from pathlib import Path

from invoke import Collection, Context

from caffetool import extras
from caffetool.choices import Limit, bounded, input_file, output_file
from caffetool.engine import locate
from caffetool.errors import ConfigError
from caffetool.runs import runrecord
from caffetool.tasks._common import pick, task
from caffetool.tasks.demo import MODEL_HELP, ColourFlags, model_files

TOLERANCE = Limit("a relative tolerance", 0, 1, low_open=True)
# Bounds checked before any work: every image is run through Caffe and onnxruntime, and a fixed
# batch pads each pass to its size (a test set holds 10,000 images; Caffe's own deploy nets 1 to 10).
IMAGES = Limit("a number of images", 1, 1_000_000, kind=int)
BATCH = Limit("a batch size", 1, 4096, kind=int)
SECONDS = Limit("a number of seconds", 0, 86_400, low_open=True)
HELP = {
    "run": "run name or directory: writes RUN/export/model.onnx and model.export.json (model.py, model.pt and "
           "model.pytorch.export.json with --to pytorch)",
    "to": "onnx (the default) or pytorch: a model.py of one nn.Module and its state_dict beside it (NAME.pt)",
    "deploy": "deploy.prototxt (instead of a run)", "weights": ".caffemodel (with --deploy, or a snapshot of RUN)",
    "labels": "labels.txt (optional with --deploy): stored in the model's metadata",
    "out": "the model file, .onnx or with --to pytorch .py (default: RUN/export/model.onnx; with --deploy, "
           "WEIGHTS-NAME.onnx here)",
    "opset": "ONNX opset, 13 or later (default 17; ONNX only)",
    "batch": "the batch dimension: dynamic (default) or a fixed number (ONNX only)",
    "mean": MODEL_HELP["mean"], "mean_values": MODEL_HELP["mean_values"], "scale": MODEL_HELP["scale"],
    "channel_swap": MODEL_HELP["channel_swap"], "raw_scale": MODEL_HELP["raw_scale"],
    "image_dims": MODEL_HELP["image_dims"],
    "with_preprocessing": "the graph takes images (N x H x W x C in [0, 1]; a detection net's 0-255, resized) and "
                          "does the mean, scale and channel order itself (ONNX only)",
    "tolerance": "largest error allowed per layer, relative to the blob's scale (default 1e-4)",
    "images": "how many images to verify on (default: the run's first 10,000 test images, else 16 drawn)",
    "runs_dir": "where runs are",
}


@task(default=True, help=HELP)
def export(c: Context, run: str | None = None, deploy: str | None = None, weights: str | None = None,
           labels: str | None = None, out: str | None = None, to: str = "onnx", opset: str | None = None,
           batch: str | None = None, mean: str | None = None, mean_values: str | None = None,
           scale: str | None = None, channel_swap: str | None = None, raw_scale: str | None = None,
           image_dims: str | None = None, with_preprocessing: bool = False, tolerance: str = "1e-4",
           images: str | None = None, runs_dir: str | None = None) -> None:
    """Export a run (or --deploy/--weights) to ONNX or PyTorch, verified against Caffe layer by layer; nothing
    is written past the tolerance."""
    from caffetool.export import exporter, formats  # noqa: PLC0415 - onnx only when exporting
    from caffetool.export.request import DEFAULT_OPSET  # noqa: PLC0415

    form = formats.named(to)
    if form.extra is not None:
        extras.need(form.extra, f"caffetool export --to {form.name}", form.extra_hint)
    formats.refuse_other_options(form, {"opset": opset, "batch": batch,
                                        "with_preprocessing": with_preprocessing or None})
    files = _files(c, run, deploy, weights, labels, mean, mean_values, scale, channel_swap, raw_scale, image_dims,
                   runs_dir)
    target = output_file(out, "--out") if out else (
        exporter.run_model(files.run, form.name) if files.run
        else Path.cwd() / f"{form.stem_of(files.weights.stem)}{form.suffix}")
    request = exporter.ExportRequest(files, target, int(bounded(opset or str(DEFAULT_OPSET), "--opset",
                                                                Limit("an opset", 1, 10_000, kind=int))),
                                     _batch(batch or "dynamic"), float(bounded(tolerance, "--tolerance", TOLERANCE)),
                                     _images(images), with_preprocessing, form.name)
    result = exporter.export(locate(c.engine.prefix, probe=False), request)
    written = ", ".join(map(str, exporter.written_files(result.model)))
    print(f"wrote {written} and {result.record} (verified in {result.seconds['verify']:.1f} s)")


@task(positional=["model"], help={**{k: v for k, v in HELP.items() if k not in ("out", "to", "opset", "batch",
                                                                                "with_preprocessing")},
                                  "model": "the .onnx file (or a PyTorch export's .py, which the check runs in a "
                                           "child process) to check",
                                  "run": "the run it was exported from (default: what the model's record names)",
                                  "timeout": "seconds a PyTorch export's model.py may take to load, or to run one "
                                             "batch, before its check is stopped (default 300)"})
def check(c: Context, model: str, run: str | None = None, deploy: str | None = None, weights: str | None = None,
          labels: str | None = None, mean: str | None = None, mean_values: str | None = None,
          scale: str | None = None, channel_swap: str | None = None, raw_scale: str | None = None,
          image_dims: str | None = None, tolerance: str = "1e-4", images: str | None = None,
          runs_dir: str | None = None, timeout: str | None = None) -> None:
    """Compare an exported model with Caffe again, layer by layer (the run or the deploy net and weights its
    record names, or those given)."""
    from caffetool.export import exporter, formats  # noqa: PLC0415

    path = input_file(model, "MODEL")
    form = formats.of_file(path)
    if timeout is not None and form.checked is None:
        raise ConfigError(f"--timeout is for a PyTorch export's model.py, which the check runs; {path} is "
                          f"{form.title}, which runs no code of its own")
    seconds = float(bounded(timeout, "--timeout", SECONDS)) if timeout is not None else exporter.CHECK_SECONDS
    if not run and not deploy:
        recorded = exporter.recorded_inputs(path.absolute())
        run, deploy = recorded["run"], None if recorded["run"] else recorded["deploy"]
        weights = weights or recorded["weights"]
    files = _files(c, run, deploy, weights, labels, mean, mean_values, scale, channel_swap, raw_scale, image_dims,
                   runs_dir)
    exporter.check(locate(c.engine.prefix, probe=False), path, files,
                   float(bounded(tolerance, "--tolerance", TOLERANCE)), _images(images), seconds=seconds)
    print(f"{path} agrees with Caffe")


def _files(c: Context, run: str | None, deploy: str | None, weights: str | None, labels: str | None,
           mean: str | None, mean_values: str | None, scale: str | None, channel_swap: str | None,
           raw_scale: str | None, image_dims: str | None, runs_dir: str | None):  # noqa: ANN202
    if run and deploy:
        raise ConfigError("give a run or --deploy/--weights, not both")
    if not run and not deploy:
        raise ConfigError("give a run to export (caffetool export RUN) or --deploy FILE --weights FILE")
    runs_root = Path(pick(runs_dir, c.runs.dir))
    colour = ColourFlags(mean_values, channel_swap, raw_scale, image_dims)
    return model_files(c, str(runrecord.find(runs_root, run)) if run else None, deploy, weights, labels, mean,
                       scale, runs_dir, colour, need_labels=False)


def _batch(text: str) -> int | None:
    if str(text).strip().lower() == "dynamic":
        return None
    return int(bounded(text, "--batch", BATCH))


def _images(text: str | None) -> int | None:
    return None if text is None else int(bounded(text, "--images", IMAGES))


ns = Collection("export", export, check)
