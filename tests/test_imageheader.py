"""Header figures against what OpenCV really decodes, for every format and depth the demo reads."""

from __future__ import annotations

import io

import cv2
import numpy as np
import pytest
from PIL import Image

from caffetool.data import imageheader


def encoded(ext: str, array: np.ndarray, *params: int) -> bytes:
    return cv2.imencode(ext, array, list(params))[1].tobytes()


def pillow(image: Image.Image, format: str, **options) -> bytes:
    out = io.BytesIO()
    image.save(out, format, **options)
    return out.getvalue()


SAMPLES = {  # name: (file, format, channels, bits a sample)
    "png grey 8": (encoded(".png", np.zeros((30, 40), np.uint8)), "PNG", 1, 8),
    "png grey 16": (encoded(".png", np.zeros((30, 40), np.uint16)), "PNG", 1, 16),
    "png rgb 16": (encoded(".png", np.zeros((30, 40, 3), np.uint16)), "PNG", 3, 16),
    "png rgba 8": (encoded(".png", np.zeros((30, 40, 4), np.uint8)), "PNG", 4, 8),
    "png rgba 16": (encoded(".png", np.zeros((30, 40, 4), np.uint16)), "PNG", 4, 16),
    "png 1 bit": (pillow(Image.new("1", (40, 30)), "PNG"), "PNG", 1, 8),
    "png palette": (pillow(Image.new("P", (40, 30)), "PNG"), "PNG", 4, 8),
    "png grey+alpha": (pillow(Image.new("LA", (40, 30)), "PNG"), "PNG", 4, 8),
    "jpeg grey": (encoded(".jpg", np.zeros((30, 40), np.uint8)), "JPEG", 1, 8),
    "jpeg colour": (encoded(".jpg", np.zeros((30, 40, 3), np.uint8)), "JPEG", 3, 8),
    "gif": (pillow(Image.new("P", (40, 30)), "GIF"), "GIF", 4, 8),
    "bmp": (encoded(".bmp", np.zeros((30, 40, 3), np.uint8)), "BMP", 3, 8),
    "bmp grey": (encoded(".bmp", np.zeros((30, 40), np.uint8)), "BMP", 1, 8),
    "bmp palette": (pillow(Image.new("RGB", (40, 30), (200, 30, 10)).convert("P"), "BMP"), "BMP", 4, 8),
    "webp lossy": (encoded(".webp", np.zeros((30, 40, 3), np.uint8)), "WebP", 3, 8),
    "webp alpha": (pillow(Image.new("RGBA", (40, 30)), "WEBP", lossless=True), "WebP", 4, 8),
}


@pytest.mark.parametrize("name", SAMPLES)
def test_the_header_gives_size_channels_and_depth(name):
    data, format, channels, bits = SAMPLES[name]
    assert imageheader.read(data) == imageheader.Header(format, 40, 30, channels, bits)


@pytest.mark.parametrize("name", SAMPLES)
def test_the_decoded_bytes_are_never_underestimated(name):
    data = SAMPLES[name][0]
    decoded = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    assert decoded.nbytes <= imageheader.read(data).decoded_bytes


@pytest.mark.parametrize("data", [
    b"",
    b"hello",
    b"\x89PNG\r\n\x1a\n",  # a signature and nothing after it
    encoded(".tiff", np.zeros((30, 40), np.uint8)),
    encoded(".ppm", np.zeros((30, 40, 3), np.uint8)),
    encoded(".pgm", np.zeros((30, 40), np.uint16)),
], ids=["empty", "text", "bare-png-signature", "tiff", "ppm", "pgm-16"])
def test_anything_else_has_no_header(data):
    assert imageheader.read(data) is None
