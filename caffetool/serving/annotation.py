"""Copies of classified images with the predicted label and probability drawn by OpenCV."""

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
