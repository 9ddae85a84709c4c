"""pycaffe's image arithmetic for colour models, operation for operation, on images OpenCV decoded.

BVLC Caffe's ``python/caffe/classifier.py`` (``Classifier.predict``) and ``python/caffe/io.py``
(``load_image``, ``resize_image``, ``oversample``, ``Transformer.preprocess``) define how ImageNet-style
models are fed from Python, and ``python/classify.py`` and the web demo use them: the image as RGB
floats in [0, 1], resized to ``image_dims`` with scikit-image (bilinear, anti-aliased when shrinking,
on the image stretched to [0, 1] by its own minimum and maximum), the centre crop or ten crops (four
corners and the centre, and their mirror images), then per crop: transpose to C×H×W, reorder the
channels, multiply by ``raw_scale``, subtract the mean, multiply by ``input_scale``.

Here the same functions are called with the same dtypes in the same order, so the blob equals
``caffe.io.Transformer``'s bit for bit. The one input step pycaffe does differently is decoding:
``load_image`` reads with scikit-image, we with ``cv2.imdecode``; for PNG and for the JPEG decoders
measured (libjpeg-turbo in both OpenCV's and Pillow's wheels) the pixels are the same. Where we
differ on purpose: a transparent image is composited onto white (``load_image`` drops the alpha
channel, keeping whatever colour lies under transparent pixels; opaque images are unaffected), and
an image over :data:`EXACT_PIXELS` is first shrunk by a whole factor with OpenCV's area averaging,
because scikit-image's anti-aliasing filter over tens of megapixels takes seconds and gigabytes.
"""

from __future__ import annotations

import math

import cv2
import numpy as np

EXACT_PIXELS = 4_000_000  # about 0.5 s for resize_image on 2 cores; a 12-megapixel photo takes 2.6 s


def rgb_float(image: np.ndarray) -> np.ndarray:
    """OpenCV's decoded image (BGR/BGRA/grey, 8 or 16 bits) as ``load_image`` returns a file's: H×W×3
    RGB float32 in [0, 1] (``img_as_float``, then ``astype(float32)``), grey repeated in each channel."""
    from skimage import img_as_float  # noqa: PLC0415 - scikit-image (and SciPy) cost 0.4 s to import

    if image.ndim == 3 and image.shape[2] == 1:
        image = image[:, :, 0]
    if image.ndim == 2:
        return np.tile(img_as_float(image).astype(np.float32)[:, :, None], (1, 1, 3))
    rgb = img_as_float(image[:, :, 2::-1]).astype(np.float32)
    if image.shape[2] == 4:  # composite onto white paper, as a viewer shows it
        alpha = img_as_float(image[:, :, 3:4]).astype(np.float32)
        rgb = rgb * alpha + (np.float32(1) - alpha)
    return rgb


def shrink_large(image: np.ndarray, limit: int | None = None) -> np.ndarray:
    """``image`` (as decoded) shrunk by the smallest whole factor that brings it within ``limit`` pixels
    (default :data:`EXACT_PIXELS`)."""
    limit = limit or EXACT_PIXELS
    height, width = image.shape[:2]
    factor = math.ceil(math.sqrt(height * width / limit))
    if factor <= 1:
        return image
    size = (max(1, round(width / factor)), max(1, round(height / factor)))
    return cv2.resize(image, size, interpolation=cv2.INTER_AREA)


def resize_image(im: np.ndarray, new_dims: tuple[int, int], interp_order: int = 1) -> np.ndarray:
    """``caffe.io.resize_image`` for 1- and 3-channel images: stretch to [0, 1], scikit-image's
    ``resize`` (``mode='constant'``), stretch back, float32; a constant image stays constant."""
    im_min, im_max = im.min(), im.max()
    if im_max > im_min:
        im_std = (im - im_min) / (im_max - im_min)
        from skimage.transform import resize  # noqa: PLC0415 - only for colour models (caffe.io's resize)

        resized_std = resize(im_std, new_dims, order=interp_order, mode="constant")
        resized_im = resized_std * (im_max - im_min) + im_min
    else:
        ret = np.empty((new_dims[0], new_dims[1], im.shape[-1]), dtype=np.float32)
        ret.fill(im_min)
        return ret
    return resized_im.astype(np.float32)


def centre_crop(image: np.ndarray, crop_dims: tuple[int, int]) -> np.ndarray:
    """The centre ``crop_dims`` of an H×W×K image, at ``Classifier.predict``'s offsets
    (``centre ± crop / 2``, truncated)."""
    centre = np.array(image.shape[:2]) / 2.0
    half = np.array(crop_dims) / 2.0
    box = np.concatenate([centre - half, centre + half]).astype(int)
    return image[box[0]:box[2], box[1]:box[3], :]


def oversample(image: np.ndarray, crop_dims: tuple[int, int]) -> np.ndarray:
    """``caffe.io.oversample`` of one image: 10×h×w×K crops — the four corners, the centre, then the
    same five mirrored left to right."""
    shape, dims = np.array(image.shape), np.array(crop_dims)
    boxes = np.empty((5, 4), dtype=int)
    corners = [(i, j) for i in (0, shape[0] - dims[0]) for j in (0, shape[1] - dims[1])]
    for k, (i, j) in enumerate(corners):
        boxes[k] = (i, j, i + dims[0], j + dims[1])
    boxes[4] = np.tile(shape[:2] / 2.0, (1, 2)) + np.concatenate([-dims / 2.0, dims / 2.0])
    crops = np.empty((10, dims[0], dims[1], shape[-1]), dtype=np.float32)
    for k, box in enumerate(boxes):
        crops[k] = image[box[0]:box[2], box[1]:box[3], :]
    crops[5:] = crops[:5, :, ::-1, :]
    return crops


def preprocess(crop: np.ndarray, channel_swap: tuple[int, ...] | None, raw_scale: float | None,
               mean: np.ndarray | None, input_scale: float | None) -> np.ndarray:
    """``Transformer.preprocess`` of one crop already at the input size, with ``set_transpose((2, 0, 1))``:
    C×H×W float32 = ((crop transposed)[channel_swap] × raw_scale − mean) × input_scale."""
    caffe_in = crop.astype(np.float32).transpose((2, 0, 1))  # a copy: the crop is left as it was
    if channel_swap is not None:
        caffe_in = caffe_in[list(channel_swap), :, :]
    if raw_scale is not None:
        caffe_in *= raw_scale
    if mean is not None:
        caffe_in -= mean[:, np.newaxis, np.newaxis] if mean.ndim == 1 else mean
    if input_scale is not None:
        caffe_in *= input_scale
    return caffe_in
