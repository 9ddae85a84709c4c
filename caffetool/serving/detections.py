"""``demo.detect``'s work: each image's boxes found, drawn and written, all or nothing.

For images ``IMG...`` the folder gets ``<stem>-detected.png`` (the image with its boxes and their
labels and scores, :func:`.annotation.draw_detections`), ``detections.csv`` (a row per box: image,
label, label_id, confidence and the box's corners in pixels) and ``detections.json`` (each image's
size and boxes, in pixels and normalised). Every image is read and run before anything appears in
the folder: the annotated copies are made in a staging folder beside them and moved into place, with
the two tables written atomically, only once every image has its boxes — a missing, unreadable or
broken image stops the command and leaves the folder as it was.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from caffetool import fsio
from caffetool.choices import input_file
from caffetool.errors import ConfigError, ImageError
from caffetool.serving import annotation
from caffetool.serving.detector import Detector

CSV_NAME, JSON_NAME, SUFFIX = "detections.csv", "detections.json", "-detected.png"
CSV_COLUMNS = ("image", "label", "label_id", "confidence", "xmin", "ymin", "xmax", "ymax")
NOTHING_WRITTEN = "nothing was written"


@dataclass(frozen=True)
class Found:
    """One image's answer: :meth:`.detector.Detector.answer`'s dict."""

    path: Path
    result: dict


def checked_images(paths: list[Path]) -> list[Path]:
    """``paths``, each an existing readable file, no two with the same stem (their annotated copies
    would be one file); refused before the model loads."""
    checked = [input_file(path, "IMAGES") for path in paths]
    stems: dict[str, Path] = {}
    for path in checked:
        if path.stem in stems:
            raise ConfigError(f"IMAGES {stems[path.stem]} and {path} would both be annotated as "
                              f"{path.stem}{SUFFIX}; give images of different names")
        stems[path.stem] = path
    return checked


def detect_all(detector: Detector, paths: list[Path], threshold: float, folder: Path,
               say: Callable[[str], None] = lambda _: None) -> list[Found]:
    """The boxes of every image at or above ``threshold``, written to ``folder`` (see the module's
    docstring); ``say`` gets each image's line as it is done."""
    found: list[Found] = []
    with fsio.staging_folder(folder, ImageError) as staging:  # beside the folder: nothing in it until the end
        for path in paths:
            data = _read(path)
            try:
                result = detector.detect(data, threshold)
            except ImageError as e:
                raise ImageError(f"{path}: {e}; {NOTHING_WRITTEN}") from None
            fsio.write_atomic(staging / annotated_name(path), _annotated_png(data, result, path), ImageError)
            found.append(Found(path, result))
            say(line(found[-1]))
        try:
            folder.mkdir(parents=True, exist_ok=True)
            for item in found:
                name = annotated_name(item.path)
                os.replace(staging / name, folder / name)
        except OSError as e:
            raise ImageError(f"cannot write {folder}: {e.strerror or e}") from None
        fsio.write_atomic(folder / CSV_NAME, csv_text(found), ImageError)
        fsio.write_atomic(folder / JSON_NAME, json_text(found, detector, threshold), ImageError)
    return found


def annotated_name(path: Path) -> str:
    return f"{path.stem}{SUFFIX}"


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise ImageError(f"{path} cannot be read ({e.strerror or e}); {NOTHING_WRITTEN}") from None


def _annotated_png(data: bytes, result: dict, path: Path) -> bytes:
    """The image with its boxes drawn, as PNG; decoded as the detector's pixels were laid out (an
    orientation tag is not applied), so the boxes land where the net saw them."""
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION)
    if image is None:
        raise ImageError(f"{path}: OpenCV cannot decode it to draw on; {NOTHING_WRITTEN}")
    ok, png = cv2.imencode(".png", annotation.draw_detections(image, result["detections"]))
    if not ok:
        raise ImageError(f"{path}: its annotated copy could not be encoded as PNG; {NOTHING_WRITTEN}")
    return png.tobytes()


def line(item: Found) -> str:
    """One image's line: how many boxes, and the best one."""
    boxes = item.result["detections"]
    if not boxes:
        return f"{item.path}: no box at or above {item.result['threshold']:g}"
    best = boxes[0]
    b = best["box"]
    return (f"{item.path}: {len(boxes)} box{'es' if len(boxes) > 1 else ''}; best {best['label']} "
            f"{best['confidence']:.4f} at ({b['xmin']:.0f}, {b['ymin']:.0f})-({b['xmax']:.0f}, {b['ymax']:.0f})")


def csv_text(found: list[Found]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for item in found:
        for d in item.result["detections"]:
            b = d["box"]
            writer.writerow([str(item.path), d["label"], d["label_id"], f"{d['confidence']:.6f}",
                             *(f"{b[k]:.2f}" for k in ("xmin", "ymin", "xmax", "ymax"))])
    return out.getvalue()


def json_text(found: list[Found], detector: Detector, threshold: float) -> str:
    return json.dumps({
        "model": detector.name, "backend": detector.backend, "threshold": threshold,
        "images": [{"image": str(item.path), "annotated": annotated_name(item.path), **item.result["image"],
                    "detections": item.result["detections"]} for item in found],
    }, indent=2) + "\n"
