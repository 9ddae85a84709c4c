"""``caffetool demo.*``: serve a trained model over HTTP, or classify images from the command line."""

from __future__ import annotations

from pathlib import Path

from invoke import Collection, Context

from caffetool.choices import PORT, Limit, bounded, choose, count, input_file, writable_folder
from caffetool.demo import classifier as demo_classifier
from caffetool.engine import locate
from caffetool.errors import ConfigError, ImageError, RunError
from caffetool.tasks._common import pick, task
from caffetool.train import rundir, snapshots

MODEL_HELP = {
    "run": "run name or directory (default: the newest run)", "deploy": "deploy.prototxt (instead of --run)",
    "weights": ".caffemodel (with --deploy, or to pick a snapshot of --run)", "labels": "labels.txt (with --deploy)",
    "mean": "mean .binaryproto or .npy (with --deploy)", "scale": "input scale, above 0 (with --deploy; default 1)",
    "backend": "caffe (pycaffe) or opencv (cv2.dnn)", "runs_dir": "where runs are",
}
SCALE = Limit("an input scale", 0, low_open=True)
MAX_BODY = Limit("a size in bytes", 1, 2**31 - 1, kind=int)
WORKERS = Limit("a number of server processes", 1, 64, kind=int)


def model_files(c: Context, run: str | None, deploy: str | None, weights: str | None, labels: str | None,
                mean: str | None, scale: str | None, runs_dir: str | None) -> demo_classifier.ModelFiles:
    """The model's files from the flags: given one by one with --deploy, else those of a run."""
    if deploy:
        if not (weights and labels):
            raise ConfigError("--deploy needs --weights and --labels too")
        return demo_classifier.ModelFiles(input_file(deploy, "--deploy"), input_file(weights, "--weights"),
                                          input_file(labels, "--labels"),
                                          input_file(mean, "--mean") if mean else None,
                                          bounded(scale, "--scale", SCALE))
    runs_root = Path(pick(runs_dir, c.runs.dir))
    run_dir = rundir.find(runs_root, run) if run else newest_run(runs_root)
    files = demo_classifier.from_run(run_dir)
    if weights:
        files.weights = input_file(weights, "--weights")
    return files


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
            "workers": "server processes, 1 to 64 (default 1)"})
def serve(c: Context, run: str | None = None, deploy: str | None = None, weights: str | None = None,
          labels: str | None = None, mean: str | None = None, scale: str | None = None, backend: str = "caffe",
          host: str = "127.0.0.1", port: str = "8000", max_body: str = str(10 * 1024 * 1024),
          workers: str = "1", runs_dir: str | None = None) -> None:
    """Serve a trained model: web page (upload or draw), JSON API, health check."""
    from caffetool.demo import serving  # noqa: PLC0415 - uvicorn only when serving

    tcp_port = bounded(port, "--port", PORT)
    body_limit, processes = bounded(max_body, "--max-body", MAX_BODY), bounded(workers, "--workers", WORKERS)
    engine_kind = choose(backend, demo_classifier.BACKENDS, "--backend")
    files = model_files(c, run, deploy, weights, labels, mean, scale, runs_dir)
    serving.serve(locate(c.engine.prefix, probe=False), files, engine_kind, host, tcp_port, body_limit, processes)


@task(positional=["images"], help={**MODEL_HELP, "images": "image files, comma-separated, or a folder",
                                   "top": "classes to show per image (default 5)",
                                   "annotate": "folder for labelled copies"})
def classify(c: Context, images: str, run: str | None = None, deploy: str | None = None,
             weights: str | None = None, labels: str | None = None, mean: str | None = None,
             scale: str | None = None, backend: str = "caffe", top: str = "5", annotate: str | None = None,
             runs_dir: str | None = None) -> None:
    """Classify images from the command line (top-k each; --annotate writes labelled copies)."""
    from caffetool.demo import annotate as annotator  # noqa: PLC0415

    shown = count(top, "--top")
    engine_kind = choose(backend, demo_classifier.BACKENDS, "--backend")
    labelled = writable_folder(annotate, "--annotate") if annotate else None
    paths = image_files(images)
    files = model_files(c, run, deploy, weights, labels, mean, scale, runs_dir)
    classifier = demo_classifier.load(locate(c.engine.prefix, probe=False), files, engine_kind)
    failures = 0
    for path in paths:
        try:
            data = path.read_bytes()  # one image at a time: any number of files, bounded memory
            result = classifier.classify(data, shown)
            best = result["top"][0]
            if labelled:
                annotator.annotate(data, best["label"], best["prob"], labelled / f"{path.stem}.annotated.png")
        except (OSError, ImageError) as e:
            print(f"{path}: {e}")
            failures += 1
            continue
        flag = " (inverted)" if result["inverted"] else ""
        print(f"{path}: " + ", ".join(f"{t['label']} {t['prob']:.4f}" for t in result["top"]) + flag)
    if failures:
        raise ImageError(f"{failures} file(s) could not be classified")


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


ns = Collection("demo", serve, classify)
