"""A contact sheet: a grid of sample images per class, labelled, as one PNG.

People want to look at their data before training on it. Samples are read from the training
database itself (what Caffe will see), not from the IDX files. Limits: grey or colour (1 or 3
channel) images only; a database with none of the named classes, or a sheet that cannot be
written, is a :class:`DataError`.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from caffetool.data import datum
from caffetool.engine import EngineInfo, import_caffe
from caffetool.errors import DataError
from caffetool.fsio import write_atomic

SCALE = 2
LABEL_WIDTH = 130


def samples_per_class(path: Path, classes: int, per_class: int, engine: EngineInfo) -> list[list[np.ndarray]]:
    """The first ``per_class`` images of each class, scanning the database in key order."""
    found: list[list[np.ndarray]] = [[] for _ in range(classes)]
    for channels, height, width, data, label in datum.read(path, import_caffe(engine).proto.caffe_pb2):
        if label < classes and len(found[label]) < per_class and data:
            if channels not in (1, 3):
                raise DataError(f"{path} holds {channels}-channel images; a contact sheet shows 1 or 3 channels")
            image = np.frombuffer(data, dtype=np.uint8).reshape(channels, height, width)
            found[label].append(image.transpose(1, 2, 0).copy())
        if all(len(f) == per_class for f in found):
            break
    return found


def contact_sheet(path: Path, class_names: list[str], out: Path, engine: EngineInfo, per_class: int = 12) -> Path:
    """Write a PNG with one labelled row per class; returns ``out``."""
    rows = samples_per_class(path, len(class_names), per_class, engine)
    first = next((img for row in rows for img in row), None)
    if first is None:
        raise DataError(f"{path} holds no images labelled 0 to {len(class_names) - 1}: no contact sheet to draw")
    h, w = first.shape[0] * SCALE, first.shape[1] * SCALE
    pad = 4
    sheet = np.full((len(rows) * (h + pad) + pad, LABEL_WIDTH + per_class * (w + pad) + pad, 3), 255, np.uint8)
    for r, (name, images) in enumerate(zip(class_names, rows)):
        y = pad + r * (h + pad)
        cv2.putText(sheet, f"{r} {name}"[:16], (6, y + h // 2 + 5), cv2.FONT_HERSHEY_SIMPLEX, 0.45,
                    (0, 0, 0), 1, cv2.LINE_AA)
        for c, image in enumerate(images):
            big = cv2.resize(image, (w, h), interpolation=cv2.INTER_NEAREST)
            if big.ndim == 2 or big.shape[2] == 1:
                big = cv2.cvtColor(big.reshape(h, w), cv2.COLOR_GRAY2BGR)
            x = LABEL_WIDTH + pad + c * (w + pad)
            sheet[y : y + h, x : x + w] = big
    png = cv2.imencode(".png", sheet)[1]
    write_atomic(out, png.tobytes(), DataError)
    return out
