"""Copies of images with what the model found drawn by OpenCV: a classifier's label and probability
in the corner, or a detector's boxes, each with its label and score."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from caffetool.errors import ImageError

MIN_SIDE = 224  # small images (28x28) are enlarged so the text stays readable


def annotate(data: bytes, label: str, prob: float, out: Path) -> Path:
    """Write ``data`` (an encoded image) to ``out`` as a PNG with "label prob%" drawn in its corner."""
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if image is None:
        raise ImageError("not an image OpenCV can decode; nothing annotated")
    if min(image.shape[:2]) < MIN_SIDE:
        factor = MIN_SIDE / min(image.shape[:2])
        image = cv2.resize(image, None, fx=factor, fy=factor, interpolation=cv2.INTER_NEAREST)
    text = f"{label} {prob:.1%}"
    scale = max(0.5, image.shape[1] / 500)
    (w, h), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, 2)
    cv2.rectangle(image, (0, 0), (w + 12, h + base + 12), (0, 0, 0), -1)
    cv2.putText(image, text, (6, h + 6), cv2.FONT_HERSHEY_SIMPLEX, scale, (255, 255, 255), 2, cv2.LINE_AA)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(out), image):
        raise ImageError(f"could not write the annotated copy {out}")
    return out


BOX_COLOUR = (0, 200, 0)  # BGR


def draw_detections(image: np.ndarray, detections: list[dict]) -> np.ndarray:
    """A copy of ``image`` (BGR, as decoded) with each detection's pixel box outlined and "label score"
    written on a filled strip just above it (inside the box where the image has no room above);
    nothing else in the image changes, and its size stays."""
    out = image.copy()
    height, width = out.shape[:2]
    thickness = max(2, round(max(height, width) / 400))
    scale = max(0.45, max(height, width) / 1000)
    for d in detections:
        box = d["box"]
        x1, y1 = int(round(box["xmin"])), int(round(box["ymin"]))
        x2, y2 = int(round(box["xmax"])), int(round(box["ymax"]))
        cv2.rectangle(out, (x1, y1), (x2, y2), BOX_COLOUR, thickness)
        text = f"{d['label']} {d['confidence']:.3f}"
        (w, h), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, 1)
        top = y1 - h - base - 4 if y1 - h - base - 4 >= 0 else max(y1, 0)
        left = min(max(x1, 0), max(width - w - 4, 0))
        cv2.rectangle(out, (left, top), (left + w + 4, top + h + base + 4), BOX_COLOUR, -1)
        cv2.putText(out, text, (left + 2, top + h + 2), cv2.FONT_HERSHEY_SIMPLEX, scale, (0, 0, 0), 1, cv2.LINE_AA)
    return out
