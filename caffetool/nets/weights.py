"""Whether a weights file holds weights for a net, checked as Caffe will load it.

Caffe's ``Net::CopyTrainedLayersFrom`` (net.cpp) reads a ``.caffemodel`` as a binary
``NetParameter`` (or a ``.h5`` file as HDF5), copies each of its layers into the net's layer *of
the same name*, and skips a layer the net does not have without a word. A 0-byte file parses as an
empty ``NetParameter``, and a file from another net matches no layer: either way Caffe goes on
with the net's initial values, so an evaluation scores an untrained net and a fine-tuning run
starts from scratch. Caffe only stops at a matched layer whose blobs differ in number or shape.

:func:`problem` answers before Caffe loads anything: the file must parse, its blobs must fit the
layers they match (legacy 4-D ``num/channels/height/width`` shapes compared as Caffe's
``Blob::ShapeEquals`` does), and it must match at least one layer that has parameters — every
one when the net is used as it is (evaluation, serving, ``train.test``), some when it is
fine-tuned (a new classifier layer starts fresh; :func:`fresh` names those).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

Shapes = dict[str, list[tuple[int, ...]]]  # layer name -> its parameter blobs' shapes, in order


def read(path: Path, caffe_pb2: Any) -> tuple[Shapes | None, str | None]:
    """The layers ``path`` holds weights for, or why it holds none."""
    if path.suffix == ".h5":
        return _read_hdf5(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        return None, f"cannot be read ({e.strerror})"
    if not data:
        return None, "is empty (0 bytes)"
    net = caffe_pb2.NetParameter()
    from google.protobuf.message import DecodeError  # noqa: PLC0415 - protobuf comes with pycaffe

    try:
        net.ParseFromString(data)
    except DecodeError:
        text = data[:4096]
        if b"layer" in text and b"name:" in text:
            return None, "is a text file, a .prototxt by the look of it: that describes a net, not its weights"
        return None, "is not a Caffe model (a binary NetParameter, as Caffe's snapshots write)"
    layers = list(net.layer) or list(net.layers)  # V1 models keep their layers in ``layers``
    return {layer.name: [_blob_shape(b) for b in layer.blobs] for layer in layers}, None


def problem(path: Path, source: Shapes | None, why: str | None, target: Shapes, complete: bool) -> str | None:
    """Why the weights ``source`` (read from ``path``) cannot be loaded into a net with parameter
    blobs ``target``; ``complete``: every layer with parameters must get its weights."""
    if source is None:
        return f"--weights {path} {why}; give the .caffemodel a training run wrote"
    learnable = [name for name, blobs in target.items() if blobs]
    for name, blobs in source.items():
        if name not in target:
            continue
        wanted = target[name]
        if len(blobs) != len(wanted):
            return (f"--weights {path}: layer '{name}' holds {len(blobs)} blob(s), the net's layer of that name "
                    f"has {len(wanted)}; these weights are for another net")
        for i, (have, want) in enumerate(zip(blobs, wanted)):
            if not _fits(have, want):
                return (f"--weights {path}: layer '{name}' blob {i} has shape {_show(have)}, the net's has "
                        f"{_show(want)}; these weights are for another version of the net (or rename the layer "
                        "to start it fresh)")
    matched = [name for name in learnable if source.get(name)]
    if learnable and not matched:  # a net without parameters (pooling, reshapes) takes any NetParameter
        return (f"--weights {path} holds weights for none of the net's layers with parameters "
                f"({_names(learnable)}; the file has {_names(list(source)) or 'no layers'}); Caffe matches "
                "layers by name: give the weights of this net")
    missing = fresh(source, target)
    if complete and missing:
        return (f"--weights {path} has no weights for the net's layer(s) {_names(missing)}, which would run with "
                "their initial values; give the weights this net was trained to")
    return None


def fresh(source: Shapes, target: Shapes) -> list[str]:
    """The net's layers with parameters that ``source`` has no weights for (they start from their fillers)."""
    return [name for name, blobs in target.items() if blobs and not source.get(name)]


def _blob_shape(blob: Any) -> tuple[int, ...]:
    if blob.HasField("num") or blob.HasField("channels") or blob.HasField("height") or blob.HasField("width"):
        return ("legacy", blob.num, blob.channels, blob.height, blob.width)  # type: ignore[return-value]
    return tuple(blob.shape.dim)


def _fits(have: tuple, want: tuple[int, ...]) -> bool:
    """Caffe's ``Blob::ShapeEquals``: a legacy shape equals a net blob of at most 4 axes padded with 1s."""
    if have[:1] == ("legacy",):
        return len(want) <= 4 and tuple(have[1:]) == (1,) * (4 - len(want)) + tuple(want)
    return tuple(have) == tuple(want)


def _show(shape: Sequence) -> str:
    dims = shape[1:] if shape[:1] == ("legacy",) else shape
    return " x ".join(str(d) for d in dims) or "a scalar"


def _names(names: Sequence[str], shown: int = 6) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _read_hdf5(path: Path) -> tuple[Shapes | None, str | None]:
    """An HDF5 model as Caffe's ``CopyTrainedLayersFromHDF5`` reads it: a ``data`` group, one group a
    layer, its blobs as datasets named ``0``, ``1``, ..."""
    try:
        import h5py  # noqa: PLC0415 - only HDF5 weights need it (pycaffe's own requirement)
    except ImportError:
        return None, "is an HDF5 model, and h5py (which reads it) is not installed: pip install h5py"
    try:
        with h5py.File(path, "r") as f:
            data = f["data"]
            return {name: [tuple(data[name][str(i)].shape) for i in range(len(data[name]))] for name in data}, None
    except (OSError, KeyError) as e:
        return None, f"is not a Caffe HDF5 model ({e})"
