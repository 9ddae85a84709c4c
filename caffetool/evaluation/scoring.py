"""A user's own labelled images through the demo's classifier: accuracy and a confusion matrix for
*their* pictures, beside the per-image predictions.

The labels come from a folder with one sub-folder per class, named as the run's classes (``labels.txt``,
or ``0``, ``1``, ... for a run without one), or from a list of Caffe's ``convert_imageset`` lines,
``path label`` (the label an index, the path relative to the list file's folder). Images go through
the demo's own preprocessing (:meth:`caffetool.serving.classifier.Classifier.classify`), one at a time,
so the figures are those a user of the demo would see. Files that are no image are counted and named,
not scored.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from caffetool.errors import ConfigError, DataError, ImageError
from caffetool.evaluation import metrics, writeup
from caffetool.runs import labelfile
from caffetool.runs.folder import RunFolder

THUMBNAIL = 96


@dataclass(frozen=True)
class Item:
    path: Path
    label: int


@dataclass
class Outcome:
    folder: Path
    summary: dict[str, Any]
    matrix: np.ndarray
    failures: list[tuple[Path, str]]

    def lines(self) -> list[str]:
        what = f"labelled images from {self.summary['source']}"
        return writeup.lines(self.summary, self.matrix, self.folder, what)


def from_folder(folder: Path, labels: list[str]) -> list[Item]:
    """The files of each class sub-folder (not descending further), labelled by the folder's name: a
    class name, or its index (for names no folder can have, such as Fashion-MNIST's ``T-shirt/top``)."""
    if not folder.is_dir():
        raise ConfigError(f"{folder} is not a folder; --labelled takes a folder with one sub-folder per class")
    classes = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    index = {str(i): i for i in range(len(labels))} | {name: i for i, name in enumerate(labels)}
    unknown = [p.name for p in classes if p.name not in index]
    if unknown:
        raise DataError(f"{folder}: sub-folder(s) {', '.join(map(repr, unknown))} name no class of the model; "
                        f"name them as its classes ({', '.join(labels)}) or by index (0 to {len(labels) - 1})")
    items = [Item(f, index[c.name]) for c in classes for f in sorted(c.iterdir())
             if f.is_file() and not f.name.startswith(".")]
    if not items:
        raise DataError(f"{folder} has no images in sub-folders named as the classes ({', '.join(labels)})")
    return items


def from_list(path: Path, classes: int) -> list[Item]:
    """``convert_imageset``'s lines: a path, a space, a class index (the path may hold spaces)."""
    items = []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        parts = line.strip().rsplit(None, 1)
        if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
            raise DataError(f"{path}:{number}: {line.strip()!r} is not 'PATH LABEL' with LABEL a class index")
        label = int(parts[1])
        if not 0 <= label < classes:
            raise DataError(f"{path}:{number}: label {label} is not a class of the model (0 to {classes - 1})")
        image = Path(parts[0])
        items.append(Item(image if image.is_absolute() else path.parent / image, label))
    if not items:
        raise DataError(f"{path} lists no images")
    return items


def evaluate(classifier: Any, items: list[Item], top: int | None, out: Path, source: str,
             shown: Callable[[Item, dict | None, str | None], None] = lambda *_: None) -> Outcome:
    """Classify every item, then write predictions, confusion and per-class figures into ``out``.

    ``shown(item, result, error)`` hears of each image as it is done (a result, or why it failed).
    """
    names = classifier.labels
    k = labelfile.top_k(top, len(names))
    rows: list[list[Any]] = [["path", "true", "predicted", "probability", f"top{k}"]]
    done: list[Item] = []
    tops, probs, failures = [], [], []
    start = time.monotonic()
    for item in items:
        try:
            result = classifier.classify(item.path.read_bytes(), k)
        except (OSError, ImageError) as e:
            failures.append((item.path, str(e)))
            shown(item, None, str(e))
            continue
        shown(item, result, None)
        done.append(item)
        tops.append([t["index"] for t in result["top"]])
        probs.append([t["prob"] for t in result["top"]])
        best = result["top"][0]
        rows.append([str(item.path), names[item.label], best["label"], f"{best['prob']:.6g}",
                     ";".join(t["label"] for t in result["top"])])
    if not done:
        raise ImageError(f"none of the {len(items)} file(s) could be classified")
    labels = np.array([i.label for i in done], np.int64)
    top_arr = np.array(tops, np.int64)
    results = metrics.Results(len(names), k, labels, top_arr, np.array(probs, np.float32),
                              top_arr[:, 0] == labels, (top_arr == labels[:, None]).any(axis=1))
    summary = writeup.summary(results, names, weights=str(classifier.files.weights), split="images", source=source,
                             backend=classifier.backend, seconds=round(time.monotonic() - start, 3),
                             caffe_test=None, failed=len(failures),
                             at=dt.datetime.now().isoformat(timespec="seconds"))
    mistakes = [(_thumbnail(done[i].path), f"{names[labels[i]]} /\n{names[top_arr[i, 0]]} {probs[i][0]:.2f}")
                for i in results.confident_mistakes(writeup.MISTAKES)]
    writeup.write(writeup.Report(summary, results.confusion(), rows, [m for m in mistakes if m[0] is not None],
                               f"{classifier.name}: {Path(source).name}"), out)
    return Outcome(out, summary, results.confusion(), failures)


def default_folder(run_dir: Path) -> Path:
    """A new folder under the run's evaluations for one labelled classification."""
    return RunFolder(run_dir).evaluations / f"classify-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"


def _thumbnail(path: Path) -> np.ndarray | None:
    """The image as (H, W, 3) BGR, at most :data:`THUMBNAIL` pixels a side, for the mistakes sheet."""
    image = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if image is None:
        return None
    scale = THUMBNAIL / max(image.shape[:2])
    if scale < 1:
        image = cv2.resize(image, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
    return image
