"""Turning uploaded bytes into the array the network takes.

Grey nets (LeNet on MNIST, Fashion-MNIST) follow the run's training transform with OpenCV: decode in
grey (alpha composited onto white, as a drawing's transparent background would be seen on paper),
resize to the input's height and width, then Caffe's ``DataTransformer`` arithmetic — subtract the
mean, multiply by the scale. For data sets of light strokes on a dark ground, a picture whose border
is light — a photo of a digit on paper — is inverted first, and the result says so.

Colour nets (CaffeNet, GoogLeNet, ResNet, one's own) are fed as pycaffe's ``caffe.Classifier`` feeds
them (:mod:`.caffeio`): resize to ``image_dims``, the centre crop or ten oversampled crops, channel
swap, raw scale, mean, input scale — one blob row per crop, whose predictions are averaged.

Detection nets (SSD) are fed as OpenCV's ``dnn`` samples feed them (``blobFromImage``): the whole
image resized to the input with OpenCV's bilinear ``resize``, neither cropped nor kept to its aspect
ratio (the boxes come back normalised to the image, so the stretch undoes itself), its 0-255 pixel
values in the net's channel order, minus the mean, times the scale (:class:`Stretch`).

Nothing is decoded before its header has been read (:mod:`caffetool.data.imageheader`) and found within two
limits: pixels, which bound the work of every step, and the bytes the decoded array takes, which
bound memory — a 16-bit RGBA pixel is 8 bytes, a grey one 1. Errors name what is wrong; which HTTP
status each one is answered with is the server's business.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import cv2
import numpy as np

from caffetool.data import imageheader
from caffetool.errors import ImageError
from caffetool.inference import caffeio

MAX_PIXELS, MAX_DECODED_BYTES = imageheader.MAX_PIXELS, imageheader.MAX_DECODED_BYTES


class BadImage(ImageError):
    """Data the demo cannot turn into the network's input: empty, broken, or refused."""


class NotAnImage(BadImage):
    """Data that is none of the image formats the demo reads."""


class ImageTooLarge(BadImage):
    """An image whose header declares more pixels, or more decoded bytes, than the limits allow."""


class TooManyPixels(BadImage):
    """A request whose images together hold more pixels than one request may (see :func:`check_request`)."""


@dataclass(frozen=True)
class Colour:
    """How a colour net is fed, in the terms of pycaffe's ``Classifier`` (and ``classify.py``'s flags).

    The defaults give what Caffe's data layers give a net trained on ``convert_imageset`` databases:
    BGR pixel values from 0 to 255.
    """

    image_dims: tuple[int, int] | None = None  # resize to (H, W) before cropping; None: the input size
    channel_swap: tuple[int, ...] | None = (2, 1, 0)  # RGB -> BGR
    raw_scale: float | None = 255.0  # [0, 1] -> [0, 255], before the mean
    oversample: bool = False  # ten crops (corners, centre, mirrored) averaged, instead of the centre


@dataclass(frozen=True)
class Stretch:
    """How a detection net is fed: the whole image stretched to the input (see the module's docstring).

    ``channel_swap`` is the channel order after RGB decoding, as for :class:`Colour`: the default
    gives BGR, the order of OpenCV's images and of the SSD fork's training data.
    """

    channel_swap: tuple[int, ...] | None = (2, 1, 0)


@dataclass(frozen=True)
class Transform:
    channels: int
    height: int
    width: int
    scale: float = 1.0  # after the mean: Caffe's transform_param.scale, pycaffe's input_scale
    mean: np.ndarray | None = None  # (C,) per-channel values or (C, H, W) image
    white_on_black: bool = False
    colour: Colour | None = None  # pycaffe's Classifier steps; None: the grey path's OpenCV steps
    stretch: Stretch | None = None  # a detection net's steps (then ``colour`` is None)


@dataclass
class Prepared:
    blob: np.ndarray  # (N, C, H, W) float32, what the net takes: one row, or ten oversampled crops
    seen: np.ndarray  # (H, W) or (H, W, 3) BGR uint8: the (centre) input as the net sees it, before mean/scale
    inverted: bool
    decode_ms: float
    preprocess_ms: float
    size: tuple[int, int] = (0, 0)  # (height, width) of the image as decoded: what boxes are scaled to


def prepare(data: bytes, t: Transform, max_pixels: int = MAX_PIXELS,
            max_decoded_bytes: int = MAX_DECODED_BYTES) -> Prepared:
    start = time.perf_counter()
    image = decode(data, max_pixels, max_decoded_bytes)
    decoded = time.perf_counter()
    size = (int(image.shape[0]), int(image.shape[1]))
    if t.colour is not None or t.stretch is not None:
        blob, seen = _colour(image, t, t.colour) if t.colour is not None else _stretched(image, t, t.stretch)
        return Prepared(blob, seen, False, (decoded - start) * 1e3, (time.perf_counter() - decoded) * 1e3, size)
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
    return Prepared(chw[None], image, inverted, (decoded - start) * 1e3, (done - decoded) * 1e3, size)


def _stretched(image: np.ndarray, t: Transform, stretch: Stretch) -> tuple[np.ndarray, np.ndarray]:
    """A detection net's input, as ``cv2.dnn.blobFromImage`` makes it from the image resized to the
    input: (blob, the resized image as seen). The same float32 operations in the same order as
    OpenCV's samples, so the blob equals theirs bit for bit."""
    pixels = _to_channels(_to_uint8(image), t.channels)
    resized = cv2.resize(pixels, (t.width, t.height), interpolation=cv2.INTER_LINEAR)
    chw = resized.reshape(t.height, t.width, t.channels).transpose(2, 0, 1).astype(np.float32)
    if t.channels == 3 and stretch.channel_swap is not None:
        chw = np.ascontiguousarray(chw[::-1][list(stretch.channel_swap)])  # OpenCV's BGR -> RGB -> the net's order
    if t.mean is not None:
        chw -= t.mean.reshape(-1, 1, 1) if t.mean.ndim == 1 else t.mean
    if t.scale != 1:
        chw *= np.float32(t.scale)
    return chw[None], resized


def _colour(image: np.ndarray, t: Transform, colour: Colour) -> tuple[np.ndarray, np.ndarray]:
    """pycaffe's ``Classifier.predict`` preprocessing of one image: (blob, centre crop as seen)."""
    resized = caffeio.resize_image(caffeio.rgb_float(caffeio.shrink_large(image)),
                                   colour.image_dims or (t.height, t.width))
    crop = (t.height, t.width)
    centre = caffeio.centre_crop(resized, crop)
    crops = caffeio.oversample(resized, crop) if colour.oversample else centre[None]
    blob = np.stack([caffeio.preprocess(c, colour.channel_swap, colour.raw_scale, t.mean, t.scale) for c in crops])
    seen = np.clip(np.rint(centre * 255), 0, 255).astype(np.uint8)[:, :, ::-1]
    return blob, np.ascontiguousarray(seen)


def decode(data: bytes, max_pixels: int = MAX_PIXELS, max_decoded_bytes: int = MAX_DECODED_BYTES) -> np.ndarray:
    """The image as OpenCV decodes it (``IMREAD_UNCHANGED``), once its header is within the limits."""
    header = check_header(data, max_pixels, max_decoded_bytes)
    try:
        image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    except cv2.error as e:
        raise BadImage(f"the {header.format} image could not be decoded "
                       f"({str(e).strip().splitlines()[-1]})") from None
    if image is None:
        raise BadImage(f"the {header.format} image could not be decoded (damaged or truncated)")
    return image


def check_request(images: list[bytes], budget: int = MAX_PIXELS) -> None:
    """Refuse a request whose images hold more than ``budget`` pixels together, from their headers
    alone, before any is decoded. The work of a request grows with its pixels, not its count: 64
    images each under the per-image limit would hold the server's cores for tens of seconds while
    every other client waits, so one request gets the budget of one image at most."""
    total = 0
    for data in images:
        try:
            header = imageheader.read(data)
        except imageheader.DecompressionBombError:
            continue  # refused on its own by check_header
        if header is not None and header.pixels <= budget:  # one past the limit is refused on its own
            total += header.pixels
    if total > budget:
        raise TooManyPixels(f"the request's {len(images)} images hold {total:,} pixels in all, over the limit of "
                              f"{budget:,} for one request: send fewer or smaller images in each request")


def check_header(data: bytes, max_pixels: int, max_decoded_bytes: int) -> imageheader.Header:
    """The header of ``data``, read without decoding, when it is an image within both limits."""
    if not data:
        raise BadImage("empty body: send an image (PNG, JPEG, GIF, BMP or WebP)")
    try:
        header = imageheader.read(data)
    except imageheader.DecompressionBombError as e:
        raise ImageTooLarge(f"image over the limit of {max_pixels:,} pixels ({e})") from None
    if header is None:
        raise NotAnImage("the body is not an image the demo reads (PNG, JPEG, GIF, BMP or WebP)")
    if (why := imageheader.over_limits(header, max_pixels, max_decoded_bytes)) is not None:
        raise ImageTooLarge(why)
    return header


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
