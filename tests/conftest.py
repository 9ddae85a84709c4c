"""Shared fixtures. The engine is the real one that `invoke test` installs before pytest runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from caffetool.engine import EngineInfo, locate
from caffetool.errors import EngineError

PROJECT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def engine() -> EngineInfo:
    try:
        return locate()
    except EngineError as e:
        pytest.fail(f"the test suite needs the real engine: {e}")


@pytest.fixture(scope="session")
def caffe(engine):
    from caffetool.engine import import_caffe

    return import_caffe(engine)
