"""The engine's cuDNN settings (patch 0006), declared as data: the environment variables libcaffe
reads when a cuDNN convolution first runs, with the default it takes when one is unset.

caffetool passes the environment to every ``caffe`` it starts, records the settings in force in a
GPU run's manifest, and sizes ``memory.estimate --cudnn`` with the workspace limit in force.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from caffetool.errors import ConfigError

SETTINGS: dict[str, tuple[str, str]] = {
    "CAFFE_CUDNN_WORKSPACE_MB": ("1024", "the largest workspace one convolution's algorithm may take, in MiB; "
                                        "one workspace per GPU is shared by all layers"),
    "CAFFE_CUDNN_TF32": ("0", "1 lets Ampere and newer GPUs compute float convolutions in TF32"),
    "CAFFE_CUDNN_ALGO": ("heuristic", "heuristic: cuDNN's ranking, the same choice on every run; find: the "
                                      "candidates timed once per input shape, the fastest taken"),
    "CAFFE_CUDNN_DETERMINISTIC": ("1", "0 also allows algorithms whose results vary from run to run"),
}


def in_force(env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Each setting as the engine will read it from ``env``."""
    return {name: env.get(name) or default for name, (default, _) in SETTINGS.items()}


def workspace_mb(env: Mapping[str, str] = os.environ) -> float:
    """The workspace limit in force, in MiB; a value the engine would refuse is refused here first."""
    text = in_force(env)["CAFFE_CUDNN_WORKSPACE_MB"]
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value < 0:
        raise ConfigError(f"CAFFE_CUDNN_WORKSPACE_MB={text!r}: give a number of MiB, e.g. 1024")
    return value
