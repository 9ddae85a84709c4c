"""Turning uploaded bytes into the array the network takes, with OpenCV.

The steps follow the deploy net and the run's training transform: decode (grey or colour as the
net's input has 1 or 3 channels; alpha composited onto white, as a drawing's transparent
background would be seen on paper), resize to the input's height and width, then Caffe's
``DataTransformer`` arithmetic — subtract the mean, multiply by the scale. For data sets of light
strokes on a dark ground (MNIST, Fashion-MNIST), a picture whose border is light — a photo of a
digit on paper — is inverted first, and the result says so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import cv2
import numpy as np

from caffetool.demo import imagesize
from caffetool.errors import CaffetoolError


class BadImage(CaffetoolError, ValueError):
    """An upload that is not an image the demo can use; ``status`` is the HTTP code to answer."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Transform:
    channels: int
    height: int
    width: int
    scale: float = 1.0
    mean: np.ndarray | None = None  # (C,) per-channel values or (C, H, W) image
    white_on_black: bool = False


@dataclass
class Prepared:
    blob: np.ndarray  # (1, C, H, W) float32, what the net takes
    seen: np.ndarray  # (H, W) or (H, W, 3) uint8: the input as the network sees it (before mean/scale)
    inverted: bool
    decode_ms: float
    preprocess_ms: float


def prepare(data: bytes, t: Transform, max_pixels: int) -> Prepared:
    if not data:
        raise BadImage("empty body: send an image (PNG, JPEG, GIF, BMP or WebP)", 422)
    start = time.perf_counter()
    dims = imagesize.dimensions(data)
    if dims is not None and dims[0] * dims[1] > max_pixels:
        raise BadImage(f"image of {dims[0]}x{dims[1]} pixels is over the limit of {max_pixels:,} pixels", 422)
    try:
        image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    except cv2.error as e:
        raise BadImage(f"the image could not be decoded ({str(e).strip().splitlines()[-1]})", 422) from None
    if image is None:
        raise BadImage("the body is not an image OpenCV can decode (PNG, JPEG, GIF, BMP, WebP, ...)", 415)
    if image.shape[0] * image.shape[1] > max_pixels:
        raise BadImage(f"image of {image.shape[1]}x{image.shape[0]} pixels is over the limit of "
                       f"{max_pixels:,} pixels", 422)
    decoded = time.perf_counter()
    image = _to_channels(_to_uint8(image), t.channels)
    if image.shape[:2] != (t.height, t.width):
        interpolation = cv2.INTER_AREA if image.shape[0] > t.height else cv2.INTER_LINEAR
        image = cv2.resize(image, (t.width, t.height), interpolation=interpolation)
    inverted = t.white_on_black and _light_background(image)
    if inverted:
        image = 255 - image
    chw = image.reshape(t.height, t.width, t.channels).transpose(2, 0, 1).astype(np.float32)
    if t.mean is not None:
        chw -= t.mean.reshape(-1, 1, 1) if t.mean.ndim == 1 else t.mean
    chw *= np.float32(t.scale)
    done = time.perf_counter()
    return Prepared(chw[None], image, inverted, (decoded - start) * 1e3, (done - decoded) * 1e3)


def _to_uint8(image: np.ndarray) -> np.ndarray:
    if image.dtype == np.uint8:
        return image
    if image.dtype == np.uint16:
        return (image >> 8).astype(np.uint8)
    return cv2.normalize(image, None, 0, 255, cv2.NORM_MINMAX).astype(np.uint8)


def _to_channels(image: np.ndarray, channels: int) -> np.ndarray:
    if image.ndim == 3 and image.shape[2] == 4:  # alpha: composite onto white paper
        alpha = image[:, :, 3:4].astype(np.float32) / 255.0
        image = (image[:, :, :3] * alpha + 255.0 * (1.0 - alpha)).astype(np.uint8)
    if channels == 1:
        return image if image.ndim == 2 else cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)
    return cv2.cvtColor(image, cv2.COLOR_GRAY2BGR) if image.ndim == 2 else image


def _light_background(image: np.ndarray) -> bool:
    """True when the image's border is mostly light: dark strokes on light paper."""
    grey = image if image.ndim == 2 else cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)
    border = np.concatenate([grey[0], grey[-1], grey[:, 0], grey[:, -1]])
    return float(border.mean()) > 127.0
