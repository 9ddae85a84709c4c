"""Shared fixtures. The engine is the real one that `caffetool test` installs before pytest runs.

Every test that needs the engine carries the ``engine`` mark: those that use the ``engine`` fixture
(directly or through another fixture) get it here, and those that reach it otherwise (a ``caffetool``
command in a child process) are marked in their module. ``pytest -m "not engine"`` runs the rest,
on a machine where no engine is installed.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from caffetool.engine import EngineInfo, locate
from caffetool.errors import EngineError

PROJECT = Path(__file__).resolve().parent.parent

# Trainings the tests start are logged to MLflow only where a test runs caffetool with the INVOKE_*
# settings removed (the tests of tracking, of sweeps' runs, of the CLI): each new SQLite store costs
# a command about 4.6 s (MLflow's import and its schema), paid by every other training for nothing.
os.environ.setdefault("INVOKE_TRACKING_URI", "off")

# The tests that press Ctrl-C send SIGINT to a child, which inherits SIGINT ignored where the suite
# was started in the background of a non-interactive shell (`cmd &`, nohup); a handler here (reset
# to the default in each child at exec) gives every child the terminal's behaviour.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "engine" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.engine)


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


@pytest.fixture(scope="session")
def fashion_data(tmp_path_factory):
    """Fashion-MNIST from Debian's package, fetched into LMDB in a folder of the test session."""
    from caffetool.data import fetch
    from caffetool.data.registry import FASHION_MNIST

    folder = tmp_path_factory.mktemp("fashion-data")
    return fetch.fetch(FASHION_MNIST, folder, progress=False, say=lambda _: None).dataset


@pytest.fixture(scope="session")
def trained_run(engine, fashion_data, tmp_path_factory):
    """A LeNet trained by the test suite once (600 iterations of the recipe, about 15 s)."""
    from caffetool.nets.solver import SolverOptions
    from caffetool.train import session

    runs = tmp_path_factory.mktemp("trained-runs")
    request = session.TrainRequest(dataset="fashion-mnist", data_dir=fashion_data.path.parent, runs_dir=runs,
                                   name="lenet600", options=SolverOptions(max_iter=600, test_interval=600))
    result = session.train(engine, request, say=lambda _: None, progress=False)
    assert result.outcome.status == "finished", result.outcome.message
    return result.run_dir
