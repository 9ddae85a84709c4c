"""``memory.estimate --solver FILE`` and ``memory.fit --solver FILE``: a user's own solver, estimated as
its train net with the solver's type and iter_size, which flags override; BVLC's example solvers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from caffetool.engine import cpu_threads
from tests.caffe_root import lay_out
from tests.test_cli import CAFFETOOL, refused, run

MNIST = "examples/mnist"


@pytest.fixture(scope="module")
def root(engine, fashion_data, tmp_path_factory) -> Path:
    return lay_out(tmp_path_factory.mktemp("caffe"), engine, fashion_data)


def estimate(root: Path, *flags: str) -> dict:
    done = run(CAFFETOOL, "memory.estimate", *flags, "--json", cwd=root)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_solver_is_estimated_as_its_net_with_its_type(root: Path) -> None:
    by_solver = estimate(root, "--solver", f"{MNIST}/lenet_solver_adam.prototxt")
    by_net = estimate(root, "--net", f"{MNIST}/lenet_train_test.prototxt", "--input-shape", "1,28,28", "--type", "Adam")
    assert by_solver["options"]["solver"] == "Adam"
    assert by_solver["total"] == by_net["total"] > 0
    sgd = estimate(root, "--solver", f"{MNIST}/lenet_solver_adam.prototxt", "--type", "sgd")
    assert sgd["options"]["solver"] == "SGD" and sgd["total"] < by_solver["total"]


def test_batch_size_overrides_the_data_layer(root: Path) -> None:
    small = estimate(root, "--solver", f"{MNIST}/lenet_solver.prototxt", "--batch-size", "8")
    large = estimate(root, "--solver", f"{MNIST}/lenet_solver.prototxt", "--batch-size", "256")
    assert small["total"] < large["total"]
    assert small["rows"][0]["top"][0] == 8


def test_fit_takes_a_solver(root: Path) -> None:
    done = run(CAFFETOOL, "memory.fit", "--solver", f"{MNIST}/lenet_solver.prototxt", "--gpu-memory", "1GiB",
               cwd=root)
    assert done.returncode == 0, done.stderr
    assert "largest batch" in done.stdout


def test_one_source_of_net_only(root: Path) -> None:
    refused(run(CAFFETOOL, "memory.estimate", "--model", "lenet", "--solver", f"{MNIST}/lenet_solver.prototxt",
                cwd=root), "give exactly one of --model NAME, --net FILE or --solver FILE")
    refused(run(CAFFETOOL, "memory.estimate", "--solver", "nope.prototxt", cwd=root),
            f"solver not found: {root.resolve() / 'nope.prototxt'}")


BVLC_SOLVERS = ["lenet_solver", "lenet_solver_adam", "lenet_solver_rmsprop", "lenet_adadelta_solver",
                "lenet_multistep_solver", "lenet_consolidated_solver", "mnist_autoencoder_solver",
                "mnist_autoencoder_solver_adadelta", "mnist_autoencoder_solver_adagrad",
                "mnist_autoencoder_solver_nesterov"]


@pytest.mark.parametrize("name", BVLC_SOLVERS)
def test_bvlc_example_solvers_are_estimated_within_two_percent_of_the_engine(root: Path, name: str) -> None:
    """Every solver BVLC ships for MNIST, on its own data and test nets (the autoencoder's two, with
    their stages; the consolidated solver's inline nets), against malloc's count in the real engine."""
    done = run(CAFFETOOL, "memory.measure", "--solver", f"{MNIST}/{name}.prototxt", cwd=root)
    assert done.returncode == 0, done.stderr
    error = float(re.search(r"error +([-+][\d.]+)%", done.stdout).group(1))
    assert abs(error) <= 2.0, done.stdout


@pytest.mark.parametrize("batch", ["8", "256"])
def test_a_deploy_nets_input_takes_the_batch_size_in_the_engine_as_in_the_estimate(root: Path, batch: str) -> None:
    """BVLC's LeNet deploy net (an ``Input`` of 64 images) with ``--batch-size``: the engine is measured
    at that batch, in the TRAIN and the TEST net alike (the one ``Input`` serves both), as estimated."""
    done = run(CAFFETOOL, "memory.measure", "--net", f"{MNIST}/lenet.prototxt", "--batch-size", batch, cwd=root)
    assert done.returncode == 0, done.stderr
    assert f"lenet, batch {batch}, SGD, CPU:" in done.stdout
    error = float(re.search(r"error +([-+][\d.]+)%", done.stdout).group(1))
    assert abs(error) <= 2.0, done.stdout


# every core this process may use (one in a test lane: --threads above the cores is refused)
@pytest.mark.parametrize("flags", [("--phase", "test", "--threads", str(cpu_threads.available())), ("--threads", "1"),
                                   ("--mode", "gpu")])
@pytest.mark.parametrize("batch", [1, 32])
def test_the_by_batch_line_agrees_with_the_total_beside_it(root: Path, flags: tuple[str, ...], batch: int) -> None:
    """"F fixed + batch x P per sample" is the line through the estimate's own batch, so it gives the
    total printed beside it (on a GPU the total less CUDA's pages)."""
    e = estimate(root, "--net", f"{MNIST}/lenet.prototxt", "--batch-size", str(batch), *flags)
    total = e["total"] - (e["allocator"] if "gpu" in flags else 0)
    assert e["fixed"] + batch * e["per_sample"] == total
    other = batch + 1 if batch == 1 else batch - 1  # the line's second batch
    beside = estimate(root, "--net", f"{MNIST}/lenet.prototxt", "--batch-size", str(other), *flags)
    assert e["fixed"] + other * e["per_sample"] == beside["total"] - (beside["allocator"] if "gpu" in flags else 0)
