"""The smoke training: passes on the real engine; a caffe that fails, is missing or logs nothing is named."""

from __future__ import annotations

import dataclasses
import shutil

import pytest

from caffetool.engine import smoke
from caffetool.errors import EngineError


def test_the_real_engine_learns(engine):
    result = smoke.tiny_training(engine, iterations=20)
    assert result.iterations == 20 and result.last_loss < result.first_loss


def with_caffe(engine, tmp_path, program: str | None):
    """``engine`` with ``bin/caffe`` replaced by another real program, or missing."""
    (tmp_path / "bin").mkdir()
    if program:
        shutil.copy(program, tmp_path / "bin" / "caffe")
    return dataclasses.replace(engine, prefix=tmp_path)


def test_a_caffe_that_fails_is_reported(engine, tmp_path):
    with pytest.raises(EngineError) as err:
        smoke.tiny_training(with_caffe(engine, tmp_path, "/bin/false"))
    assert str(err.value) == "`caffe train` on the smoke net failed (exit 1): (no output)"


def test_a_missing_caffe_is_reported(engine, tmp_path):
    with pytest.raises(EngineError) as err:
        smoke.tiny_training(with_caffe(engine, tmp_path, None))
    missing = tmp_path / "bin" / "caffe"
    assert str(err.value) == f"`caffe train` on the smoke net could not start: {missing}: No such file or directory"


def test_a_caffe_that_logs_no_loss_is_reported(engine, tmp_path):
    with pytest.raises(EngineError) as err:
        smoke.tiny_training(with_caffe(engine, tmp_path, "/bin/true"))
    assert str(err.value) == "`caffe train` on the smoke net logged fewer than two losses:\n(no output)"
