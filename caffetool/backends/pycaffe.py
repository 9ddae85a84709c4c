"""The ``caffe`` backend: Caffe's own ``caffe.Net`` on Caffe's files, so its figures are Caffe's.

The net is built and run on a :class:`~caffetool.backends.devices.PycaffeDevice`, activated before it
is built and before every pass, since pycaffe's mode belongs to the calling thread. The net keeps
every layer's blobs after a pass: the model's ``net`` is the ``caffe.Net``, for what a server shows
of its layers. A file Caffe cannot read aborts the process: callers validate in a child first.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from caffetool.backends.devices import PycaffeDevice
from caffetool.backends.loaded import LoadedModel, ModelSource
from caffetool.engine import import_caffe

READS = "caffe"


def load(source: ModelSource, device: PycaffeDevice, outputs: Sequence[str]) -> LoadedModel:
    caffe = import_caffe(source.engine)
    device.activate(caffe)
    net = caffe.Net(str(source.path), str(source.weights), caffe.TEST)
    wanted = tuple(outputs) or tuple(net.outputs)

    def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        device.activate(caffe)
        resized = [name for name, x in feeds.items() if net.blobs[name].data.shape != x.shape]
        for name in resized:  # a batch of another size
            # Blob::Reshape reallocates only past a blob's capacity: passes of every batch size up
            # to the largest seen share one allocation, made once.
            net.blobs[name].reshape(*feeds[name].shape)
        if resized:
            net.reshape()
        for name, x in feeds.items():
            net.blobs[name].data[...] = x
        net.forward()
        return {name: net.blobs[name].data.copy() for name in wanted}

    return LoadedModel("caffe", tuple(net.inputs), wanted, run, net)
