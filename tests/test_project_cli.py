"""``caffetool train --solver FILE`` as a user runs it: from a folder laid out like a Caffe root, with
BVLC's example files unchanged, through the installed command (a real subprocess, the real engine),
then ``train.test``, ``train.resume`` and the demo (``demo.serve`` over real HTTP, ``demo.classify``)
on the run it made. The user's folder must come out of all of it exactly as it went in.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import islice
from pathlib import Path

import cv2
import httpx
import numpy as np
import pytest

from caffetool.checksum import sha256_file
from caffetool.data import datum
from caffetool.data.registry import FASHION_MNIST
from caffetool.nets import prototxt
from tests.caffe_root import AUTOENCODER_SOLVER, lay_out
from tests.processes import stop

CAFFETOOL = Path(sys.executable).parent / "caffetool"
LENET_SOLVER = "examples/mnist/lenet_solver.prototxt"
LENET_NET = "examples/mnist/lenet_train_test.prototxt"
LENET_DEPLOY = "examples/mnist/lenet.prototxt"  # BVLC's own deploy net for LeNet
COMMAND_TIMEOUT = 300


@contextmanager
def process_group(argv: list[str], cwd: Path, **popen: object) -> Iterator[subprocess.Popen]:
    """``argv`` started in its own process group, with no INVOKE_* settings of the caller's; the
    group is killed on the way out if it is still there (a ``caffe`` that caffetool started runs in
    its own session and dies with caffetool, which asks the kernel for that)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("INVOKE_")}
    child = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, start_new_session=True,
                             text=True, **popen)
    try:
        yield child
    finally:
        stop(child, group=True)  # grandchildren too (caffe)


def caffetool(*args: str, cwd: Path, timeout: float = COMMAND_TIMEOUT) -> subprocess.CompletedProcess:
    """The installed command, run to its end in ``cwd``."""
    argv = [str(CAFFETOOL), *args]
    with process_group(argv, cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as child:
        try:
            out, err = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{' '.join(args)} ran past {timeout} s") from None
    return subprocess.CompletedProcess(argv, child.returncode, out, err)


def succeeded(done: subprocess.CompletedProcess) -> str:
    """The output of a command that exited 0."""
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def folder_state(root: Path) -> dict[str, tuple]:
    """Every file under ``root`` with its sha256, size and mtime, and every link with its target
    (linked folders are recorded, not followed): any change, new file or touch shows."""
    seen: dict[str, tuple] = {}
    for folder, dirs, names in os.walk(root):
        for name in [*dirs, *names]:
            path = Path(folder) / name
            info = path.lstat()
            if path.is_symlink():
                seen[str(path)] = ("link", os.readlink(path))
            elif path.is_file():
                seen[str(path)] = ("file", sha256_file(path), info.st_size, info.st_mtime_ns)
            else:
                seen[str(path)] = ("dir",)
    return seen


def summary(stdout: str, label: str) -> tuple[int, dict[str, float]]:
    """The iteration and figures of the summary line that starts with ``label`` (``final test:``,
    ``test #0:``)."""
    lines = [line for line in stdout.splitlines() if line.startswith(label)]
    assert len(lines) == 1, stdout
    m = re.fullmatch(rf"{re.escape(label)}\s+iteration (\d+): (.*?)( \(caffe test\))?", lines[0])
    assert m, lines[0]
    figures = {name: float(value) for name, value in (pair.rsplit(" ", 1) for pair in m.group(2).split(", "))}
    return int(m.group(1)), figures


def manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def input_scale(root: Path, net: str, caffe_pb2: object) -> float:
    """The input scale of the TEST-phase data layer of the user's ``net``."""
    parsed = prototxt.read(root / net, caffe_pb2.NetParameter())
    layer = next(layer for layer in parsed.layer
                 if layer.type == "Data" and any(rule.phase == caffe_pb2.TEST for rule in layer.include))
    return layer.transform_param.scale


def fashion_pngs(data_dir: Path, caffe_pb2: object, n: int) -> list[tuple[bytes, int]]:
    """The first ``n`` records of a test LMDB as PNG images, with their labels."""
    images = []
    for _, height, width, pixels, label in islice(datum.read(data_dir, caffe_pb2), n):
        image = np.frombuffer(pixels, np.uint8).reshape(height, width)
        images.append((cv2.imencode(".png", image)[1].tobytes(), label))
    return images


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def demo_server(run_dir: Path, cwd: Path) -> Iterator[str]:
    """``caffetool demo.serve --run RUN`` from ``cwd``, answering; its base URL. Stopped on the way out."""
    port = free_port()
    log = cwd / "demo-serve.log"
    with open(log, "w") as out, process_group([str(CAFFETOOL), "demo.serve", "--run", str(run_dir), "--port",
                                               str(port)], cwd, stdout=out, stderr=subprocess.STDOUT) as child:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while True:
            assert child.poll() is None, f"demo.serve exited {child.returncode}: {log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"demo.serve did not answer: {log.read_text()[-3000:]}"
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        yield url


@pytest.fixture(scope="module")
def caffe_root(engine, fashion_data, tmp_path_factory) -> Path:
    """A Caffe root: BVLC's ``examples/mnist`` unchanged, Fashion-MNIST as its LMDBs."""
    return lay_out(tmp_path_factory.mktemp("project") / "caffe", engine, fashion_data)


@pytest.fixture(scope="module")
def autoencoder(caffe_root: Path, tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """BVLC's MNIST autoencoder solver (two test nets) trained 30 iterations by the command."""
    runs = tmp_path_factory.mktemp("autoencoder") / "runs"
    done = caffetool("train", "--solver", AUTOENCODER_SOLVER, "--max-iter", "30", "--test-iter", "3",
                     "--display", "10", "--runs-dir", str(runs), "--name", "ae", cwd=caffe_root)
    return done, runs / "ae"


def test_bvlc_lenet_trains_unchanged_and_is_served(caffe, fashion_data, caffe_root: Path, tmp_path: Path) -> None:
    pb2 = caffe.proto.caffe_pb2
    before = folder_state(caffe_root)
    runs = tmp_path / "runs"
    out = succeeded(caffetool("train", "--solver", LENET_SOLVER, "--max-iter", "300", "--test-iter", "20",
                              "--runs-dir", str(runs), "--name", "bvlc", cwd=caffe_root))
    run_dir = runs / "bvlc"
    lines = out.splitlines()
    assert f"run:        {run_dir}" in lines
    assert "status:     finished" in lines
    iteration, figures = summary(out, "final test:")
    assert iteration == 300
    assert 0.5 < figures["accuracy"] <= 1.0, out
    weights = run_dir / "snapshots/lenet_iter_300.caffemodel"
    assert f"model:      {weights} (deploy: {run_dir / 'deploy.prototxt'})" in lines

    m = manifest(run_dir)
    if not m["device"]["gpu"]:  # BVLC's solver says solver_mode: GPU: the user is told it is not used
        assert any(line.startswith("training on the CPU: ") or
                   line == "lenet_solver.prototxt asks for solver_mode: GPU; training on the CPU"
                   for line in lines), out
    assert m["status"] == "finished" and m["iterations"] == 300
    assert m["final"]["test0"]["NumIters"] == 300
    assert round(m["final"]["test0"]["accuracy"], 4) == figures["accuracy"]
    mnist = caffe_root.resolve() / "examples/mnist"
    assert m["project"]["files_sha256"] == {
        str(mnist / "lenet_solver.prototxt"): sha256_file(mnist / "lenet_solver.prototxt"),
        str(mnist / "lenet_train_test.prototxt"): sha256_file(mnist / "lenet_train_test.prototxt"),
        str(fashion_data.db("train").resolve() / "data.mdb"): sha256_file(fashion_data.db("train") / "data.mdb"),
        str(fashion_data.db("test").resolve() / "data.mdb"): sha256_file(fashion_data.db("test") / "data.mdb"),
    }
    assert m["project"]["original_solver"] == prototxt.to_text(
        prototxt.read(caffe_root / LENET_SOLVER, pb2.SolverParameter()))
    assert folder_state(caffe_root) == before

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    images = fashion_pngs(fashion_data.db("test"), pb2, 20)
    with demo_server(run_dir, elsewhere) as url, httpx.Client(base_url=url, timeout=30) as client:
        model = client.get("/api/model").json()
        assert model["run"] == str(run_dir) and model["input_shape"] == [1, 1, 28, 28]
        assert model["classes"] == [str(i) for i in range(10)]  # no --labels: classes by index
        hits = 0
        for data, label in images:
            r = client.post("/api/classify?top=3", content=data, headers={"Content-Type": "image/png"})
            assert r.status_code == 200, r.text
            top = r.json()["top"]
            assert len(top) == 3 and [t["prob"] for t in top] == sorted((t["prob"] for t in top), reverse=True)
            assert all(t["label"] == str(t["index"]) for t in top)
            hits += top[0]["index"] == label
    assert hits >= 12, f"{hits} of {len(images)} right"
    assert folder_state(caffe_root) == before
    # the demo must feed the net its input as the user's net was tested on (transform_param's scale);
    # unscaled 0-255 pixels mostly keep the argmax but saturate every probability
    assert model["scale"] == pytest.approx(input_scale(caffe_root, LENET_NET, pb2)), model


def test_the_autoencoders_two_test_nets_are_in_the_metrics(autoencoder, caffe_root: Path) -> None:
    done, run_dir = autoencoder
    out = succeeded(done)
    for net in (0, 1):
        iteration, figures = summary(out, f"test #{net}:")
        assert iteration == 30
        assert set(figures) == {"cross_entropy_loss", "l2_error"}, out  # the net's two loss tops
    assert not any(line.startswith("final test:") for line in out.splitlines())
    assert "(deploy:" not in out  # an autoencoder is no classifier: no deploy net was derived
    assert not (run_dir / "deploy.prototxt").exists()

    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert sorted(metrics["test"]) == ["0", "1"]
    for net in ("0", "1"):
        assert [row["NumIters"] for row in metrics["test"][net]] == [0, 30]
        assert all({"cross_entropy_loss", "l2_error"} <= set(row) for row in metrics["test"][net])
    with open(run_dir / "metrics.csv", newline="") as f:
        tests = [row for row in csv.DictReader(f) if row["phase"] == "test"]
    assert sorted((row["net"], row["NumIters"]) for row in tests) == [("0", "0"), ("0", "30"), ("1", "0"),
                                                                      ("1", "30")]
    assert all(row["cross_entropy_loss"] and row["l2_error"] for row in tests)
    m = manifest(run_dir)
    assert m["final"]["test0"]["NumIters"] == m["final"]["test1"]["NumIters"] == 30
    mnist = caffe_root.resolve() / "examples/mnist"
    assert set(m["project"]["files_sha256"]) >= {str(mnist / "mnist_autoencoder_solver.prototxt"),
                                                 str(mnist / "mnist_autoencoder.prototxt")}


def test_train_test_tests_every_test_net_of_the_solver(autoencoder, tmp_path: Path) -> None:
    done, run_dir = autoencoder
    succeeded(done)
    final = manifest(run_dir)["final"]
    out = succeeded(caffetool("train.test", "--run", str(run_dir), cwd=tmp_path))
    printed = {}
    for line in out.splitlines():
        m = re.fullmatch(r"caffe test on mnist_autoencoder_iter_30\.caffemodel, test net #(\d), 3 batches: (.*)", line)
        assert m, out
        printed[int(m.group(1))] = {k: float(v) for k, v in (pair.rsplit(" ", 1) for pair in m.group(2).split(", "))}
    assert sorted(printed) == [0, 1], out
    records = manifest(run_dir)["tests"][-2:]
    assert [(r["net"], r["batches"]) for r in records] == [(0, 3), (1, 3)]
    for r in records:
        assert r["weights"].endswith("snapshots/mnist_autoencoder_iter_30.caffemodel")
        assert set(r["outputs"]) == {"cross_entropy_loss", "l2_error"}
        assert {k: round(v, 4) for k, v in r["outputs"].items()} == printed[r["net"]]
        # the same weights, net and batches as the run's own final test, which `caffe test` measured too
        assert final["measured_by"][f"test{r['net']}"] == "caffe test"
        for key, value in r["outputs"].items():
            assert value == pytest.approx(final[f"test{r['net']}"][key], rel=1e-4)
    # test-on-train and test-on-test read different databases: the two nets are not one net twice
    assert records[0]["outputs"] != records[1]["outputs"]


def test_deploy_and_labels_given_by_the_user(caffe, fashion_data, caffe_root: Path, tmp_path: Path) -> None:
    pb2 = caffe.proto.caffe_pb2
    names = tmp_path / "names.txt"
    names.write_text("".join(f"{name}\n" for name in FASHION_MNIST.classes))
    before = folder_state(caffe_root)
    runs = tmp_path / "runs"
    out = succeeded(caffetool("train", "--solver", LENET_SOLVER, "--max-iter", "100", "--test-iter", "5",
                              "--deploy", LENET_DEPLOY, "--labels", str(names), "--runs-dir", str(runs),
                              "--name", "named", cwd=caffe_root))
    run_dir = runs / "named"
    assert (run_dir / "deploy.prototxt").read_bytes() == (caffe_root / LENET_DEPLOY).read_bytes()
    assert (run_dir / "labels.txt").read_bytes() == names.read_bytes()
    weights = run_dir / "snapshots/lenet_iter_100.caffemodel"
    assert (f"model:      {weights} (deploy: {run_dir / 'deploy.prototxt'}, labels: {run_dir / 'labels.txt'})"
            in out.splitlines()), out
    assert folder_state(caffe_root) == before

    pictures = tmp_path / "pictures"
    pictures.mkdir()
    truth = {}
    for i, (data, label) in enumerate(fashion_pngs(fashion_data.db("test"), pb2, 20)):
        (pictures / f"{i:02d}.png").write_bytes(data)
        truth[str(pictures / f"{i:02d}.png")] = FASHION_MNIST.classes[label]
    shown = succeeded(caffetool("demo.classify", str(pictures), "--run", str(run_dir), "--top", "2",
                                cwd=tmp_path))
    answers = {}
    for line in shown.splitlines():
        path, _, ranked = line.partition(": ")
        answers[path] = [pair.rsplit(" ", 1)[0] for pair in ranked.split(", ")]
    assert set(answers) == set(truth), shown
    assert all(len(top) == 2 and set(top) <= set(FASHION_MNIST.classes) for top in answers.values()), shown
    hits = sum(answers[path][0] == name for path, name in truth.items())
    assert hits >= 12, shown
    # every file the run read is on record: the --deploy and --labels files too, as --weights is
    files = manifest(run_dir)["project"]["files_sha256"]
    deploy_file = (caffe_root / LENET_DEPLOY).resolve()
    assert files.get(str(deploy_file)) == sha256_file(deploy_file), "the --deploy file is not checksummed"
    assert files.get(str(names.resolve())) == sha256_file(names), "the --labels file is not checksummed"


def test_a_labels_file_that_is_not_there_is_refused(caffe_root: Path, tmp_path: Path) -> None:
    before = folder_state(caffe_root)
    runs = tmp_path / "runs"
    done = caffetool("train", "--solver", LENET_SOLVER, "--labels", "no/labels.txt", "--runs-dir", str(runs),
                     cwd=caffe_root)
    assert done.returncode == 1, done
    assert done.stderr == "Error: --labels no/labels.txt does not exist\n"
    assert "Traceback" not in done.stdout + done.stderr
    assert not runs.exists()
    assert folder_state(caffe_root) == before


def test_resume_continues_a_solver_run_to_a_higher_max_iter(caffe_root: Path, tmp_path: Path) -> None:
    before = folder_state(caffe_root)
    runs = tmp_path / "runs"
    succeeded(caffetool("train", "--solver", LENET_SOLVER, "--max-iter", "40", "--test-iter", "5",
                        "--runs-dir", str(runs), "--name", "short", cwd=caffe_root))
    run_dir = runs / "short"
    out = succeeded(caffetool("train.resume", "--run", str(run_dir), "--max-iter", "70", cwd=tmp_path))
    assert "resuming short from lenet_iter_40.solverstate up to iteration 70" in out.splitlines()
    iteration, figures = summary(out, "final test:")
    assert iteration == 70 and 0.0 < figures["accuracy"] <= 1.0
    assert "Resuming from " in (run_dir / "caffe.log").read_text()
    m = manifest(run_dir)
    assert m["status"] == "finished" and m["iterations"] == 70
    assert m["final"]["test0"]["NumIters"] == 70
    assert m["resumes"][-1]["from"] == "snapshots/lenet_iter_40.solverstate"
    assert sorted(p.name for p in (run_dir / "snapshots").glob("*.caffemodel")) == [
        "lenet_iter_40.caffemodel", "lenet_iter_70.caffemodel"]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["test"]["0"][-1]["NumIters"] == 70
    assert max(row["NumIters"] for row in metrics["train"]) <= 70
    assert folder_state(caffe_root) == before


def test_resume_continues_an_interrupted_solver_run(caffe_root: Path, tmp_path: Path) -> None:
    before = folder_state(caffe_root)
    run_dir = tmp_path / "runs/cut"
    argv = [str(CAFFETOOL), "train", "--solver", LENET_SOLVER, "--max-iter", "5000", "--test-iter", "5",
            "--display", "20", "--runs-dir", str(run_dir.parent), "--name", "cut"]
    with process_group(argv, caffe_root, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as child:
        deadline = time.monotonic() + 120
        log = run_dir / "caffe.log"
        while not (log.is_file() and re.search(r"\] Iteration 60 \(", log.read_text(errors="replace"))):
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, "caffe did not reach iteration 60"
            time.sleep(0.1)
        os.killpg(child.pid, signal.SIGINT)  # Ctrl-C at the terminal
        out, err = child.communicate(timeout=120)
    assert child.returncode == 130, out + err
    m = manifest(run_dir)
    assert m["status"] == "interrupted"
    cut = m["iterations"]
    assert 60 <= cut < 5000
    state = run_dir / f"snapshots/lenet_iter_{cut}.solverstate"  # the solver's snapshot_prefix is absolute
    assert state.is_file()
    assert f"status:     interrupted — interrupted at iteration {cut} (snapshot {state}); " in out, out
    assert "last test:  iteration 0: accuracy" in out and "final test:" not in out  # BVLC tests every 500

    out = succeeded(caffetool("train.resume", "--run", str(run_dir), "--max-iter", str(cut + 30), cwd=tmp_path))
    assert f"resuming cut from lenet_iter_{cut}.solverstate up to iteration {cut + 30}" in out.splitlines()
    iteration, figures = summary(out, "final test:")
    assert iteration == cut + 30 and 0.0 < figures["accuracy"] <= 1.0
    m = manifest(run_dir)
    assert m["status"] == "finished" and m["iterations"] == cut + 30
    assert m["final"]["test0"]["NumIters"] == cut + 30
    assert (run_dir / f"snapshots/lenet_iter_{cut + 30}.caffemodel").is_file()
    assert folder_state(caffe_root) == before


PYTHON_NET = """name: "py"
layer {{ name: "data" type: "Python" top: "data" top: "label"
        python_param {{ module: "{module}" layer: "Noise" }} }}
layer {{ name: "ip" type: "InnerProduct" bottom: "data" top: "ip" inner_product_param {{ num_output: 2 }} }}
layer {{ name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }}
"""
RAISES_IN_SETUP = """import caffe


class Noise(caffe.Layer):
    def setup(self, bottom, top):
        raise ValueError("param_str must name a folder")
"""
LENET_BY_PATH = 'net: "{root}/examples/mnist/lenet_train_test.prototxt"\n'
SOLVER_TAIL = 'test_iter: 5\ntest_interval: 50\nbase_lr: 0.01\nlr_policy: "fixed"\nmax_iter: {max_iter}\n'

# (solver text, extra flags, the error after "Error: "); {root} the Caffe root, {solver} the solver,
# {tmp} the test's folder.
BAD_SOLVERS = [
    (LENET_BY_PATH + 'train_net: "{root}/examples/mnist/lenet_train_test.prototxt"\n' + SOLVER_TAIL, [],
     "the solver sets net and train_net; Caffe trains exactly one net and refuses a solver with more than one of "
     "net, net_param, train_net, train_net_param: keep one"),
    (LENET_BY_PATH + SOLVER_TAIL.replace("{max_iter}", "0"), [],
     "{solver}: max_iter 0 trains nothing; set max_iter (or --max-iter) to the iterations to train, 1 or more"),
    (LENET_BY_PATH + SOLVER_TAIL.replace("test_iter: 5", "test_iter: 1000000000"), [],
     "{solver}: test_iter 1000000000 (test net #0): 1,000,000,000 test batches of 100 read the 10,000 test "
     "records 10,000,000 times at every test, and the run would sit at its test; the whole test set is test_iter 100"),
    (LENET_BY_PATH + SOLVER_TAIL, ["--deploy", "{solver}"],
     "--deploy {solver} is a solver prototxt, not a net; give a net here"),
    (LENET_BY_PATH + SOLVER_TAIL, ["--model", "lenet"],
     "--solver trains the net and data its file names, so --model would be ignored: drop --model (or --solver)"),
    (LENET_BY_PATH + SOLVER_TAIL, ["--dataset", "fashion-mnist", "--model", "lenet"],
     "--solver trains the net and data its file names, so --model and --dataset would be ignored: drop --model "
     "and --dataset (or --solver)"),
    ('net: "{tmp}/py.prototxt"\n' + SOLVER_TAIL.replace("test_iter: 5\ntest_interval: 50\n", ""), [],
     "the Python layer 'data' in {tmp}/py.prototxt needs module 'no_such_layers', which cannot be imported "
     "(ModuleNotFoundError: No module named 'no_such_layers'); put the module's folder on PYTHONPATH, or correct "
     "the layer's python_param.module"),
]


@pytest.mark.parametrize("text,flags,message", BAD_SOLVERS, ids=["two nets", "max_iter 0", "test_iter 1e9",
                                                                 "deploy is a solver", "model", "model and dataset",
                                                                 "python module"])
def test_a_solver_caffe_would_refuse_or_run_uselessly_is_named_first(text, flags, message, caffe_root: Path,
                                                                     tmp_path: Path) -> None:
    before = folder_state(caffe_root)
    solver = tmp_path / "solver.prototxt"
    fill = {"root": caffe_root, "solver": solver, "tmp": tmp_path}
    solver.write_text(text.format(max_iter=20, **fill))
    (tmp_path / "py.prototxt").write_text(PYTHON_NET.format(module="no_such_layers"))
    runs = tmp_path / "runs"
    done = caffetool("train", "--solver", str(solver), "--runs-dir", str(runs),
                     *[f.format(**fill) for f in flags], cwd=caffe_root)
    assert (done.returncode, done.stderr) == (1, f"Error: {message.format(**fill)}\n"), done
    assert not runs.exists() and folder_state(caffe_root) == before


def test_labels_and_deploy_go_with_a_solver(caffe_root: Path, tmp_path: Path) -> None:
    done = caffetool("train", "--labels", str(tmp_path), "--runs-dir", str(tmp_path / "runs"), cwd=caffe_root)
    assert (done.returncode, done.stderr) == (1, "Error: --labels go with --solver; a run of --model writes its own "
                                                 "deploy net and takes its data set's labels\n")


def test_a_net_given_as_the_solver_is_named(caffe_root: Path, tmp_path: Path) -> None:
    done = caffetool("train", "--solver", LENET_NET, "--runs-dir", str(tmp_path / "runs"), cwd=caffe_root)
    assert (done.returncode, done.stderr) == (1, f"Error: --solver {(caffe_root / LENET_NET).resolve()} is a net "
                                                 "prototxt, not a solver; give a solver here\n")


def test_a_python_layer_that_raises_keeps_the_failed_run_and_names_the_exception(caffe_root: Path,
                                                                                 tmp_path: Path) -> None:
    (tmp_path / "layers").mkdir()
    (tmp_path / "layers" / "raising_layers.py").write_text(RAISES_IN_SETUP)
    (tmp_path / "py.prototxt").write_text(PYTHON_NET.format(module="raising_layers"))
    solver = tmp_path / "solver.prototxt"
    solver.write_text(f'net: "{tmp_path}/py.prototxt"\nbase_lr: 0.01\nlr_policy: "fixed"\nmax_iter: 10\n')
    runs = tmp_path / "runs"
    argv = [str(CAFFETOOL), "train", "--solver", str(solver), "--runs-dir", str(runs), "--name", "py"]
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "layers")}
    done = subprocess.run(argv, cwd=caffe_root, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done
    assert done.stderr.startswith("Error: a Python layer raised ValueError: param_str must name a folder (Caffe "
                                  "aborted: killed by SIGABRT); put the layer's module on PYTHONPATH, or correct "
                                  "its python_param"), done.stderr
    assert "@ 0x" not in done.stderr and f"the run's record and caffe.log are in {runs / 'py'}" in done.stderr
    record = manifest(runs / "py")
    assert record["status"] == "failed" and "ValueError: param_str must name a folder" in record["message"]
    assert "boost::python::error_already_set" in (runs / "py" / "caffe.log").read_text()  # Caffe's, as it wrote it


NOISE_LAYER = """import caffe
import numpy as np


class Noise(caffe.Layer):
    def setup(self, bottom, top):
        self.rng = np.random.default_rng(0)

    def reshape(self, bottom, top):
        top[0].reshape(4, 3)
        top[1].reshape(4)

    def forward(self, bottom, top):
        top[0].data[...] = self.rng.normal(size=(4, 3))
        top[1].data[...] = self.rng.integers(0, 2, size=4)

    def backward(self, top, propagate_down, bottom):
        pass
"""


def test_a_python_layer_imports_caffe_and_numpy_inside_caffe_train(caffe_root: Path, tmp_path: Path) -> None:
    """libcaffe embeds the system's Python: the run gives it pycaffe and this environment's packages."""
    (tmp_path / "layers").mkdir()
    (tmp_path / "layers" / "noise_layers.py").write_text(NOISE_LAYER)
    (tmp_path / "py.prototxt").write_text(PYTHON_NET.format(module="noise_layers"))
    solver = tmp_path / "solver.prototxt"
    solver.write_text(f'net: "{tmp_path}/py.prototxt"\nbase_lr: 0.01\nlr_policy: "fixed"\nmax_iter: 10\n'
                      'display: 5\n')
    runs = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "layers")}
    done = subprocess.run([str(CAFFETOOL), "train", "--solver", str(solver), "--runs-dir", str(runs), "--name", "py"],
                          cwd=caffe_root, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert manifest(runs / "py")["status"] == "finished" and manifest(runs / "py")["iterations"] == 10
