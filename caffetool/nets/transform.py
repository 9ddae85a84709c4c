"""What a run's test images go through before the net: the TEST-phase data layer's ``transform_param``.

Caffe's ``DataTransformer`` subtracts the mean (a ``mean_file`` image or ``mean_value`` per
channel), multiplies by ``scale`` and, in the TEST phase, takes the centre ``crop_size`` square.
Anything that feeds a trained net images of its own — the demo, ``evaluate`` — must do the same
arithmetic, so it reads the parameters here: from the generated ``train_val.prototxt``, or from a
``--solver`` run's copies of the user's nets (its first test net, else its train net).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from caffetool.errors import DataError
from caffetool.nets import prototxt, state
from caffetool.runs.folder import RunFolder

DATA_TYPES = ("Data", "ImageData", "WindowData")


def run_net(run_dir: Path, caffe_pb2: Any) -> Any | None:
    """The net a run trained, with its data layers: the generated ``train_val.prototxt``, or a
    ``--solver`` run's first test net, else its train net; None when the run has none of them."""
    net_file = next((path for path in RunFolder(run_dir).trained_nets if path.is_file()), None)
    return prototxt.read(net_file, caffe_pb2.NetParameter()) if net_file is not None else None


def test_transform(run_dir: Path, caffe_pb2: Any) -> Any | None:
    """The ``TransformationParameter`` of the TEST-phase data layer of the run's net (of its first data
    layer when none is marked TEST), or None when the run has no such net or layer."""
    net = run_net(run_dir, caffe_pb2)
    if net is None:
        return None
    data = [layer for layer in net.layer if layer.type in DATA_TYPES]
    chosen = next((layer for layer in data if layer.include and state.included(layer, state.TEST)),
                  data[0] if data else None)
    return chosen.transform_param if chosen is not None else None


def read_mean(caffe_pb2: Any, path: Path, channels: int, height: int, width: int) -> np.ndarray:
    """The mean as per-channel values or a (C, H, W) image, from ``.npy`` or Caffe's ``.binaryproto``.

    A mean image of another size than the input — a full-size mean for a net that takes crops —
    becomes per-channel values, ``mean.mean(1).mean(1)`` (summed in float64) as BVLC Caffe's web demo
    (``examples/web_demo/app.py``) and ``00-classification`` notebook compute them. (``python/classify.py``
    instead lets ``Transformer.set_mean`` resize the image to the crop; Caffe's own TEST-phase data layer
    subtracts the mean image's centre crop.)"""
    try:
        if path.suffix == ".npy":
            mean = np.load(path, allow_pickle=False).astype(np.float64)
        else:
            blob = caffe_pb2.BlobProto()
            blob.ParseFromString(Path(path).read_bytes())
            mean = np.array(blob.data, np.float64).reshape(_mean_shape(blob))
    except (OSError, ValueError, DecodeError) as e:
        raise DataError(f"mean {path} cannot be read as a mean image ({e}); give a .npy or .binaryproto "
                        "(caffetool data.mean writes one)") from None
    if mean.ndim == 4 and mean.shape[0] == 1:
        mean = mean[0]
    if mean.ndim not in (1, 3) or mean.shape[0] != channels:
        raise DataError(f"mean {path} has shape {mean.shape}; the net takes {channels} channel(s): give "
                        f"{channels} values or a {channels}xHxW image")
    if mean.ndim == 3 and mean.shape[1:] != (height, width):
        mean = mean.mean(1).mean(1)
    return mean.astype(np.float32)


def _mean_shape(blob: Any) -> tuple[int, ...]:
    """(C, H, W) of a mean ``BlobProto``: from the legacy num/channels/height/width fields, as
    ``compute_image_mean`` writes them, or from ``shape`` (N, C, H, W) as pycaffe's
    ``caffe.io.array_to_blobproto`` does; BVLC Caffe's ``Blob::FromProto`` reads both."""
    if any(blob.HasField(name) for name in ("num", "channels", "height", "width")):
        return blob.channels, blob.height, blob.width
    dims = tuple(blob.shape.dim)
    return dims[-3:] if len(dims) == 4 and dims[0] == 1 else dims
