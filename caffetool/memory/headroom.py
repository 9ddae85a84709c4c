"""The memory this machine has available now, and the share of it one pass of Caffe may take.

An export's verification pass and a ``memory.measure`` run both size (or refuse) their batch from the
estimator before anything is allocated, against the same share of ``MemAvailable``: the rest is left
to the other programs of a shared machine and to what the estimate does not count (the Python side,
onnxruntime's arenas beyond the model).
"""

from __future__ import annotations

SHARE = 0.8  # of the memory available now (MemAvailable) that one pass may take


def available_bytes() -> int:
    import psutil

    return int(psutil.virtual_memory().available)
