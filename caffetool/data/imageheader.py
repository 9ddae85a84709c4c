"""What decoding an image would cost, read from its header by Pillow before any pixel is decoded.

A few hundred bytes of JPEG can declare 30,000 x 30,000 pixels, and 300 KB of PNG 6,300 x 6,300
pixels of 16-bit RGBA (317 MB once decoded): the header says so, and reading it first lets the demo
refuse such an upload, and ``data.images`` such a file, without allocating its pixels
(:func:`over_limits`, with the limits both use: :data:`MAX_PIXELS`, :data:`MAX_DECODED_BYTES`). Pillow opens files lazily — size, mode and raw
mode come from the header; pixels only on ``load()``, which is never called here.

Only PNG, JPEG, GIF, BMP and WebP are read. Each begins with a signature that no other format
OpenCV decodes shares, so the header Pillow reads is the one OpenCV will decode; anything else is
refused rather than decoded unchecked. The cost is the array ``cv2.imdecode(..., IMREAD_UNCHANGED)``
returns: width x height x channels x bytes a sample. It errs on the large side where OpenCV's
result depends on the pixels (a palette counts as 4 channels, as transparency makes it BGRA).

The plugin classes are opened directly rather than through ``Image.open``: that adds Pillow's own
decompression-bomb check, which warns on stderr from 89 million pixels on (one line per size a
client cares to send) and, past twice that, raises without saying the size. The demo's limits are
lower and its messages name the size. Pillow 13's WebP plugin still applies that check itself,
before it builds its decoder; that ``DecompressionBombError`` is left to the caller.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from PIL import BmpImagePlugin, GifImagePlugin, ImageFile, JpegImagePlugin, PngImagePlugin, WebPImagePlugin
from PIL.Image import DecompressionBombError

MAX_PIXELS = 40_000_000
MAX_DECODED_BYTES = 120_000_000  # a 40-megapixel 8-bit colour image; 15 megapixels of 16-bit RGBA

FORMATS: dict[str, type[ImageFile.ImageFile]] = {
    "PNG": PngImagePlugin.PngImageFile,
    "JPEG": JpegImagePlugin.JpegImageFile,
    "GIF": GifImagePlugin.GifImageFile,
    "BMP": BmpImagePlugin.BmpImageFile,
    "WebP": WebPImagePlugin.WebPImageFile,
}


@dataclass(frozen=True)
class Header:
    format: str  # a key of FORMATS
    width: int
    height: int
    channels: int  # as OpenCV decodes it: 1, 3 or 4
    sample_bits: int  # 8 or 16

    @property
    def pixels(self) -> int:
        return self.width * self.height

    @property
    def decoded_bytes(self) -> int:
        return self.pixels * self.channels * self.sample_bits // 8


def read(data: bytes) -> Header | None:
    """The header of ``data`` if it is one of FORMATS, else None.

    Raises Pillow's DecompressionBombError for a WebP canvas past Pillow's own limit.
    """
    for name, plugin in FORMATS.items():
        image = _open(plugin, data)
        if image is not None:
            with image:
                return Header(name, image.width, image.height, _channels(image), _sample_bits(image))
    return None


def over_limits(header: Header, max_pixels: int = MAX_PIXELS, max_decoded_bytes: int = MAX_DECODED_BYTES) -> str | None:
    """Why decoding the image ``header`` describes would cost too much, or None."""
    size = f"{header.width}x{header.height} pixels"
    if header.pixels > max_pixels:
        return f"image of {size} is over the limit of {max_pixels:,} pixels"
    if header.decoded_bytes > max_decoded_bytes:
        channels = f"{header.channels} channel{'s' if header.channels > 1 else ''} of {header.sample_bits} bits"
        return (f"image of {size}, {channels}, decodes to {header.decoded_bytes:,} bytes, over the limit of "
                f"{max_decoded_bytes:,} bytes")
    return None


def _open(plugin: type[ImageFile.ImageFile], data: bytes) -> ImageFile.ImageFile | None:
    """``plugin`` opened on ``data`` (header only), or None when the header is not that format's.

    Each plugin checks its signature first. On a hostile header Pillow raises SyntaxError, but also
    OSError, ValueError, struct.error and others; any of them means the header cannot be used.
    """
    try:
        return plugin(io.BytesIO(data))
    except DecompressionBombError:
        raise
    except Exception:  # noqa: BLE001 - see the docstring
        return None


def _channels(image: ImageFile.ImageFile) -> int:
    """Channels of OpenCV's result: palettes and alpha give BGRA, one grey band 1, colour 3."""
    bands = image.getbands()
    if image.mode in ("P", "PA") or "A" in bands:
        return 4
    return 1 if len(bands) == 1 else min(len(bands), 4)


def _sample_bits(image: ImageFile.ImageFile) -> int:
    """16 for 16-bit PNGs and JPEGs of more than 8 bits (OpenCV keeps their depth), else 8.

    Pillow names a 16-bit RGBA PNG "RGBA", the mode it converts to; its raw mode, "RGBA;16B" in
    the tile that ``load()`` would decode, keeps the depth of the file.
    """
    rawmodes = [tile[3] for tile in image.tile if isinstance(tile[3], str)]  # (codec, extents, offset, args)
    if image.mode.startswith("I;16") or any(";16" in rawmode for rawmode in rawmodes):
        return 16
    return 16 if getattr(image, "bits", 8) > 8 else 8
