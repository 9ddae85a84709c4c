"""Sweeps on real Ray and the real engine: ASHA stopping with snapshots, crash isolation, Ctrl-C with
nothing left running and ``sweep.resume``, and a two-node Ray cluster on this machine (loopback).

Trials are tiny (LeNet, a few hundred iterations, 5 test batches) and run with 1 CPU each.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from caffetool.sweep import launch, sweeprecord

CAFFETOOL = Path(sys.executable).parent / "caffetool"
pytestmark = [pytest.mark.slow, pytest.mark.engine]

# A net whose train phase reshapes to a fixed batch of 64: Caffe refuses it at any other batch size.
FIXED_BATCH_NET = """name: "FixedBatch"
layer {{ name: "data" type: "Data" top: "data" top: "label" include {{ phase: TRAIN }}
  transform_param {{ scale: 0.00390625 }} data_param {{ source: "{train}" batch_size: 64 backend: LMDB }} }}
layer {{ name: "data" type: "Data" top: "data" top: "label" include {{ phase: TEST }}
  transform_param {{ scale: 0.00390625 }} data_param {{ source: "{test}" batch_size: 100 backend: LMDB }} }}
layer {{ name: "flat" type: "Reshape" bottom: "data" top: "flat" include {{ phase: TRAIN }}
  reshape_param {{ shape {{ dim: 64 dim: 784 }} }} }}
layer {{ name: "flat" type: "Reshape" bottom: "data" top: "flat" include {{ phase: TEST }}
  reshape_param {{ shape {{ dim: 0 dim: 784 }} }} }}
layer {{ name: "ip" type: "InnerProduct" bottom: "flat" top: "ip"
  inner_product_param {{ num_output: 10 weight_filler {{ type: "xavier" }} }} }}
layer {{ name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }}
layer {{ name: "accuracy" type: "Accuracy" bottom: "ip" bottom: "label" top: "accuracy" include {{ phase: TEST }} }}
"""
SOLVER = """net: "net.prototxt"
test_iter: 5
test_interval: 50
base_lr: 0.01
lr_policy: "fixed"
momentum: 0.9
display: 50
max_iter: 150
snapshot_prefix: "snap"
"""


def cli(*args: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVOKE_")}
    return subprocess.run([str(CAFFETOOL), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env,
                          stdin=subprocess.DEVNULL)


def results(sweep_dir: Path) -> list[dict]:
    with open(sweep_dir / "results.csv") as f:
        return list(csv.DictReader(f))


def manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def leftovers(root: Path, driver: int | None = None) -> list[str]:
    """Caffe processes working under ``root``, and Ray processes of the session ``driver`` started."""
    found = []
    for p in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            if p.info["name"] == "caffe" and str(root) in p.cwd():
                found.append(f"{p.pid} {cmd}")
            elif driver is not None and f"_{driver}/" in cmd and ("raylet" in cmd or "gcs_server" in cmd):
                found.append(f"{p.pid} {cmd[:120]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_a_stop_request_snapshots_a_run_started_where_sigint_is_blocked(tmp_path: Path, engine, fashion_data) -> None:
    """Ray's worker threads block SIGINT, and a signal mask survives exec: Caffe started from such a
    thread must still get the SIGINT that makes it snapshot, and the run is recorded stopped early."""
    from caffetool.nets.solvers import SolverOptions
    from caffetool.train import runner, session

    stop = runner.StopRequest()
    done: dict = {}

    def on_metrics(m) -> None:
        if m.train:
            stop.set()

    def train() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        request = session.TrainRequest(dataset="fashion-mnist", data_dir=fashion_data.path.parent, runs_dir=tmp_path,
                                       name="stopped", options=SolverOptions(max_iter=3000, test_iter=5, display=20),
                                       gpu="cpu", on_metrics=on_metrics, stop=stop)
        done["result"] = session.train(engine, request, say=lambda _: None, progress=False)

    thread = threading.Thread(target=train)
    thread.start()
    thread.join(120)
    result = done["result"]
    assert result.outcome.status == "stopped early", result.outcome.message
    at = result.manifest.iterations
    assert at < 3000 and result.manifest.status == "stopped early"
    assert "Optimization stopped early." in (result.run_dir / "caffe.log").read_text()
    assert (result.run_dir / "snapshots" / f"lenet_iter_{at}.solverstate").is_file()


def test_a_held_run_waits_for_each_verdict_and_stops_where_it_was_held(tmp_path: Path, engine, fashion_data) -> None:
    """A scheduler's verdict on a row comes while Caffe is stopped: the first hold is let through,
    the second is answered with a stop, and the snapshot is the iteration Caffe was held at."""
    from caffetool.nets.solvers import SolverOptions
    from caffetool.train import runner, session

    stop = runner.StopRequest()
    holds: list[tuple[int, threading.Event]] = []
    seen = threading.Event()

    def on_metrics(m) -> threading.Event | None:
        if len(m.test.get(0, [])) <= len(holds):
            return None
        holds.append((int(m.test[0][-1]["NumIters"]), threading.Event()))
        seen.set()
        return holds[-1][1]

    done: dict = {}

    def train() -> None:
        request = session.TrainRequest(dataset="fashion-mnist", data_dir=fashion_data.path.parent, runs_dir=tmp_path,
                                       name="held", options=SolverOptions(max_iter=3000, test_iter=5, test_interval=100,
                                                                          display=10),
                                       gpu="cpu", on_metrics=on_metrics, stop=stop)
        done["result"] = session.train(engine, request, say=lambda _: None, progress=False)

    def states() -> list[str]:
        return [p.status() for p in psutil.Process().children() if p.name() == "caffe"]

    thread = threading.Thread(target=train)
    thread.start()
    try:
        for expected in (1, 2):
            assert seen.wait(60)
            seen.clear()
            assert len(holds) == expected
            deadline = time.monotonic() + 5
            while states() != [psutil.STATUS_STOPPED] and time.monotonic() < deadline:
                time.sleep(0.05)
            assert states() == [psutil.STATUS_STOPPED], f"held at iteration {holds[-1][0]}"
            time.sleep(1)  # a Caffe not held would train on meanwhile
            if expected == 1:
                holds[-1][1].set()
    finally:
        stop.set()
        for _, event in holds:
            event.set()
        thread.join(120)
    result = done["result"]
    assert result.outcome.status == "stopped early", result.outcome.message
    at = result.manifest.iterations
    assert holds[1][0] <= at <= holds[1][0] + 10, (holds, at)  # it stops where it was held, not later
    assert (result.run_dir / "snapshots" / f"lenet_iter_{at}.solverstate").is_file()


def test_a_sweep_takes_the_cuda_graphs_switch_for_every_trial(tmp_path: Path) -> None:
    """``--no-cuda-graphs`` is one of the solver flags a sweep fixes for its trials
    (tests/test_cuda_graphs_flag.py checks what it writes)."""
    done = cli("sweep", "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "--[no-]cuda-graphs" in done.stdout


def test_bad_params_are_refused_before_ray_starts(tmp_path: Path) -> None:
    done = cli("sweep", "--param", "base_lr=0.01", "--param", "momentum=0,0.9", "--type", "Adam",
               "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr == ("Error: the trial with base_lr=0.01, momentum=0.0 would be refused: --type Adam needs --momentum above 0 "
                           "(Caffe's example uses 0.9)\n")
    typo = cli("sweep", "--param", "base_lr=0.01,0.02", "--metric", "test/acuracy", "--runs-dir", str(tmp_path / "runs"),
               cwd=tmp_path)
    assert (typo.returncode, typo.stderr) == (1, "Error: --metric test/acuracy: test net #0 outputs accuracy, loss, not "
                                                 "'acuracy'\n")
    assert not (tmp_path / "runs").exists()


def test_local_asha_sweep_stops_a_hopeless_trial_with_a_snapshot(tmp_path: Path, fashion_data) -> None:
    runs = tmp_path / "runs"
    proc = subprocess.Popen([str(CAFFETOOL), "sweep", "--name", "lenet4", "--param", "base_lr=0.001,0.05",
                             "--param", "type=SGD,Adam", "--max-iter", "240", "--test-iter", "5", "--scheduler",
                             "asha", "--grace", "40", "--cpus-per-trial", "1", "--data-dir",
                             str(fashion_data.path.parent), "--runs-dir", str(runs)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, out + err
    assert "Traceback" not in out + err
    sweep_dir = runs / "lenet4"
    rows = results(sweep_dir)
    assert len(rows) == 4
    by_status = {r["status"] for r in rows}
    # a hopeless trial may also blow up before ASHA judges it (Adam at 0.05 does on MKL)
    assert by_status <= {"finished", "stopped early", "diverged"} and "stopped early" in by_status, rows
    best = max((r for r in rows if r["test/accuracy"]), key=lambda r: float(r["test/accuracy"]))
    assert f"best: {best['trial']} (test/accuracy {float(best['test/accuracy']):.4f}" in out
    assert leftovers(tmp_path, proc.pid) == []
    assert not [p.name for p in fashion_data.path.parent.iterdir() if p.name.startswith(".")]  # no lock file left
    for row in rows:
        run_dir = sweep_dir / row["trial"]
        m = manifest(run_dir)
        assert m["status"] == row["status"]
        assert m["sweep"]["name"] == "lenet4" and m["sweep"]["trial"] == row["trial"]
        assert {k: str(v) for k, v in m["sweep"]["params"].items()} == {"base_lr": row["base_lr"], "type": row["type"]}
        assert m["sweep"]["host"] and m["sweep"]["node_id"]
        assert m["threads"]["OMP_NUM_THREADS"] == m["threads"]["OPENBLAS_NUM_THREADS"] == "1"
        assert (run_dir / "metrics.csv").is_file() and (run_dir / "plots" / "lr_vs_iters.png").is_file()
        if m["status"] != "diverged":  # a diverged trial is killed at its first NaN, snapshot or not
            assert list((run_dir / "snapshots").glob("*.solverstate"))
        if m["status"] == "stopped early":  # a stop that lands in the last iteration skips only the final test
            assert m["iterations"] <= 240
            assert (run_dir / "snapshots" / f"lenet_iter_{m['iterations']}.solverstate").is_file()
            assert "Optimization stopped early." in (run_dir / "caffe.log").read_text()
    assert (sweep_dir / "plots" / "metric_vs_iterations.png").is_file()
    assert (sweep_dir / "plots" / "metric_vs_base_lr.png").is_file()
    record = json.loads((sweep_dir / "sweep.json").read_text())
    assert record["status"] == "finished" and record["best"] == best["trial"] and len(record["results"]) == 4

    stopped = next(r["trial"] for r in rows if r["status"] == "stopped early")
    resumed = cli("train.resume", stopped, "--runs-dir", str(sweep_dir), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert manifest(sweep_dir / stopped)["status"] == "finished"
    assert manifest(sweep_dir / stopped)["iterations"] == 240

    report = cli("sweep.report", "lenet4", "--runs-dir", str(runs), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    again = {r["trial"]: r for r in results(sweep_dir)}
    assert again[stopped]["status"] == "finished" and again[stopped]["iterations"] == "240"


def test_a_crashing_trial_does_not_stop_the_others(tmp_path: Path, fashion_data) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "net.prototxt").write_text(FIXED_BATCH_NET.format(train=fashion_data.path / "train_lmdb",
                                                                 test=fashion_data.path / "test_lmdb"))
    (project / "solver.prototxt").write_text(SOLVER)
    done = cli("sweep", "--name", "crash", "--solver", "solver.prototxt", "--param", "batch_size=64,32",
               "--runs-dir", str(tmp_path / "runs"), cwd=project)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {r["batch_size"]: r for r in results(tmp_path / "runs" / "crash")}
    assert rows["64"]["status"] == "finished" and rows["64"]["iterations"] == "150", rows
    assert rows["32"]["status"] == "failed"
    assert "Caffe refused" in rows["32"]["message"] and "count must match" in rows["32"]["message"]
    assert "on node " in rows["32"]["message"]
    assert f"{rows['32']['trial']} failed: " in done.stdout


def test_every_trial_failed_is_a_failed_sweep(tmp_path: Path, fashion_data) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "net.prototxt").write_text(FIXED_BATCH_NET.format(train=fashion_data.path / "train_lmdb",
                                                                 test=fashion_data.path / "test_lmdb"))
    (project / "solver.prototxt").write_text(SOLVER)
    done = cli("sweep", "--name", "allfail", "--solver", "solver.prototxt", "--param", "batch_size=32,16",
               "--runs-dir", str(tmp_path / "runs"), cwd=project)
    assert done.returncode == 1, done.stdout + done.stderr
    assert [r["status"] for r in results(tmp_path / "runs" / "allfail")] == ["failed", "failed"]
    assert done.stderr.startswith("Error: every trial of sweep allfail failed (2 of 2); the first: on node ")
    assert "Traceback" not in done.stderr


PYTHON_NET = """name: "py"
layer {{ name: "data" type: "Python" top: "data" top: "label" python_param {{ module: "no_such_layers" layer: "X" }} }}
layer {{ name: "ip" type: "InnerProduct" bottom: "data" top: "ip" inner_product_param {{ num_output: 2 }} }}
layer {{ name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }}
"""


# (solver text, net text, flags, the error after "Error: "); {tmp} the project folder.
BEFORE_RAY = [
    (SOLVER + "learning_rate: 0.1\n", FIXED_BATCH_NET, [],
     "{tmp}/solver.prototxt:10:1: Message type \"caffe.SolverParameter\" has no field named \"learning_rate\"."),
    (SOLVER, FIXED_BATCH_NET.replace("{train}", "{tmp}/nowhere/train_lmdb"), [],
     "data's source not found: {tmp}/nowhere/train_lmdb"),
    (SOLVER, PYTHON_NET, [],
     "the Python layer 'data' in net.prototxt needs module 'no_such_layers', which cannot be imported "
     "(ModuleNotFoundError: No module named 'no_such_layers'); put the module's folder on PYTHONPATH, or correct "
     "the layer's python_param.module"),
    (SOLVER, FIXED_BATCH_NET, ["--cpus-per-trial", "1000"],
     "--cpus-per-trial 1000 is more than this machine's {cpus} CPUs; a trial runs on one machine: give {cpus} or "
     "fewer (or --address a cluster with larger nodes)"),
    (SOLVER, FIXED_BATCH_NET, ["--address", "127.0.0.1:{port}"],
     "cannot reach the Ray cluster at --address 127.0.0.1:{port} (Connection refused); start one with `ray start "
     "--head` (and `ray start --address HEAD:6379` on the other machines)"),
    (SOLVER, FIXED_BATCH_NET, ["--cpus-per-trial", "0"], "--cpus-per-trial must be a number of CPUs above 0 and at "
                                                         "most 1024, got 0.0"),
    (SOLVER, FIXED_BATCH_NET, ["--metric", "test/accuracyy"],
     "--metric test/accuracyy: test net #0 outputs loss, accuracy, not 'accuracyy'"),
    (SOLVER, FIXED_BATCH_NET, ["--metric", "train/accuracy"], "--metric train/accuracy: the train net outputs loss, "
                                                              "not 'accuracy'"),
    (SOLVER, FIXED_BATCH_NET, ["--metric", "test1/accuracy"],
     "--metric test1/accuracy: the trials have one test net: test/OUTPUT (or test0/OUTPUT)"),
    (SOLVER, FIXED_BATCH_NET, ["--tracking-uri", "sqlite:///{tmp}/missing/mlflow.db"],
     "--tracking-uri sqlite:///{tmp}/missing/mlflow.db: the folder {tmp}/missing does not exist; make it, or name a "
     "database in a folder that does"),
]


@pytest.mark.parametrize("solver,net,flags,message", BEFORE_RAY, ids=["unknown field", "missing database",
                                                                      "missing module", "cpus", "address", "no cpus",
                                                                      "metric typo", "train metric", "test net",
                                                                      "store"])
def test_what_every_trial_would_fail_on_is_refused_before_ray_starts(solver, net, flags, message, tmp_path: Path,
                                                                     fashion_data) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    fill = {"tmp": tmp_path, "port": port, "cpus": os.cpu_count(), "train": fashion_data.path / "train_lmdb",
            "test": fashion_data.path / "test_lmdb"}
    (tmp_path / "net.prototxt").write_text(net.format(**fill))
    (tmp_path / "solver.prototxt").write_text(solver)
    started = time.monotonic()
    done = cli("sweep", "--solver", "solver.prototxt", "--param", "base_lr=0.01,0.02", "--runs-dir",
               str(tmp_path / "runs"), *[f.format(**fill) for f in flags], cwd=tmp_path)
    assert (done.returncode, done.stderr) == (1, f"Error: {message.format(**fill)}\n"), done.stdout
    assert not (tmp_path / "runs").exists() and time.monotonic() - started < 30


def test_gpus_are_refused_from_a_cpu_only_engine(tmp_path: Path, engine) -> None:
    if not engine.cpu_only:
        pytest.skip("the engine has CUDA")
    done = cli("sweep", "--param", "base_lr=0.01", "--gpus-per-trial", "1", "--runs-dir", str(tmp_path / "runs"),
               cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr == (f"Error: --gpus-per-trial 1 asks for GPUs, but the engine at {engine.prefix} was built "
                           "CPU-only; use --cpus-per-trial\n")


def test_ctrl_c_snapshots_every_trial_leaves_nothing_and_resume_completes(tmp_path: Path, fashion_data) -> None:
    runs = tmp_path / "runs"
    args = ["sweep", "--name", "cc", "--param", "base_lr=0.001,0.01", "--max-iter", "600", "--test-iter", "5",
            "--data-dir", str(fashion_data.path.parent), "--runs-dir", str(runs)]
    # Its own process group, signalled as a terminal's Ctrl-C signals the foreground group.
    proc = subprocess.Popen([str(CAFFETOOL), *args], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    logs = [runs / "cc" / f"trial-0000{i}" / "caffe.log" for i in range(2)]
    deadline = time.monotonic() + 120
    while not all(log.is_file() and "Iteration 100," in log.read_text() for log in logs):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 130, out + err
    assert "continue:   caffetool sweep.resume cc" in out
    assert leftovers(tmp_path, proc.pid) == []
    for log in logs:
        m = manifest(log.parent)
        assert m["status"] == "interrupted", m["message"]
        assert 100 <= m["iterations"] < 600
        assert (log.parent / "snapshots" / f"lenet_iter_{m['iterations']}.solverstate").is_file()
    assert json.loads((runs / "cc" / "sweep.json").read_text())["status"] == "interrupted"

    resumed = subprocess.Popen([str(CAFFETOOL), "sweep.resume", "cc", "--runs-dir", str(runs)], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = resumed.communicate(timeout=180)
    assert resumed.returncode == 0, out + err
    assert leftovers(tmp_path, resumed.pid) == []
    for log in logs:
        m = manifest(log.parent)
        assert (m["status"], m["iterations"]) == ("finished", 600)
        assert m["resumes"][0]["from"].endswith(".solverstate")
    assert {r["status"] for r in results(runs / "cc")} == {"finished"}


def test_two_node_cluster_places_trials_on_both_nodes(tmp_path: Path, engine, fashion_data) -> None:
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    lines: list[str] = []
    try:
        plan = sweeprecord.Plan(name="two", params=["base_lr=0.001,0.05"], address=cluster.address,
                           fixed={"max_iter": "200", "test_iter": "5"}, data_dir=str(fashion_data.path.parent),
                           cwd=str(tmp_path))
        outcome = launch.start(plan, engine, tmp_path / "runs", say=lines.append)
    finally:
        cluster.shutdown()
    assert any("2 CPUs, 0 GPUs on 2 node(s)" in line for line in lines), lines
    assert outcome.status == "finished"
    assert [t["status"] for t in outcome.trials] == ["finished", "finished"]
    nodes = {manifest(tmp_path / "runs" / "two" / t["trial"])["sweep"]["node_id"] for t in outcome.trials}
    assert len(nodes) == 2
    assert leftovers(tmp_path) == []
    assert [c for c in psutil.Process().children(recursive=True) if "raylet" in " ".join(c.cmdline())] == []


def _started(proc: subprocess.Popen, logs: list[Path], iteration: int) -> list[psutil.Process]:
    """Wait until every trial's Caffe has passed ``iteration``; the sweep's processes then."""
    deadline = time.monotonic() + 150
    while not all(log.is_file() and f"Iteration {iteration}," in log.read_text() for log in logs):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.3)
    return psutil.Process(proc.pid).children(recursive=True)


def test_a_sweep_killed_any_way_leaves_nothing_running_and_resumes(tmp_path: Path, fashion_data) -> None:
    """SIGTERM to the sweep's whole process group (as ``kill -TERM -PGID`` sends it: Ray's daemons
    get it too) and SIGKILL of the sweep: every process it started ends within seconds, and
    ``sweep.resume`` then restarts the trials that had no snapshot and finishes them."""
    runs = tmp_path / "runs"
    args = ["sweep", "--name", "kk", "--param", "base_lr=0.001,0.01", "--max-iter", "400", "--test-iter", "5",
            "--data-dir", str(fashion_data.path.parent), "--runs-dir", str(runs)]
    logs = [runs / "kk" / f"trial-0000{i}" / "caffe.log" for i in range(2)]
    proc = subprocess.Popen([str(CAFFETOOL), *args], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    started = _started(proc, logs, 100)
    assert {"raylet", "gcs_server", "caffe"} <= {p.name() for p in started}
    os.killpg(proc.pid, signal.SIGTERM)
    t0 = time.monotonic()
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 10, out + err
    assert proc.returncode == 130, out + err
    _, alive = psutil.wait_procs(started, timeout=10)
    assert alive == [], alive
    assert json.loads((runs / "kk" / "sweep.json").read_text())["status"] == "interrupted"

    resumed = subprocess.Popen([str(CAFFETOOL), "sweep.resume", "kk", "--runs-dir", str(runs)], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for log in logs:  # the runs restart: a new caffe.log grows from iteration 0
        log.unlink()
    started = _started(resumed, logs, 100)
    resumed.kill()
    resumed.communicate(timeout=30)
    _, alive = psutil.wait_procs(started, timeout=10)
    assert alive == [], [p.name() for p in alive]

    done = cli("sweep.resume", "kk", "--runs-dir", str(runs), cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    for log in logs:
        assert (manifest(log.parent)["status"], manifest(log.parent)["iterations"]) == ("finished", 400)
    assert {r["status"] for r in results(runs / "kk")} == {"finished"}
