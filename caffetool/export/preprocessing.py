"""How images become the net's input, carried by the exported model: as metadata, or in the graph.

The steps are pycaffe's ``caffe.io.Transformer`` (``python/caffe/io.py``) with ``set_transpose((2, 0,
1))``, applied to an image as ``caffe.io.load_image`` gives it (H x W x C floats in [0, 1], RGB, or
one grey channel) once resized to ``image_dims`` and centre-cropped to the input size: transpose to
C x H x W, reorder the channels (``channel_swap``), multiply by ``raw_scale``, subtract the mean,
multiply by ``input_scale``. A grey net trained by caffetool is the same with ``raw_scale`` 255 and
no swap: its pixels minus the mean, times Caffe's ``transform_param.scale``.

A detection net (SSD) is fed as the demo feeds it (:class:`caffetool.inference.preprocess.Stretch`,
OpenCV's ``blobFromImage``): the whole image, of any size, resized to the input's H x W with OpenCV's
bilinear ``cv2.resize`` on its 8-bit pixels, neither cropped nor kept to its aspect ratio (its boxes
come back normalised to the image); then its 0-255 values in the net's channel order (BGR by
default), minus the mean, times the scale. Its steps say ``"resize": "stretch"``, with ``raw_scale``
1 (the pixels are 0-255 already) and ``channel_order`` naming the order; a model with these steps is
served as a detector (:mod:`caffetool.serving.onnxmodel`).

Metadata keys (ONNX ``metadata_props``, strings; JSON where structured), documented in docs/explanation/export-verification.md:
``caffetool.preprocessing`` (the steps, below), ``caffetool.mean_image`` (a (C, H, W) mean, as the
base64 of a ``.npy``, when the mean is an image), ``caffetool.labels`` (JSON list of class names),
``caffetool.preprocessing_in_graph`` (``true`` when :func:`prepend` made the graph take images).
"""

from __future__ import annotations

import base64
import io
import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from caffetool.data import imageheader
from caffetool.errors import ExportError
from caffetool.layers.onnxgraph import OnnxGraph, tensor

IMAGE_INPUT = "image"
# Bounds on what metadata may say: Caffe's own nets use scales of 1/255 to 255; an image is resized to
# image_dims, so they are held to the demo's limit on an image's pixels (caffetool.data.imageheader).
MAX_SCALE, MAX_PIXELS = 1e6, imageheader.MAX_PIXELS
STRETCH = "stretch"  # the "resize" of a detection net's steps
PREPROCESSING, MEAN_IMAGE, LABELS, IN_GRAPH = ("caffetool.preprocessing", "caffetool.mean_image", "caffetool.labels",
                                               "caffetool.preprocessing_in_graph")


@dataclass(frozen=True)
class Preprocessing:
    channels: int
    height: int
    width: int
    input_scale: float = 1.0
    mean: np.ndarray | None = None  # (C,) values or a (C, H, W) image, in the net's channel order
    raw_scale: float = 255.0
    channel_swap: tuple[int, ...] | None = None
    image_dims: tuple[int, int] | None = None  # resize to before the centre crop
    white_on_black: bool = False  # the training images were light on dark (the demo inverts drawings)
    stretch: bool = False  # a detection net's: the whole image resized to (height, width), pixels 0-255

    @classmethod
    def of(cls, transform: Any) -> Preprocessing:
        """From the demo's transform (:class:`caffetool.inference.preprocess.Transform`) of a model."""
        if transform.stretch is not None:
            swap = transform.stretch.channel_swap
            return cls(transform.channels, transform.height, transform.width, float(transform.scale), transform.mean,
                       1.0, tuple(swap) if swap else None, None, bool(transform.white_on_black), stretch=True)
        colour = transform.colour
        return cls(transform.channels, transform.height, transform.width, float(transform.scale),
                   transform.mean, float(colour.raw_scale) if colour and colour.raw_scale else 255.0,
                   tuple(colour.channel_swap) if colour and colour.channel_swap else None,
                   tuple(colour.image_dims) if colour and colour.image_dims else None, bool(transform.white_on_black))

    @classmethod
    def from_metadata(cls, props: dict[str, str], chw: tuple[int, int, int], where: str) -> Preprocessing:
        """What :meth:`metadata` wrote, read back, for a model whose input is ``chw`` (``where``: its file)."""
        try:
            steps = json.loads(props[PREPROCESSING])
            mean = steps["mean"]
            if mean == "image":
                mean = np.load(io.BytesIO(base64.b64decode(props[MEAN_IMAGE])), allow_pickle=False)
            elif mean is not None:
                mean = np.asarray(mean, np.float32)
            resize = steps.get("resize")
            if resize not in (None, STRETCH):
                raise ValueError(f"resize {resize!r}, where caffetool writes {STRETCH!r} or nothing")
            p = cls(*chw, float(steps["input_scale"]), mean, float(steps["raw_scale"]),
                    tuple(steps["channel_swap"]) if steps["channel_swap"] else None,
                    tuple(steps["image_dims"]) if steps["image_dims"] else None,
                    steps.get("white_on_black", False), resize == STRETCH)
        except KeyError as e:
            raise ExportError(f"{where} has no {e.args[0]!r} in its metadata: export it with `caffetool export`") from None
        except (ValueError, TypeError, AttributeError) as e:
            raise ExportError(f"{where}: its {PREPROCESSING!r} metadata cannot be read ({e}); export it again") from None
        if (why := p.implausible()) is not None:
            raise ExportError(f"{where}: its {PREPROCESSING!r} metadata says {why}; caffetool never writes that: "
                              "export the model again") from None
        return p

    def implausible(self) -> str | None:
        """What in these steps no export of a Caffe net holds (metadata is a file anyone can edit, and
        a wrong step answers one class for every image), or None."""
        c = self.channels
        checks = (
            (math.isfinite(self.input_scale) and 0 < abs(self.input_scale) <= MAX_SCALE,
             f"input_scale {self.input_scale:g} (a finite number, not 0, at most {MAX_SCALE:g} in size)"),
            (math.isfinite(self.raw_scale) and 0 < self.raw_scale <= MAX_SCALE,
             f"raw_scale {self.raw_scale:g} (a finite number above 0, at most {MAX_SCALE:g})"),
            (self.mean is None or (self.mean.shape in ((1,), (c,), (c, self.height, self.width))
                                   and bool(np.isfinite(self.mean).all())),
             f"a mean of shape {getattr(self.mean, 'shape', None)} (finite values: 1, {c}, or {c}x{self.height}x"
             f"{self.width})"),
            (self.channel_swap is None or sorted(self.channel_swap) == list(range(c)),
             f"channel_swap {self.channel_swap} (an order of the {c} channels)"),
            (self.image_dims is None or (len(self.image_dims) == 2 and all(isinstance(d, int) and d > 0
                                                                         for d in self.image_dims)
                                         and self.image_dims[0] * self.image_dims[1] <= MAX_PIXELS),
             f"image_dims {self.image_dims} (two sides above 0, at most {MAX_PIXELS:,} pixels: each upload is "
             "resized to them)"),
            (isinstance(self.white_on_black, bool), f"white_on_black {self.white_on_black!r} (true or false)"),
            (not self.stretch or (self.raw_scale == 1 and self.image_dims is None),
             f"resize {STRETCH!r} with raw_scale {self.raw_scale:g} and image_dims {self.image_dims} (a stretched "
             "image is its 0-255 pixels at the input's size: raw_scale 1, no image_dims)"),
        )
        return next((why for ok, why in checks if not ok), None)

    @property
    def pixel_max(self) -> float:
        """The largest value of the images the steps take: 255 for a stretched image's pixels, else 1."""
        return 255.0 if self.stretch else 1.0

    def steps(self) -> dict:
        mean = None if self.mean is None else "image" if self.mean.ndim == 3 else [float(v) for v in self.mean]
        if self.stretch:
            return {"input": "the image as decoded, of any size: its 8-bit pixel values 0-255, RGB, or one grey "
                             "channel",
                    "resize": STRETCH, "size": [self.height, self.width],
                    "interpolation": "bilinear: OpenCV's cv2.resize (INTER_LINEAR) of the 8-bit pixels, the whole "
                                     "image, neither cropped nor kept to its aspect ratio",
                    "layout": "NCHW", "white_on_black": self.white_on_black, "image_dims": None, "crop": None,
                    "channel_swap": list(self.channel_swap) if self.channel_swap else None,
                    "channel_order": self.channel_order(), "raw_scale": self.raw_scale, "mean": mean,
                    "input_scale": self.input_scale}
        return {"input": "NHWC float32 in [0, 1]: RGB, or one grey channel", "layout": "NCHW",
                "white_on_black": self.white_on_black,
                "image_dims": list(self.image_dims) if self.image_dims else None,
                "crop": [self.height, self.width], "channel_swap": list(self.channel_swap) if self.channel_swap
                else None, "raw_scale": self.raw_scale, "mean": mean, "input_scale": self.input_scale}

    def channel_order(self) -> str:
        """The net's channels by name after the swap ("BGR" for (2, 1, 0)); "grey" for one channel."""
        if self.channels != 3:
            return "grey" if self.channels == 1 else f"{self.channels} channels"
        return "".join("RGB"[i] for i in (self.channel_swap or (0, 1, 2)))

    def metadata(self) -> dict[str, str]:
        props = {PREPROCESSING: json.dumps(self.steps())}
        if self.mean is not None and self.mean.ndim == 3:
            buffer = io.BytesIO()
            np.save(buffer, self.mean.astype(np.float32), allow_pickle=False)
            props[MEAN_IMAGE] = base64.b64encode(buffer.getvalue()).decode()
        return props

    def transformer(self, caffe: Any, input_name: str) -> Any:
        """pycaffe's own ``caffe.io.Transformer`` set up with these steps: the reference."""
        t = caffe.io.Transformer({input_name: (1, self.channels, self.height, self.width)})
        t.set_transpose(input_name, (2, 0, 1))
        if self.channel_swap:
            t.set_channel_swap(input_name, self.channel_swap)
        t.set_raw_scale(input_name, self.raw_scale)
        if self.mean is not None:
            t.set_mean(input_name, self.mean if self.mean.ndim == 3 else np.asarray(self.mean, np.float64))
        if self.input_scale != 1:
            t.set_input_scale(input_name, self.input_scale)
        return t


def prepend(model: onnx.ModelProto, input_name: str, p: Preprocessing, batch: int | str) -> onnx.ModelProto:
    """A copy of ``model`` that takes images (:data:`IMAGE_INPUT`, N x H x W x C in [0, 1]; a detection
    net's stretched image in its 0-255 pixel values) and makes ``input_name`` from them with the
    Transformer's steps."""
    g = OnnxGraph(model.opset_import[0].version)
    for value in [*model.graph.input, *model.graph.initializer, *model.graph.node]:
        g.claim(value.name)
    x = g.op1("Transpose", [g.claim(IMAGE_INPUT)], "preprocess", perm=[0, 3, 1, 2])
    if p.channel_swap:
        x = g.op1("Gather", [x, g.ints("preprocess/channel_swap", p.channel_swap)], "preprocess", axis=1)
    if p.raw_scale != 1:
        x = g.op1("Mul", [x, g.const("preprocess/raw_scale", p.raw_scale)], "preprocess")
    if p.mean is not None:
        mean = p.mean if p.mean.ndim == 3 else np.asarray(p.mean).reshape(-1, 1, 1)
        x = g.op1("Sub", [x, g.const("preprocess/mean", mean)], "preprocess")
    g.op1("Mul", [x, g.const("preprocess/input_scale", p.input_scale)], "preprocess", input_name)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    kept = [i for i in copy.graph.input if i.name != input_name]
    del copy.graph.input[:]
    copy.graph.input.extend([tensor(IMAGE_INPUT, [batch, p.height, p.width, p.channels]), *kept])
    nodes = [*g.nodes, *copy.graph.node]
    del copy.graph.node[:]
    copy.graph.node.extend(nodes)
    copy.graph.initializer.extend(g.initializers)
    return copy
