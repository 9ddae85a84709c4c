"""A model's files and how images are fed to it: what the demo serves and the export writes.

From a run directory everything is known: ``deploy.prototxt``, the newest ``.caffemodel``,
``labels.txt``, the TEST-phase transform (scale, mean, crop) of ``train_val.prototxt`` or, for a
``--solver`` run, of its first test net, and the size of the training images (a crop net's images
are resized to it before the crop). Files can also be given one by one, with the colour options of
pycaffe's ``Classifier`` (:class:`.preprocess.Colour`).

A net whose output comes from a ``DetectionOutput`` layer (the SSD fork's, W. Liu et al., "SSD:
Single Shot MultiBox Detector") is a detection net: it is fed the whole image stretched to its input
(:class:`.preprocess.Stretch`), with the mean, scale and channel order given; pycaffe's crop options
mean nothing to it and are refused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from caffetool.data import layout
from caffetool.errors import ConfigError, NetError, RunError
from caffetool.inference import preprocess
from caffetool.nets import transform
from caffetool.runs import runrecord, snapshots
from caffetool.runs.folder import RunFolder

DETECTION_OUTPUT = "DetectionOutput"  # the SSD fork's layer type that writes a detection net's answer


@dataclass
class ModelFiles:
    deploy: Path
    weights: Path
    labels: Path | None  # None: a --deploy model whose classes go unnamed (an export)
    mean: Path | None = None
    scale: float | None = None
    run: Path | None = None
    white_on_black: bool | None = None
    # colour nets, as pycaffe's Classifier takes them (None: the default of preprocess.Colour, or the run's)
    mean_values: tuple[float, ...] | None = None
    channel_swap: tuple[int, ...] | None = None
    raw_scale: float | None = None
    image_dims: tuple[int, int] | None = None
    oversample: bool = False
    train_size: tuple[int, int] | None = None  # (H, W) of the run's training images


def from_run(run_dir: Path) -> ModelFiles:
    weights = snapshots.newest_weights(run_dir)
    if weights is None:
        raise RunError(f"run {run_dir} has no .caffemodel yet; train it first (or give --weights)")
    dataset = _dataset_manifest(run_dir)
    shape = (dataset.get("splits") or {}).get("train", {}).get("shape")
    size = (int(shape[1]), int(shape[2])) if isinstance(shape, list) and len(shape) == 3 else None
    folder = RunFolder(run_dir)
    return ModelFiles(folder.deploy, weights, folder.labels, run=run_dir,
                      white_on_black=dataset.get("white_on_black"), train_size=size)


def _dataset_manifest(run_dir: Path) -> dict:
    """The manifest of the data set the run trained on; empty when the run has none (``--solver`` runs)."""
    try:
        path = runrecord.read(run_dir).dataset.get("path")
        found = json.loads((Path(path) / layout.MANIFEST).read_text()) if path else {}
    except (RunError, OSError, ValueError, TypeError):
        return {}
    return found if isinstance(found, dict) else {}


def transform_of(caffe: Any, files: ModelFiles, deploy: Any) -> preprocess.Transform:
    """How images are fed to the model of ``files`` (``deploy``: its NetParameter), as the demo feeds them."""
    return _transform(caffe, files, *input_shape(deploy, files.deploy), detection=is_detection(deploy))


def input_blob(net: Any) -> str:
    """The deploy net's image input: its Input layer's top, or the legacy ``input`` field."""
    tops = [layer.top[0] for layer in net.layer if layer.type == "Input" and layer.top]
    return tops[0] if tops else (net.input[0] if net.input else "data")


def output_blob(net: Any) -> str:
    """The deploy net's output: the first top of its last layer (Caffe's nets end with their answer)."""
    return net.layer[-1].top[0] if len(net.layer) and net.layer[-1].top else "prob"


def output_layer_type(net: Any) -> str | None:
    """The type of the layer that writes the net's output blob, None for a net without layers."""
    output = output_blob(net)
    return next((layer.type for layer in reversed(net.layer) if output in layer.top), None)


def is_detection(net: Any) -> bool:
    """Whether the deploy net ``net`` (a NetParameter) answers detections: its output comes from a
    ``DetectionOutput`` layer, rows ``[image, label, confidence, xmin, ymin, xmax, ymax]``."""
    return output_layer_type(net) == DETECTION_OUTPUT


def input_shape(net: Any, path: Path) -> tuple[int, int, int]:
    for layer in net.layer:
        if layer.type == "Input" and layer.input_param.shape:
            dims = list(layer.input_param.shape[0].dim)
            if len(dims) == 4:
                return dims[1], dims[2], dims[3]
    if len(net.input_shape) and len(net.input_shape[0].dim) == 4:
        return tuple(net.input_shape[0].dim[1:])
    if len(net.input) == 1 and len(net.input_dim) == 4:  # the oldest form: input_dim four times
        return tuple(net.input_dim[1:])
    raise NetError(f"{path} has no 4-D Input layer (N, C, H, W) to take images")


def _transform(caffe: Any, files: ModelFiles, channels: int, height: int, width: int,
               detection: bool = False) -> preprocess.Transform:
    """The run's TEST transform (or the files' own options), and for a colour net pycaffe's steps (for
    a detection net, the stretch of the whole image)."""
    pb2 = caffe.proto.caffe_pb2
    scale, mean, crop = 1.0, None, 0
    tp = transform.test_transform(files.run, pb2) if files.run else None
    if tp is not None:
        scale = tp.scale if tp.HasField("scale") else 1.0
        crop = tp.crop_size
        if tp.mean_value:
            mean = np.array(list(tp.mean_value), np.float32)
        elif tp.mean_file:
            files.mean = files.mean or Path(tp.mean_file)
    if files.scale is not None:
        scale = files.scale
    if files.mean_values is not None:
        mean = np.array(files.mean_values, np.float32)
    elif files.mean is not None:
        mean = transform.read_mean(pb2, files.mean, channels, height, width)
    if mean is not None and mean.ndim == 1 and mean.size not in (1, channels):
        raise ConfigError(f"{mean.size} mean values for a net of {channels} channel{'s' if channels > 1 else ''}; give "
                          + ("one" if channels == 1 else f"1 or {channels}"))
    white = files.white_on_black if files.white_on_black is not None else False
    if detection:
        return preprocess.Transform(channels, height, width, float(scale), mean, white,
                                    stretch=_stretch(files, channels))
    colour = _colour(files, channels, height, width, files.train_size if crop else None)
    return preprocess.Transform(channels, height, width, float(scale), mean, white, colour)


def _stretch(files: ModelFiles, channels: int) -> preprocess.Stretch:
    """A detection net's steps: its channel order (checked); pycaffe's crop and raw-scale options refused."""
    given = [flag for flag, value in {"--raw-scale": files.raw_scale, "--image-dims": files.image_dims,
                                      "--oversample": files.oversample or None}.items() if value is not None]
    if given:
        raise ConfigError(f"a detection net (its output comes from a {DETECTION_OUTPUT} layer) takes the whole "
                          f"image stretched to its input, in 0-255 pixel values: {', '.join(given)} do not apply; "
                          "give --mean-values, --scale and --channel-swap")
    swap = files.channel_swap if files.channel_swap is not None else preprocess.Stretch().channel_swap
    if channels != 3:
        if files.channel_swap is not None:
            raise ConfigError(f"only colour (3-channel) nets take --channel-swap; this net takes {channels} channel(s)")
        return preprocess.Stretch(None)
    if sorted(swap) != list(range(channels)):
        raise ConfigError(f"--channel-swap {','.join(map(str, swap))} is not an order of the net's "
                          f"{channels} channels (a permutation of 0..{channels - 1})")
    return preprocess.Stretch(tuple(swap))


def _colour(files: ModelFiles, channels: int, height: int, width: int,
            trained: tuple[int, int] | None) -> preprocess.Colour | None:
    """pycaffe's steps for a 3-channel net; a crop net from a run resizes to its training images' size."""
    asked = {"--channel-swap": files.channel_swap, "--raw-scale": files.raw_scale,
             "--image-dims": files.image_dims, "--oversample": files.oversample or None}
    if channels != 3:
        given = [flag for flag, value in asked.items() if value is not None]
        if given:
            raise ConfigError(f"only colour (3-channel) nets take {', '.join(given)}; this net takes {channels} "
                              "channel(s) and is fed as its training data was")
        return None
    default = preprocess.Colour()
    swap = files.channel_swap if files.channel_swap is not None else default.channel_swap
    if sorted(swap) != list(range(channels)):
        raise ConfigError(f"--channel-swap {','.join(map(str, swap))} is not an order of the net's "
                          f"{channels} channels (a permutation of 0..{channels - 1})")
    dims = files.image_dims or (trained if trained and trained[0] >= height and trained[1] >= width else None)
    if dims is not None and (dims[0] < height or dims[1] < width):
        raise ConfigError(f"--image-dims {dims[0]},{dims[1]} is smaller than the net's {height}x{width} input; "
                          "images are resized to it and then cropped")
    raw = files.raw_scale if files.raw_scale is not None else default.raw_scale
    return preprocess.Colour(tuple(dims) if dims else None, tuple(swap), float(raw), files.oversample)
