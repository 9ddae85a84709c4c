"""A net's filters and activations laid out as one picture, as DIGITS's "show visualizations" does.

The layout follows ``vis_square`` of BVLC Caffe's ``examples/00-classification.ipynb``: the values of
the whole set stretched together to 0..255 (so strong and weak channels can be compared), the
tiles in a near-square grid — ``ceil(sqrt(n))`` columns, as many rows as needed — separated by
white lines one pixel wide. Tiles keep their native size (a LeNet filter is 5×5 pixels): a page
scales the picture up without smoothing.
"""

from __future__ import annotations

import math

import cv2
import numpy as np

PAD = 1


def grid_size(count: int, height: int, width: int) -> tuple[int, int]:
    """The (height, width) in pixels of the grid of ``count`` tiles of ``height`` × ``width``."""
    columns = math.ceil(math.sqrt(count))
    rows = math.ceil(count / columns)
    return rows * (height + PAD) - PAD, columns * (width + PAD) - PAD


def tile(images: np.ndarray) -> np.ndarray:
    """(n, h, w) grey or (n, h, w, 3) BGR values as one uint8 picture (see :func:`grid_size`)."""
    n, h, w = images.shape[:3]
    low, high = float(images.min()), float(images.max())
    scaled = (images.astype(np.float64) - low) / (high - low) * 255 if high > low else np.zeros(images.shape)
    height, width = grid_size(n, h, w)
    columns = math.ceil(math.sqrt(n))
    picture = np.full((height, width, *images.shape[3:]), 255, np.uint8)
    for k in range(n):
        top, left = (k // columns) * (h + PAD), (k % columns) * (w + PAD)
        picture[top:top + h, left:left + w] = np.rint(scaled[k]).astype(np.uint8)
    return picture


def filters(weights: np.ndarray) -> np.ndarray:
    """A convolution's weights (out, in, kh, kw) as tiles: one colour tile a filter when it reads three
    channels (in the net's order, BGR for Caffe's nets, as OpenCV writes it), else one grey tile
    per filter and input channel."""
    out, channels, kh, kw = weights.shape
    if channels == 3:
        return weights.transpose(0, 2, 3, 1)
    return weights.reshape(out * channels, kh, kw)


def png(picture: np.ndarray) -> bytes:
    ok, encoded = cv2.imencode(".png", picture)
    return encoded.tobytes() if ok else b""
