"""Real trainings with `caffe train`: the run record, divergence, Ctrl-C and resume, failures."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import cv2
import psutil
import pytest

from caffetool.data import fetch
from caffetool.data.registry import FASHION_MNIST
from caffetool.engine import EngineInfo
from caffetool.errors import ConfigError
from caffetool.nets import solvers
from caffetool.runs import metrics_io, snapshots
from caffetool.runs.logparse import parse_file
from caffetool.backends import devices
from caffetool.train import session

from .conftest import PROJECT
from .processes import stop
from .smalldisk import small_disk

QUICK = {"test-interval": "100", "test-iter": "5", "display": "20"}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    fetch.fetch(FASHION_MNIST, folder, progress=False, say=lambda _: None)
    return folder


def invoke(*args, cwd=PROJECT, **kw):
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=900, **kw)


def flags(**given) -> list[str]:
    """QUICK's flags with ``given`` ones winning (invoke takes each flag once)."""
    merged = {**QUICK, **{k.replace("_", "-"): str(v) for k, v in given.items()}}
    return [part for k, v in merged.items() for part in (f"--{k}", v)]


def train(data_dir, runs, **given):
    return invoke("train", "--data-dir", str(data_dir), "--runs-dir", str(runs), *flags(**given))


@pytest.fixture(scope="module")
def finished_run(engine, data_dir, tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    done = train(data_dir, runs, max_iter=200, name="short")
    assert done.returncode == 0, done.stderr[-2000:]
    return runs / "short", done


def test_run_directory_is_complete(finished_run):
    run, done = finished_run
    names = {p.name for p in run.iterdir()}
    assert {"train_val.prototxt", "solver.prototxt", "deploy.prototxt", "labels.txt", "caffe.log",
            "metrics.csv", "metrics.json", "manifest.json", "snapshots", "plots"} <= names
    assert {p.name for p in (run / "snapshots").iterdir()} == {"lenet_iter_200.caffemodel", "lenet_iter_200.solverstate"}
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "finished" and m["exit_code"] == 0 and m["iterations"] == 200
    assert m["device"]["label"] == "CPU" and m["device"]["flag"] == []
    assert m["engine"]["manifest"]["options"]["cpu_only"] is True
    assert set(m["dataset"]["files"]) == {"train-images", "train-labels", "test-images", "test-labels"}
    assert set(m["timings_s"]) >= {"setup", "training", "testing", "total"}
    assert m["timings_s"]["testing"] > 0 and m["timings_s"]["training"] > 0
    assert m["samples"]["samples"] >= 1 and m["samples"]["rss_peak_mb"] > 10
    assert m["caffetool"]["version"] and "caffe_command" in m and m["host"]["cpus"] >= 1
    assert 0.5 < m["final"]["test0"]["accuracy"] <= 1.0
    assert "status:     finished" in done.stdout
    assert f"model:      {run}/snapshots/lenet_iter_200.caffemodel" in done.stdout


def test_metrics_match_the_log(finished_run):
    run, _ = finished_run
    from_log = metrics_io.as_json(parse_file(run / "caffe.log"))
    written = json.loads((run / "metrics.json").read_text())
    assert written["train"] == from_log["train"]
    assert written["test"] == from_log["test"]
    csv_rows = (run / "metrics.csv").read_text().splitlines()
    assert len(csv_rows) == 1 + len(from_log["train"]) + len(from_log["test"]["0"])
    assert [r["NumIters"] for r in written["test"]["0"]] == [0, 100, 200]


def test_plots_are_valid_pngs(finished_run):
    run, _ = finished_run
    pngs = sorted((run / "plots").glob("*.png"))
    assert [p.name for p in pngs] == ["loss_accuracy_vs_iters.png", "loss_accuracy_vs_seconds.png", "lr_vs_iters.png"]
    for png in pngs:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert cv2.imread(str(png)).shape[1] == 800


def test_caffe_test_records_accuracy(finished_run, data_dir):
    run, _ = finished_run
    done = invoke("train.test", str(run))
    assert done.returncode == 0, done.stderr
    assert "caffe test on lenet_iter_200.caffemodel, 5 batches: accuracy" in done.stdout  # the solver's test_iter
    done = invoke("train.test", str(run), "--iterations", "100")
    assert "caffe test on lenet_iter_200.caffemodel, 100 batches: accuracy" in done.stdout
    tests = json.loads((run / "manifest.json").read_text())["tests"]
    assert 0.5 < tests[-1]["outputs"]["accuracy"] <= 1.0 and tests[-1]["outputs"]["loss"] > 0


def test_report_compares_runs(finished_run, data_dir, tmp_path):
    run, _ = finished_run
    out = tmp_path / "reports"
    done = invoke("train.report", f"{run},{run}", "--out", str(out))
    assert done.returncode == 0, done.stderr
    header, first, second = done.stdout.splitlines()[:3]
    assert header.split()[:2] == ["run", "device(s)"]
    assert first.split()[0] == "short" and first.rstrip().endswith("1.00x")
    md = next(out.glob("*.md")).read_text()
    assert md.startswith("| run | device(s) | iterations |") and "| short | CPU | 200 |" in md
    assert cv2.imread(str(next(out.glob("*.png")))) is not None


def test_parse_any_log(finished_run, tmp_path):
    run, _ = finished_run
    done = invoke("train.parse", str(run / "caffe.log"), "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("LeNet: 11 train rows, net #0: 3 tests; finished")
    assert (tmp_path / "caffe.metrics.csv").exists() and (tmp_path / "caffe.metrics.json").exists()


@pytest.mark.engine
def test_time_shows_layers_by_cost():
    done = invoke("train.time", "--model", "lenet", "--batch-size", "16", "--iterations", "3")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("lenet, batch 16, CPU, 3 iterations: forward ")
    shares = [float(line.split()[-1].rstrip("%")) for line in lines[2:]]
    assert shares == sorted(shares, reverse=True) and {ln.split()[0] for ln in lines[2:]} >= {"conv1", "conv2", "ip1"}


@pytest.mark.engine
def test_nan_loss_stops_the_run_with_a_hint(data_dir, tmp_path):
    done = train(data_dir, tmp_path, max_iter=5000, base_lr="1e8", display=1, name="nan")
    assert done.returncode == 1
    assert "status:     diverged — the loss became NaN or infinite at iteration" in done.stdout
    assert "Lower the learning rate (--base-lr)" in done.stdout
    m = json.loads((tmp_path / "nan" / "manifest.json").read_text())
    assert m["status"] == "diverged" and m["iterations"] < 1000


def _wait_for(path, text, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise AssertionError(f"{text!r} never appeared in {path}")


def test_sigint_snapshots_and_resume_continues_from_there(data_dir, tmp_path, caffe):
    child = subprocess.Popen([sys.executable, "-m", "invoke", "train", "--data-dir", str(data_dir),
                              "--runs-dir", str(tmp_path), *flags(max_iter=100000, name="stop")],
                             cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(tmp_path / "stop" / "caffe.log", "Iteration 140,")
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=120)
    finally:
        stop(child, grace=0)
    assert child.returncode == 130, err[-1500:]
    run = tmp_path / "stop"
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "interrupted"
    stopped_at = snapshots.newest_complete(run, caffe.proto.caffe_pb2).iteration
    assert stopped_at >= 140 and f"interrupted at iteration {stopped_at}" in out
    done = invoke("train.resume", "stop", "--runs-dir", str(tmp_path), "--max-iter", str(stopped_at + 40))
    assert done.returncode == 0, done.stderr[-1500:]
    log = (run / "caffe.log").read_text()
    assert f"Resuming from snapshots/lenet_iter_{stopped_at}.solverstate" in log
    metrics = parse_file(run / "caffe.log")
    assert metrics.iteration == stopped_at + 40
    iters = [r["NumIters"] for r in metrics.train]
    assert iters == sorted(iters)
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "finished" and m["resumes"][0]["from"] == f"snapshots/lenet_iter_{stopped_at}.solverstate"


@pytest.mark.engine
def test_a_test_while_the_run_trains_keeps_both_records(data_dir, tmp_path):
    """``train.test`` on a live run adds its record to the manifest on disk; the trainer's later
    writes keep it, and the test's write keeps the trainer's figures (no stale copy written back)."""
    child = subprocess.Popen([sys.executable, "-m", "invoke", "train", "--data-dir", str(data_dir),
                              "--runs-dir", str(tmp_path), *flags(max_iter=100000, snapshot=50, name="live")],
                             cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run = tmp_path / "live"
    try:
        _wait_for(run / "caffe.log", "Iteration 80,")
        done = invoke("train.test", "live", "--runs-dir", str(tmp_path), "--iterations", "2")
        assert done.returncode == 0, done.stderr[-1500:]
        assert child.poll() is None, "the run ended before its test did"
        assert [t["batches"] for t in json.loads((run / "manifest.json").read_text())["tests"]] == [2]
        child.send_signal(signal.SIGINT)
        child.communicate(timeout=120)
    finally:
        stop(child, grace=0)
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "interrupted" and m["iterations"] >= 50
    assert [t["batches"] for t in m["tests"]] == [2]


@pytest.mark.engine
def test_missing_lmdb_is_reported_and_nothing_deleted(data_dir, tmp_path):
    done = train(data_dir, tmp_path, max_iter=20, name="gone")
    assert done.returncode == 0, done.stderr[-1500:]
    lmdb_dir = data_dir / "fashion-mnist" / "train_lmdb"
    lmdb_dir.rename(lmdb_dir.with_name("moved"))
    try:
        done = invoke("train.resume", "gone", "--runs-dir", str(tmp_path), "--max-iter", "40")
    finally:
        lmdb_dir.with_name("moved").rename(lmdb_dir)
    assert done.returncode == 1
    assert "status:     failed — Caffe stopped: Check failed: mdb_status == 0 (2 vs. 0) No such file or directory" in done.stdout
    assert "last log lines:" in done.stdout
    assert json.loads((tmp_path / "gone" / "manifest.json").read_text())["status"] == "failed"
    assert (tmp_path / "gone" / "snapshots" / "lenet_iter_20.caffemodel").exists()


@pytest.mark.engine
def test_gpu_request_on_a_cpu_engine_is_refused_before_anything(data_dir, tmp_path):
    done = train(data_dir, tmp_path, gpu="all", name="gpu")
    assert done.returncode == 1
    assert done.stderr.startswith("Error: --gpu all asks for GPUs, but the engine at ")
    assert "was built CPU-only; rebuild it with `caffetool engine.install --cuda --nccl --force`" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_existing_run_name_is_refused(finished_run, data_dir):
    run, _ = finished_run
    done = train(data_dir, run.parent, name="short", max_iter=10)
    assert done.returncode == 1
    assert f"Error: run {run} already exists; choose another --name" in done.stderr


# GPUs cannot exist on these machines: the engines below are stand-ins (EngineInfo values with a
# CUDA manifest and made-up `nvidia-smi -L` lines) used only to check the -gpu flag Caffe gets.
def stand_in_engine(tmp_path, gpus: int, nccl: bool) -> EngineInfo:
    return EngineInfo(prefix=tmp_path, tools={}, python_path=tmp_path,
                      manifest={"options": {"cpu_only": False, "use_nccl": nccl}},
                      gpus=[f"GPU {i}: Tesla M40 (UUID: GPU-{i})" for i in range(gpus)])


def test_gpu_flags_for_cuda_engines(tmp_path):
    four = stand_in_engine(tmp_path, 4, nccl=True)
    assert devices.choose(four).flag == ["-gpu", "all"]
    assert devices.choose(four).label == "GPU 0,1,2,3 (4 x Tesla M40)"
    assert devices.choose(four, "0,2").flag == ["-gpu", "0,2"]
    assert devices.choose(four, "cpu").flag == []
    no_nccl = stand_in_engine(tmp_path, 4, nccl=False)
    assert devices.choose(no_nccl).flag == ["-gpu", "0"]  # auto picks one GPU rather than fail
    with pytest.raises(ConfigError, match="needs multi-GPU training, which this engine lacks"):
        devices.choose(no_nccl, "all")
    with pytest.raises(ConfigError, match=r"--gpu 5: 4 GPU\(s\) visible"):
        devices.choose(four, "5")


def test_a_gpu_the_engine_has_no_kernels_for_is_refused_before_training(tmp_path, monkeypatch):
    """The stand-in engine records sm_90 and PTX 9.0; NVML's answer is a stand-in too (two Tesla
    M40s of compute capability 5.2, then a newer card)."""
    from caffetool.engine import cudaarch

    engine = stand_in_engine(tmp_path, 2, nccl=True)
    engine.manifest.update(device_code={"sm": ["90"], "ptx": ["90"]})
    engine.manifest["options"].update(use_cudnn=True)
    monkeypatch.setattr(cudaarch, "nvml_cards", lambda: [("Tesla M40", (5, 2))] * 2)
    fix = '`caffetool engine.install --cuda --cudnn --nccl --cuda-arch "90 52" --force`'
    for choose in (lambda: devices.choose(engine, "all"), lambda: devices.for_pycaffe(engine, "1")):
        with pytest.raises(ConfigError, match=re.escape(f"compute capability 5.2) cannot run the engine at {tmp_path}: "
                                                        f"it carries code for sm_90, PTX 9.0; rebuild it with {fix}")):
            choose()
    monkeypatch.setattr(cudaarch, "nvml_cards", lambda: [("NVIDIA B200", (10, 0))] * 2)
    chosen = devices.choose(engine, "0")
    assert chosen.flag == ["-gpu", "0"] and chosen.notice.startswith(
        "GPU 0 (NVIDIA B200, compute capability 10.0) runs the engine at")


class StandInPycaffe:
    """pycaffe's mode calls, recorded: a GPU to switch to cannot exist on these machines."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def set_mode_cpu(self) -> None:
        self.calls.append(("cpu",))

    def set_mode_gpu(self) -> None:
        self.calls.append(("gpu",))

    def set_device(self, gpu: int) -> None:
        self.calls.append(("device", gpu))


def test_pycaffe_runs_on_one_named_gpu_or_the_cpu(tmp_path):
    two = stand_in_engine(tmp_path, 2, nccl=True)
    assert devices.for_pycaffe(two, "cpu") is devices.CPU and devices.for_pycaffe(two, None) is devices.CPU
    one = devices.for_pycaffe(two, "1")
    assert (one.gpu, one.label, one.flag) == (1, "GPU 1 (Tesla M40)", ["-gpu", "1"])
    assert devices.for_pycaffe(two, "auto").gpu == 0
    assert devices.for_pycaffe(stand_in_engine(tmp_path, 0, nccl=True), "auto") is devices.CPU
    for request, why in (("all", "pycaffe runs a net on one device"), ("0,1", "pycaffe runs a net on one device"),
                         ("2", r"--gpu 2: 2 GPU\(s\) visible")):
        with pytest.raises(ConfigError, match=why):
            devices.for_pycaffe(two, request)
    pycaffe = StandInPycaffe()
    one.activate(pycaffe)
    devices.CPU.activate(pycaffe)
    assert pycaffe.calls == [("gpu",), ("device", 1), ("cpu",)]


def test_pycaffe_gpu_on_a_cpu_engine_is_refused(engine):
    with pytest.raises(ConfigError, match=r"--gpu 0 asks for a GPU, but the engine at .* was built CPU-only; "
                                          r"rebuild it with `caffetool engine.install --cuda --force`"):
        devices.for_pycaffe(engine, "0")


def test_caffe_train_command(engine):
    from caffetool.train.runner import caffe_train_argv

    assert caffe_train_argv(engine, "solver.prototxt", ["-gpu", "all"], weights="/w.caffemodel") == [
        str(engine.caffe), "train", "-solver=solver.prototxt", "-sigint_effect=snapshot",
        "-sighup_effect=stop", "-weights=/w.caffemodel", "-gpu=all"]


@pytest.mark.engine
def test_invalid_run_name(data_dir, tmp_path):
    done = train(data_dir, tmp_path, name="../escape")
    assert done.returncode == 1 and "--name '../escape' must be letters, digits" in done.stderr
    assert not (tmp_path.parent / "escape").exists()


@pytest.mark.engine
def test_solver_options_reach_the_run(data_dir, tmp_path):
    request = session.TrainRequest(dataset="fashion-mnist", data_dir=data_dir, runs_dir=tmp_path, name="adam",
                                   options=solvers.SolverOptions(type="Adam", max_iter=20, test_interval=20,
                                                                test_iter=2, display=10))
    from caffetool.engine import locate

    result = session.train(locate(), request, say=lambda _: None, progress=False)
    assert result.outcome.status == "finished"
    assert 'type: "Adam"' in (tmp_path / "adam" / "solver.prototxt").read_text()
    assert os.path.exists(tmp_path / "adam" / "snapshots" / "lenet_iter_20.solverstate")


def test_weights_of_another_net_are_refused_and_leave_no_run(data_dir, tmp_path, caffe):
    weights = caffe.proto.caffe_pb2.NetParameter()
    weights.layer.add(name="conv1").blobs.add().shape.dim.append(3)  # conv1 has 20x1x5x5 weights
    bad = tmp_path / "wrong-shape.caffemodel"
    bad.write_bytes(weights.SerializeToString())
    runs = tmp_path / "runs"
    done = train(data_dir, runs, weights=str(bad), name="refused", max_iter=10)
    assert done.returncode == 1
    assert done.stderr == (f"Error: --weights {bad}: layer 'conv1' holds 1 blob(s), the net's layer of that name "
                           "has 2; these weights are for another net\n")
    assert not runs.exists() or list(runs.iterdir()) == []


@pytest.mark.engine
def test_progress_lines_while_training_when_output_is_not_a_terminal(data_dir, tmp_path):
    """CI, nohup, a log file: no bar is drawn there, so a plain line comes every 5% as training goes."""
    child = subprocess.Popen([sys.executable, "-m", "invoke", "train", "--data-dir", str(data_dir),
                              "--runs-dir", str(tmp_path), *flags(max_iter=200, display=10, name="lines")],
                             cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen = [(line.rstrip("\n"), child.poll() is None) for line in child.stdout]
        child.wait(60)
    finally:
        stop(child, grace=0)
    assert child.returncode == 0, child.stderr.read()[-1500:]
    progress = [(line, running) for line, running in seen if line.startswith("iteration ")]
    heads = [line.split(":")[0] for line, _ in progress]
    assert heads == [f"iteration {i}/200 ({i / 200:.0%})" for i in range(10, 201, 10)]
    assert progress[0][1], "the first line came only after training ended"
    assert re.fullmatch(r"iteration 200/200 \(100%\): loss [\d.]+, test accuracy [\d.]+, [\d.]+ it/s, ETA 00:00",
                        progress[-1][0])


def _process_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_sigkill_of_train_takes_caffe_along_and_the_run_is_resumed(data_dir, tmp_path, caffe):
    """Caffe logs nothing between snapshots here: unkilled, it would train on for seconds unseen."""
    child = subprocess.Popen([sys.executable, "-m", "invoke", "train", "--data-dir", str(data_dir),
                              "--runs-dir", str(tmp_path), *flags(max_iter=100000, snapshot=300, display=100000,
                                                                  test_interval=100000, name="killed")],
                             cwd=PROJECT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run = tmp_path / "killed"
    try:
        _wait_for_complete_snapshot(run, caffe.proto.caffe_pb2, 300)
        caffes = [p.pid for p in psutil.Process(child.pid).children() if p.name() == "caffe"]
        assert len(caffes) == 1
        child.kill()
        child.wait()
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and not _process_gone(caffes[0]):
            time.sleep(0.05)
        assert _process_gone(caffes[0]), "caffe trains on without the process that records it"
    finally:
        stop(child, grace=0)
    assert json.loads((run / "manifest.json").read_text())["status"] == "running"  # nobody could say otherwise
    done = invoke("train.report", "killed", "--runs-dir", str(tmp_path), "--out", str(tmp_path / "reports"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1].startswith("killed (interrupted)")
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "interrupted" and m["message"].startswith(f"the process that was training it (pid {child.pid})")
    newest = snapshots.newest_complete(run, caffe.proto.caffe_pb2).iteration
    assert newest >= 300
    done = invoke("train.resume", "killed", "--runs-dir", str(tmp_path), "--max-iter", str(newest + 20))
    assert done.returncode == 0, done.stdout[-1500:] + done.stderr[-1500:]
    assert f"Resuming from snapshots/lenet_iter_{newest}.solverstate" in (run / "caffe.log").read_text()
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "finished" and m["iterations"] == newest + 20


def _wait_for_complete_snapshot(run: Path, caffe_pb2: ModuleType, iteration: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = [s for s in snapshots.listing(run) if s.iteration == iteration]
        if done and snapshots.problem(run, done[0], caffe_pb2) is None:
            return
        time.sleep(0.1)
    raise AssertionError(f"no complete snapshot at iteration {iteration} in {run}")


def test_disk_full_fails_the_run_and_resume_skips_the_cut_short_snapshot(data_dir, tmp_path, caffe):
    """Two LeNet snapshots (1.7 MB each file) do not fit on 6 MB: the second is cut short."""
    with small_disk(tmp_path / "disk", "6m") as disk:
        done = train(data_dir, disk, max_iter=30, snapshot=10, display=10, name="full")
        run = disk / "full"
        assert done.returncode == 1, done.stderr[-1500:]
        assert "Traceback" not in done.stderr
        m = json.loads((run / "manifest.json").read_text())
        assert m["status"] == "failed"
        assert "No space left on device" in m["message"] or "SerializeToOstream" in m["message"]
        assert f"status:     failed — {m['message'].splitlines()[0]}" in done.stdout
        cut = snapshots.listing(run)[-1]
        assert cut.iteration == 20 and snapshots.problem(run, cut, caffe.proto.caffe_pb2) is not None
        subprocess.run(["mount", "-o", "remount,size=20m", str(disk)], check=True)  # space freed
        done = invoke("train.resume", "full", "--runs-dir", str(disk))
        assert done.returncode == 0, done.stdout[-1500:] + done.stderr[-1500:]
        assert done.stdout.startswith(f"not resuming from {cut.name}: ")
        assert "resuming full from lenet_iter_10.solverstate up to iteration 30" in done.stdout
        assert "Resuming from snapshots/lenet_iter_10.solverstate" in (run / "caffe.log").read_text()
        m = json.loads((run / "manifest.json").read_text())
        assert m["status"] == "finished" and m["iterations"] == 30


def test_locate_lists_the_gpus_devices_are_chosen_from(engine, tmp_path, monkeypatch):
    """A stand-in ``nvidia-smi`` (no GPU here) shows which calls list GPUs: only those that ask."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: Tesla M40 (UUID: GPU-0)'\necho 'GPU 1: Tesla M40 (UUID: GPU-1)'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    from caffetool.engine import locate

    assert locate(engine.prefix, probe=False).gpus == []
    listed = locate(engine.prefix, probe=False, gpus=True)
    assert listed.gpus == ["GPU 0: Tesla M40 (UUID: GPU-0)", "GPU 1: Tesla M40 (UUID: GPU-1)"]
    assert devices.choose(listed).notice == "training on the CPU: the engine was built CPU-only"
