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
    from caffetool.nets.solver import SolverOptions
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
    at = result.manifest["iterations"]
    assert at < 3000 and result.manifest["status"] == "stopped early"
    assert "Optimization stopped early." in (result.run_dir / "caffe.log").read_text()
    assert (result.run_dir / "snapshots" / f"lenet_iter_{at}.solverstate").is_file()


def test_bad_params_are_refused_before_ray_starts(tmp_path: Path) -> None:
    done = cli("sweep", "--param", "base_lr=0.01", "--param", "momentum=0,0.9", "--type", "Adam",
               "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr == ("Error: the trial with base_lr=0.01, momentum=0.0 would be refused: --type Adam needs --momentum above 0 "
                           "(Caffe's example uses 0.9)\n")
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
    for row in rows:
        run_dir = sweep_dir / row["trial"]
        m = manifest(run_dir)
        assert m["status"] == row["status"]
        assert m["sweep"]["name"] == "lenet4" and m["sweep"]["trial"] == row["trial"]
        assert {k: str(v) for k, v in m["sweep"]["params"].items()} == {"base_lr": row["base_lr"], "type": row["type"]}
        assert m["sweep"]["host"] and m["sweep"]["node_id"]
        assert m["threads"]["OMP_NUM_THREADS"] == m["threads"]["OPENBLAS_NUM_THREADS"] == "1"
        assert (run_dir / "metrics.csv").is_file() and (run_dir / "plots" / "lr_vs_iters.png").is_file()
        assert list((run_dir / "snapshots").glob("*.solverstate"))
        if m["status"] == "stopped early":
            assert m["iterations"] < 240
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
    assert rows["64"]["status"] == "finished" and rows["64"]["iterations"] == "150"
    assert rows["32"]["status"] == "failed"
    assert "Caffe refused" in rows["32"]["message"] and "count must match" in rows["32"]["message"]
    assert "on node " in rows["32"]["message"]
    assert f"{rows['32']['trial']} failed: " in done.stdout


def test_data_missing_on_a_node_fails_its_trials_naming_the_node(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "net.prototxt").write_text(FIXED_BATCH_NET.format(train=tmp_path / "nowhere" / "train_lmdb",
                                                                 test=tmp_path / "nowhere" / "test_lmdb"))
    (project / "solver.prototxt").write_text(SOLVER)
    done = cli("sweep", "--name", "nodata", "--solver", "solver.prototxt", "--param", "base_lr=0.01,0.02",
               "--runs-dir", str(tmp_path / "runs"), cwd=project)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = results(tmp_path / "runs" / "nodata")
    assert [r["status"] for r in rows] == ["failed", "failed"]
    for row in rows:
        assert row["message"].startswith("on node ")
        assert row["message"].endswith(f"data's source not found: {tmp_path / 'nowhere' / 'train_lmdb'}")
    assert "best: none (no trial measured the metric)" in done.stdout


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
    args = ["sweep", "--name", "cc", "--param", "base_lr=0.001,0.05", "--max-iter", "600", "--test-iter", "5",
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
