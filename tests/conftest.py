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


# `caffetool test` runs the suite in pytest-xdist lanes (``--dist loadgroup``, scheduled below): each
# module is one unit of work (its module-scoped fixtures made once), and the modules that share what a
# machine has once are one unit, run one after another in one lane. Ray: ``ray start``'s default port
# and session folder. System: apt's lock, the project's build/ folder that docker.build stages, the
# private Docker daemon.
SHARED = {
    # test_extras runs `caffetool sweep` and `ray.start` where Ray is missing: were the refusal lost, they would
    # start a Ray on the default port
    "ray": ("test_sweep", "test_sweep_hparams", "test_sweep_resident", "test_tracking", "test_extras"),
    "system": ("test_bundle", "test_docker", "test_docker_daemon", "test_fast_build", "test_packaging"),
}
GROUP_OF = {module: group for group, modules in SHARED.items() for module in modules}
# The longest units first, so that the lanes end together (a lane takes the next unit when it is
# nearly done). Seconds, from one serial run's --durations=0 on 2 cores.
LONGEST = {"system": 600, "ray": 600, "test_export_pytorch": 180, "test_export": 150, "test_export_layers": 106,
           "test_project_cli": 98, "test_train": 90, "test_nets": 87, "test_hostile_inputs": 77, "test_v2_reliability": 74,
           "test_demo": 71, "test_upgrade_public": 80, "test_hostile_runs": 49, "test_evaluation": 44}


def unit(nodeid: str) -> str:
    """A test's unit of work in the lanes: its shared group, else its module."""
    module = Path(nodeid.partition("::")[0]).stem
    return GROUP_OF.get(module, module)


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadgroup`` with the groups above, in the order the workers collected (longest
    first). xdist's own loadgroup reads groups from suffixed node ids, which pytest 9.2's node ids no
    longer take (pytest-xdist issue #1386): it would spread a group's tests over the lanes."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Lanes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit(nodeid)

    config.option.loadscopereorder = False
    return Lanes(config, log)


def pytest_configure(config: pytest.Config) -> None:
    """In an xdist lane, keep to this lane's own cores (children too): with two lanes on two cores,
    each lane's Caffe then fills one core with one thread, where both lanes' threads, spinning at
    OpenMP barriers on the same two cores, slow each other down."""
    worker = getattr(config, "workerinput", None)  # xdist's own, unlike its PYTEST_XDIST_* that children inherit
    cores = sorted(os.sched_getaffinity(0))
    if worker and 1 < (lanes := worker["workercount"]) <= len(cores):
        os.sched_setaffinity(0, cores[int(worker["workerid"].removeprefix("gw")) % lanes::lanes])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "engine" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.engine)
    if hasattr(config, "workerinput"):
        items.sort(key=lambda item: -LONGEST.get(unit(item.nodeid), 0))  # stable: a unit's tests stay in order


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
def rows_independent_of_batch(caffe, tmp_path_factory) -> bool:
    """Whether the engine's BLAS, on this CPU, gives one row of a product the same bits whatever the
    number of rows: an InnerProduct layer's answer for one image alone against the same image in a
    batch of 16. MKL with its strict conditional numerical reproducibility does on Intel CPUs; on
    AMD EPYC neither MKL nor OpenBLAS does (a one-row product takes their matrix-vector path), and a
    batched answer then differs from the answer alone in the last bits (3.6e-7 on LeNet's
    probabilities)."""
    import numpy as np

    net_file = tmp_path_factory.mktemp("blas") / "ip.prototxt"
    net_file.write_text('input: "x" input_shape { dim: 16 dim: 800 } layer { name: "ip" type: "InnerProduct" '
                        'bottom: "x" top: "y" inner_product_param { num_output: 500 weight_filler { '
                        'type: "gaussian" std: 0.1 } } }')
    net = caffe.Net(str(net_file), caffe.TEST)
    x = np.random.default_rng(0).normal(size=(16, 800)).astype(np.float32)
    net.blobs["x"].data[...] = x
    batched = net.forward()["y"].copy()
    net.blobs["x"].reshape(1, 800)
    alone = []
    for row in x:
        net.blobs["x"].data[...] = row
        alone.append(net.forward()["y"][0].copy())
    return bool(np.array_equal(np.stack(alone), batched))


def same_answers(got, expected, bitwise: bool) -> bool:
    """A server's batched answers against each image's answer alone: the same bits where the BLAS
    makes them so (:func:`rows_independent_of_batch`), else equal to float32 rounding (1e-6) with the
    same top class."""
    import numpy as np

    got, expected = np.asarray(got), np.asarray(expected)
    if bitwise:
        return bool(np.array_equal(got, expected))
    return bool(got.shape == expected.shape and np.allclose(got, expected, rtol=0, atol=1e-6)
                and (got.argmax(-1) == expected.argmax(-1)).all())


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
    from caffetool.nets.solvers import SolverOptions
    from caffetool.train import session

    runs = tmp_path_factory.mktemp("trained-runs")
    request = session.TrainRequest(dataset="fashion-mnist", data_dir=fashion_data.path.parent, runs_dir=runs,
                                   name="lenet600", options=SolverOptions(max_iter=600, test_interval=600))
    result = session.train(engine, request, say=lambda _: None, progress=False)
    assert result.outcome.status == "finished", result.outcome.message
    return result.run_dir
