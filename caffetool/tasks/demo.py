"""``invoke demo.*``: serve a trained model over HTTP, or classify images from the command line."""

from __future__ import annotations

from pathlib import Path

from invoke import Collection

from caffetool.demo import classifier as demo_classifier
from caffetool.engine import locate
from caffetool.errors import ConfigError
from caffetool.tasks._common import pick, task
from caffetool.train import rundir

MODEL_HELP = {
    "run": "run name or directory (default: the newest run)", "deploy": "deploy.prototxt (instead of --run)",
    "weights": ".caffemodel (with --deploy, or to pick a snapshot of --run)", "labels": "labels.txt (with --deploy)",
    "mean": "mean .binaryproto or .npy (with --deploy)", "scale": "input scale (with --deploy; default 1)",
    "backend": "caffe (pycaffe) or opencv (cv2.dnn)", "runs_dir": "where runs are",
}


def model_files(c, run, deploy, weights, labels, mean, scale, runs_dir) -> demo_classifier.ModelFiles:
    if deploy:
        if not (weights and labels):
            raise ConfigError("--deploy needs --weights and --labels too")
        return demo_classifier.ModelFiles(Path(deploy), Path(weights), Path(labels), Path(mean) if mean else None,
                                          None if scale is None else float(scale))
    runs_root = Path(pick(runs_dir, c.runs.dir))
    run_dir = rundir.find(runs_root, run) if run else newest_run(runs_root)
    files = demo_classifier.from_run(run_dir)
    if weights:
        files.weights = Path(weights)
    return files


def newest_run(runs_root: Path) -> Path:
    runs = [p for p in runs_root.glob("*/snapshots/*.caffemodel")]
    if not runs:
        raise ConfigError(f"no trained run in {runs_root} — run `invoke train` first, or pass --deploy/--weights/--labels")
    return max(runs, key=lambda p: p.stat().st_mtime).parent.parent


@task(help={**MODEL_HELP, "host": "address to bind (127.0.0.1: this machine only)", "port": "TCP port (1-65535)",
            "max_body": "largest accepted body in bytes (413 past it)", "workers": "server processes"})
def serve(c, run=None, deploy=None, weights=None, labels=None, mean=None, scale=None, backend="caffe",
          host="127.0.0.1", port=8000, max_body=10 * 1024 * 1024, workers=1, runs_dir=None):
    """Serve a trained model: web page (upload or draw), JSON API, health check."""
    from caffetool.demo import serving  # noqa: PLC0415 - uvicorn only when serving

    files = model_files(c, run, deploy, weights, labels, mean, scale, runs_dir)
    serving.serve(locate(c.engine.prefix, probe=False), files, backend, host, int(port), int(max_body), int(workers))


@task(positional=["images"], help={**MODEL_HELP, "images": "image files, comma-separated, or a folder",
                                   "top": "classes to show per image", "annotate": "folder for labelled copies"})
def classify(c, images, run=None, deploy=None, weights=None, labels=None, mean=None, scale=None,
             backend="caffe", top=5, annotate=None, runs_dir=None):
    """Classify images from the command line (top-k each; --annotate writes labelled copies)."""
    from caffetool.demo import annotate as annotator  # noqa: PLC0415
    from caffetool.demo.preprocess import BadImage  # noqa: PLC0415

    files = model_files(c, run, deploy, weights, labels, mean, scale, runs_dir)
    classifier = demo_classifier.load(locate(c.engine.prefix, probe=False), files, backend)
    failures = 0
    for path in iter_images(images):
        try:
            data = path.read_bytes()  # one image at a time: any number of files, bounded memory
            result = classifier.classify(data, int(top))
        except (OSError, BadImage) as e:
            print(f"{path}: {e}")
            failures += 1
            continue
        best = result["top"][0]
        flag = " (inverted)" if result["inverted"] else ""
        print(f"{path}: " + ", ".join(f"{t['label']} {t['prob']:.4f}" for t in result["top"]) + flag)
        if annotate:
            annotator.annotate(data, best["label"], best["prob"], Path(annotate) / f"{path.stem}.annotated.png")
    if failures:
        raise ConfigError(f"{failures} file(s) could not be classified")


def iter_images(spec: str):
    for part in (p for p in spec.split(",") if p):
        path = Path(part)
        if path.is_dir():
            yield from sorted(p for p in path.iterdir() if p.is_file())
        else:
            yield path


ns = Collection("demo", serve, classify)
