"""A net's batch as ``--batch-size`` gives it: every data layer's, and the net's own inputs'.

What each data layer's tops are and where their memory lives is the layer catalogue's
(:mod:`caffetool.layers.sources`); this module only rewrites the batch size a file gives.
"""

from __future__ import annotations

from typing import Any

from caffetool.layers.sources import PREFETCHING
from caffetool.nets import state


def set_batch(net: Any, batch: int, phase: int = state.TRAIN) -> None:
    """Give the data layers of ``net`` (a NetParameter, changed in place) that run in ``phase`` the
    batch ``batch``, and the net's own inputs too (``input_shape``, ``input_dim``): ``--batch-size``
    as a file would say it. A layer without a phase rule (a deploy net's ``Input``) is in the TRAIN
    and the TEST net alike, so it takes the batch in both, as it does in the engine."""
    for layer in net.layer:
        if not state.included(layer, phase):
            continue
        shapes = (list(layer.input_param.shape) if layer.type == "Input" else
                  list(layer.dummy_data_param.shape) if layer.type == "DummyData" else [])
        for shape in shapes:
            if shape.dim:
                shape.dim[0] = batch
        if layer.type == "DummyData":
            layer.dummy_data_param.num[:] = [batch] * len(layer.dummy_data_param.num)
        for param in (*PREFETCHING.values(), "hdf5_data_param", "memory_data_param"):
            if layer.HasField(param):
                getattr(layer, param).batch_size = batch
    for shape in net.input_shape:
        if shape.dim:
            shape.dim[0] = batch
    for i in range(0, len(net.input_dim), 4):
        net.input_dim[i] = batch
