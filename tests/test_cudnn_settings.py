"""The engine's cuDNN settings (patch 0006) as caffetool reads them from the environment."""

from __future__ import annotations

import re

import pytest

from caffetool.engine import cudnn_settings
from caffetool.engine.recipe import PATCH_DIR
from caffetool.errors import ConfigError

PATCH = PATCH_DIR / "0006-gpu-algorithms-once-shared-cudnn-handle.patch"


def test_defaults_are_those_the_engine_takes():
    """caffetool's table against the C++ defaults in the patch the engine is built with."""
    source = PATCH.read_text()
    megabytes = int(re.search(r'EnvSize\("CAFFE_CUDNN_WORKSPACE_MB", (\d+) << 20\)', source).group(1))
    flags = {name: {"true": "1", "false": "0"}[value]
             for name, value in re.findall(r'EnvFlag\("(CAFFE_CUDNN_\w+)", (true|false)\)', source)}
    assert cudnn_settings.in_force({}) == {"CAFFE_CUDNN_WORKSPACE_MB": str(megabytes), **flags,
                                           "CAFFE_CUDNN_ALGO": "heuristic"}
    assert '"heuristic" (default)' in source
    assert cudnn_settings.in_force({"CAFFE_CUDNN_ALGO": "find", "CAFFE_CUDNN_TF32": ""})["CAFFE_CUDNN_ALGO"] == "find"
    assert cudnn_settings.workspace_mb({}) == megabytes == 1024
    assert cudnn_settings.workspace_mb({"CAFFE_CUDNN_WORKSPACE_MB": "64"}) == 64.0


@pytest.mark.parametrize("value", ["-1", "a lot", "1e"])
def test_a_limit_the_engine_would_refuse_is_refused_first(value):
    with pytest.raises(ConfigError, match=f"CAFFE_CUDNN_WORKSPACE_MB='{value}': give a number of MiB, e.g. 1024"):
        cudnn_settings.workspace_mb({"CAFFE_CUDNN_WORKSPACE_MB": value})
