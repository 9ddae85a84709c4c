"""The engine's cuDNN settings (patch 0006) as caffetool reads them from the environment."""

from __future__ import annotations

import pytest

from caffetool.engine import cudnn_settings
from caffetool.errors import ConfigError


def test_defaults_are_those_the_engine_takes():
    assert cudnn_settings.in_force({}) == {"CAFFE_CUDNN_WORKSPACE_MB": "256", "CAFFE_CUDNN_TF32": "0",
                                  "CAFFE_CUDNN_ALGO": "heuristic", "CAFFE_CUDNN_DETERMINISTIC": "1"}
    assert cudnn_settings.in_force({"CAFFE_CUDNN_ALGO": "find", "CAFFE_CUDNN_TF32": ""})["CAFFE_CUDNN_ALGO"] == "find"
    assert cudnn_settings.workspace_mb({}) == 256.0 and cudnn_settings.workspace_mb({"CAFFE_CUDNN_WORKSPACE_MB": "1024"}) == 1024.0


@pytest.mark.parametrize("value", ["-1", "a lot", "1e"])
def test_a_limit_the_engine_would_refuse_is_refused_first(value):
    with pytest.raises(ConfigError, match=f"CAFFE_CUDNN_WORKSPACE_MB='{value}': give a number of MiB, e.g. 256"):
        cudnn_settings.workspace_mb({"CAFFE_CUDNN_WORKSPACE_MB": value})
