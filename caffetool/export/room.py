"""How many images one verification pass may hold, decided from the memory estimator before any runs.

A verification runs each batch through pycaffe and, side by side, through onnxruntime twice (every
layer's output kept, then the model as exported), so a pass holds Caffe's net at that batch, a copy
of each of its layers' outputs, onnxruntime's outputs of every layer, and two onnxruntime sessions
whose memory arenas each grow to about the feature maps and the convolutions' scratch (arenas keep
what they once held): Caffe's estimate plus four times its feature maps and twice its scratch. A deploy net is a small file whatever it declares: one
that takes 3 x 6000 x 6000 images needs gigabytes for a single image. The pass is made as large as
asked, or as large as fits in :data:`SHARE` of the memory this machine has available; where even
one image does not fit, or a fixed ``--batch`` does not, the export is refused before any work.
"""

from __future__ import annotations

import math
from typing import Any

from caffetool.errors import CaffetoolError, ExportError
from caffetool.memory import estimator
from caffetool.memory.headroom import SHARE, available_bytes


def need(net_param: Any, batch: int) -> float | None:
    """Bytes a verification pass of ``batch`` inputs takes: infinite where Caffe could not even build
    the net at that batch (a blob past INT_MAX elements); None where the estimator cannot tell."""
    try:
        e = estimator.estimate(net_param, estimator.Options(phase="test", batch=batch, test_net=False))
    except CaffetoolError:
        return None if batch == 1 else math.inf
    return e.total + 4 * e.groups["feature maps"] + 2 * e.groups["workspace"]


def pass_size(net_param: Any, wanted: int, fixed: bool, available: int | None = None) -> int:
    """The inputs per verification pass: ``wanted`` where it fits, else the most that do (a fixed
    batch must fit as it is); refused where none does. A net the estimator cannot model keeps
    ``wanted``."""
    budget = int(SHARE * (available_bytes() if available is None else available))
    one = need(net_param, 1)
    if one is None:
        return wanted
    needed = need(net_param, wanted)
    if needed <= budget:
        return wanted
    if fixed:
        raise ExportError(f"verifying a model of --batch {wanted} needs {_size(needed)} (Caffe and onnxruntime side "
                          f"by side) and this machine has {_size(budget)} to give it: export with a smaller --batch, "
                          "or dynamic (nothing was written)")
    if one > budget:
        raise ExportError(f"verifying this net needs {_size(one)} for a single input (Caffe and onnxruntime side by "
                          f"side) and this machine has {_size(budget)} to give it; export it on a machine with more "
                          "memory (nothing was written)")
    low, high = 1, wanted  # low fits, high does not
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if need(net_param, middle) <= budget else (low, middle)
    return low


def _size(nbytes: float) -> str:
    return "more than Caffe can hold in one blob" if math.isinf(nbytes) else f"about {nbytes / 2**30:.1f} GiB"
