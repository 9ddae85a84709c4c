"""Uploads the demo must refuse from their header, before OpenCV decodes a single pixel.

The hostile files are built here, byte by byte where it matters, and ``cv2.imdecode`` is replaced by
a function that fails the test: a refusal that reaches it came too late.
"""

from __future__ import annotations

import struct
import zlib

import cv2
import numpy as np
import pytest

from caffetool.inference import preprocess

GREY_28 = preprocess.Transform(channels=1, height=28, width=28)


def jpeg_bomb(side: int = 30000) -> bytes:
    """A real 8x8 JPEG whose SOF0 declares side x side, with a fill byte before that marker.

    ITU T.81 (B.1.1.2) allows any number of 0xFF fill bytes before a marker; libjpeg skips them
    and decodes side x side pixels from a file of about 330 bytes.
    """
    small = cv2.imencode(".jpg", np.zeros((8, 8), np.uint8))[1].tobytes()
    sof = small.index(b"\xff\xc0")
    declared = small[: sof + 5] + struct.pack(">HH", side, side) + small[sof + 9 :]
    return declared[:sof] + b"\xff" + declared[sof:]


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_16bit_rgba(side: int = 6300) -> bytes:
    """A valid PNG of side x side 16-bit RGBA zeros: for 6300, 308 KB that decode to 317 MB."""
    compressor = zlib.compressobj(9)
    row = b"\0" * (1 + side * 8)  # filter byte, then 4 channels of 2 bytes per pixel
    pixels = b"".join(compressor.compress(row) for _ in range(side)) + compressor.flush()
    header = struct.pack(">IIBBBBB", side, side, 16, 6, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header) + png_chunk(b"IDAT", pixels)
            + png_chunk(b"IEND", b""))


def webp_declaring(side: int) -> bytes:
    """A real 8x8 lossless WebP whose VP8L header declares side x side (14 bits each, at most 16384)."""
    small = cv2.imencode(".webp", np.zeros((8, 8, 3), np.uint8), [cv2.IMWRITE_WEBP_QUALITY, 101])[1].tobytes()
    at = small.index(b"VP8L") + 9  # fourcc, chunk size, then the 0x2F signature byte
    bits = int.from_bytes(small[at : at + 4], "little") & ~0x0FFFFFFF | (side - 1) | (side - 1) << 14
    return small[:at] + bits.to_bytes(4, "little") + small[at + 4 :]


@pytest.fixture
def no_decoding(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("cv2.imdecode was called")

    monkeypatch.setattr(cv2, "imdecode", refuse)


def test_a_jpeg_bomb_behind_a_fill_byte_is_refused_before_decoding(no_decoding):
    bomb = jpeg_bomb()
    assert len(bomb) < 1000
    with pytest.raises(preprocess.ImageTooLarge) as refused:
        preprocess.prepare(bomb, GREY_28, 40_000_000)
    assert str(refused.value) == "image of 30000x30000 pixels is over the limit of 40,000,000 pixels"


def test_a_16_bit_rgba_png_is_refused_for_the_bytes_it_decodes_to(no_decoding):
    png = png_16bit_rgba()
    assert len(png) < 320_000 and 6300 * 6300 < 40_000_000  # small, and under the pixel limit
    with pytest.raises(preprocess.ImageTooLarge) as refused:
        preprocess.prepare(png, GREY_28, 40_000_000)
    assert str(refused.value) == ("image of 6300x6300 pixels, 4 channels of 16 bits, decodes to 317,520,000 "
                                  "bytes, over the limit of 120,000,000 bytes")


@pytest.mark.parametrize("side", [8000, 16384])  # under and over Pillow's own limit, which WebP's plugin applies
def test_a_webp_declaring_too_many_pixels_is_refused_before_decoding(no_decoding, side):
    with pytest.raises(preprocess.ImageTooLarge, match=r"over the limit of 40,000,000 pixels"):
        preprocess.prepare(webp_declaring(side), GREY_28, 40_000_000)


@pytest.mark.parametrize("data", [b"hello, not an image", cv2.imencode(".tiff", np.zeros((8, 8), np.uint8))[1].tobytes()],
                         ids=["text", "tiff"])
def test_what_is_not_one_of_the_demos_formats_is_refused_unread(no_decoding, data):
    with pytest.raises(preprocess.NotAnImage, match=r"^the body is not an image the demo reads "
                                                    r"\(PNG, JPEG, GIF, BMP or WebP\)$"):
        preprocess.prepare(data, GREY_28, 40_000_000)


def test_a_readable_header_on_broken_pixels_is_unprocessable_not_unsupported():
    png = cv2.imencode(".png", np.full((28, 28), 200, np.uint8))[1].tobytes()
    broken = png[: png.index(b"IDAT") + 8]
    with pytest.raises(preprocess.BadImage) as refused:
        preprocess.prepare(broken, GREY_28, 40_000_000)
    assert not isinstance(refused.value, preprocess.NotAnImage)
    assert str(refused.value).startswith("the PNG image could not be decoded")


def test_a_16_bit_rgba_png_within_the_limit_is_decoded():
    prepared = preprocess.prepare(png_16bit_rgba(64), GREY_28, 40_000_000)
    assert prepared.blob.shape == (1, 1, 28, 28)
    assert prepared.seen.dtype == np.uint8 and prepared.seen.shape == (28, 28)


def test_the_decoded_byte_limit_can_be_set_per_call(no_decoding):
    grey = cv2.imencode(".png", np.zeros((100, 100), np.uint8))[1].tobytes()
    with pytest.raises(preprocess.ImageTooLarge, match=r"decodes to 10,000 bytes, over the limit of 9,999 bytes$"):
        preprocess.prepare(grey, GREY_28, 40_000_000, max_decoded_bytes=9_999)
