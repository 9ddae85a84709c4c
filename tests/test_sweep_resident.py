"""A Ray kept running between sweeps (``caffetool ray.start`` / ``ray.stop``) and a model-based
search on it: a real Ray head started by Ray's own launcher in a Ray folder of the test's own
(``RAY_TMPDIR``), real sweeps attaching to it with ``--address auto``, and Optuna's TPE choosing
trials through Ray Tune."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

CAFFETOOL = Path(sys.executable).parent / "caffetool"
pytestmark = [pytest.mark.slow, pytest.mark.engine]


@pytest.fixture
def ray_folder():
    """A short folder for Ray's sockets (a path past 107 bytes cannot hold one), removed afterwards
    with whatever Ray left in it; the test's Ray is stopped first."""
    folder = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    env = {**_env(), "RAY_TMPDIR": str(folder)}
    yield env
    subprocess.run([str(CAFFETOOL), "ray.stop"], env=env, capture_output=True, timeout=60)
    shutil.rmtree(folder, ignore_errors=True)


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("INVOKE_")}


def cli(*args: str, env: dict, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(CAFFETOOL), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def _daemons(session: Path) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["name", "cmdline"]):
        try:
            if p.info["name"] in ("raylet", "gcs_server") and session.name in " ".join(p.info["cmdline"] or []):
                found.append(p)
        except psutil.Error:
            continue
    return found


def test_sweeps_attach_to_a_running_ray_and_leave_it_running(tmp_path: Path, fashion_data, ray_folder) -> None:
    refused = cli("sweep", "--address", "auto", "--param", "base_lr=0.01,0.02", cwd=tmp_path, env=ray_folder)
    assert refused.returncode == 1 and "Traceback" not in refused.stdout + refused.stderr
    assert refused.stderr.strip() == ("Error: --address auto: no Ray runs on this machine; start one with `caffetool "
                                      "ray.start` (or leave out --address: the sweep then starts a Ray of its own)")

    started = cli("ray.start", "--cpus", "2", cwd=tmp_path, env=ray_folder)
    assert started.returncode == 0, started.stderr
    session = (Path(ray_folder["RAY_TMPDIR"]) / "ray" / "session_latest").resolve()
    daemons = _daemons(session)
    assert {p.name() for p in daemons} == {"raylet", "gcs_server"}
    again = cli("ray.start", cwd=tmp_path, env=ray_folder)
    assert again.returncode == 0 and "Ray already runs here" in again.stdout
    assert _daemons(session) == daemons  # the same Ray, not a second one

    runs = tmp_path / "runs"
    # Rates up to 1e-2: TPE's later draws depend on which of the first two trials reported first, and Adam
    # at a rate near 1e-1 may take LeNet's loss to NaN within the 60 iterations (a diverged trial).
    args = ["sweep", "--address", "auto", "--param", "base_lr=log:1e-3..1e-2", "--param", "type=SGD,Adam",
            "--search", "optuna", "--samples", "4", "--seed", "5", "--max-concurrent", "2", "--max-iter", "60",
            "--test-iter", "2", "--cpus-per-trial", "1", "--data-dir", str(fashion_data.path.parent), "--runs-dir",
            str(runs)]
    first = cli(*args, "--name", "tpe1", cwd=tmp_path, env=ray_folder)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "Traceback" not in first.stdout + first.stderr
    assert "(left running)" in first.stdout
    assert "4 trial(s) of lenet on fashion-mnist" in first.stdout and "Optuna TPE (2 random first, seed 5)" in first.stdout
    assert all(p.is_running() for p in daemons), "the sweep stopped the Ray it attached to"
    rows = _rows(runs / "tpe1")
    assert sorted(r["trial"] for r in rows) == [f"trial-{i:05d}" for i in range(4)]
    made_by = {r["trial"]: r["search"] for r in rows}
    assert made_by == {"trial-00000": "optuna random start", "trial-00001": "optuna random start",
                       "trial-00002": "optuna TPE", "trial-00003": "optuna TPE"}
    assert all(r["status"] == "finished" and 1e-3 <= float(r["base_lr"]) <= 1e-2 and r["type"] in ("SGD", "Adam")
               for r in rows), rows
    record = json.loads((runs / "tpe1" / "sweep.json").read_text())
    assert (record["plan"]["search"], record["plan"]["seed"], record["plan"]["address"]) == ("optuna", 5, "auto")
    _tracked_as_children(runs, record, rows)

    # the same seed draws the same random start on the same Ray
    second = cli(*args, "--name", "tpe2", cwd=tmp_path, env=ray_folder)
    assert second.returncode == 0, second.stdout + second.stderr
    start = lambda name: {r["trial"]: (r["base_lr"], r["type"]) for r in _rows(runs / name)  # noqa: E731
                          if r["search"] == "optuna random start"}
    assert start("tpe1") == start("tpe2")
    assert all(p.is_running() for p in daemons)

    # without --address a sweep runs on a Ray of its own beside the running one, which it leaves alone;
    # `ray.stop` still finds the running one's session, though the newest session is now the sweep's
    own = cli("sweep", "--param", "base_lr=0.01", "--max-iter", "20", "--test-iter", "2", "--tracking-uri", "off",
              "--data-dir", str(fashion_data.path.parent), "--runs-dir", str(runs), "--name", "own", cwd=tmp_path,
              env=ray_folder)
    assert own.returncode == 0, own.stdout + own.stderr
    assert "a Ray of its own" in own.stdout and "(left running)" not in own.stdout
    nodes = lambda name: {json.loads((runs / name / r["trial"] / "manifest.json").read_text())["sweep"]["node_id"]  # noqa: E731
                          for r in _rows(runs / name)}
    assert nodes("own").isdisjoint(nodes("tpe1")), "the sweep ran on the running Ray"
    assert (Path(ray_folder["RAY_TMPDIR"]) / "ray" / "session_latest").resolve() != session
    assert all(p.is_running() for p in daemons)

    stopped = cli("ray.stop", cwd=tmp_path, env=ray_folder)
    assert stopped.returncode == 0 and stopped.stdout.startswith("stopped the Ray at ")
    assert psutil.wait_procs(daemons, timeout=10)[1] == []
    assert _daemons(session) == []
    assert cli("ray.stop", cwd=tmp_path, env=ray_folder).stdout.strip() == \
        "no Ray runs here (`caffetool ray.start` starts one)"


def test_stopping_the_running_ray_leaves_other_rays_alone(tmp_path: Path, ray_folder) -> None:
    other = {**ray_folder, "RAY_TMPDIR": tempfile.mkdtemp(prefix="ray", dir="/tmp")}
    try:
        assert cli("ray.start", "--cpus", "1", cwd=tmp_path, env=other).returncode == 0
        assert cli("ray.start", "--cpus", "1", cwd=tmp_path, env=ray_folder).returncode == 0
        theirs = _daemons((Path(other["RAY_TMPDIR"]) / "ray" / "session_latest").resolve())
        assert len(theirs) == 2
        assert cli("ray.stop", cwd=tmp_path, env=ray_folder).returncode == 0
        assert all(p.is_running() for p in theirs)
    finally:
        cli("ray.stop", cwd=tmp_path, env=other)
        shutil.rmtree(other["RAY_TMPDIR"], ignore_errors=True)


def test_bad_counts_are_refused_before_ray_starts(tmp_path: Path, ray_folder) -> None:
    refused = cli("ray.start", "--cpus", "-1", cwd=tmp_path, env=ray_folder)
    assert refused.returncode == 1 and refused.stderr.startswith("Error: --cpus")
    assert not (Path(ray_folder["RAY_TMPDIR"]) / "ray").exists()


def test_a_stale_address_file_is_named_at_once(tmp_path: Path, ray_folder) -> None:
    """Ray's address file naming a port where nothing listens (its Ray killed with -9, or a reboot):
    ``--address auto`` says so in one line instead of Ray's retries for minutes."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray = Path(ray_folder["RAY_TMPDIR"]) / "ray"
    ray.mkdir()
    (ray / "ray_current_cluster").write_text(f"127.0.0.1:{port}\n")
    done = cli("sweep", "--address", "auto", "--param", "base_lr=0.01,0.02", "--runs-dir", str(tmp_path / "runs"),
               cwd=tmp_path, env=ray_folder, timeout=60)
    assert done.returncode == 1 and done.stderr == (
        f"Error: --address auto: Ray's address file {ray / 'ray_current_cluster'} names 127.0.0.1:{port}, where no Ray "
        "answers (one that was killed, or a reboot); start one with `caffetool ray.start` (which replaces the file), "
        "or leave out --address: the sweep then starts a Ray of its own\n"), done.stderr
    assert not (tmp_path / "runs").exists()


def test_ray_stop_ends_the_ray_the_address_file_names_not_a_newer_one(tmp_path: Path, ray_folder) -> None:
    """A head started by Ray's own ``ray start --head`` (no caffetool record), then another Ray in the
    same folder (as a sweep's own): ``ray.stop`` ends the head and leaves the newer Ray running."""
    ray = Path(ray_folder["RAY_TMPDIR"]) / "ray"
    started = subprocess.run([str(CAFFETOOL.parent / "ray"), "start", "--head", "--num-cpus", "1", "--port", "0",
                              "--include-dashboard", "false"], env=ray_folder, capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr
    head = (ray / "session_latest").resolve()
    newer = subprocess.Popen([sys.executable, "-c", "import ray, time; ray.init(address='local', num_cpus=1, "
                              "include_dashboard=False); print('up', flush=True); time.sleep(300)"],
                             env=ray_folder, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert newer.stdout.readline().strip() == "up"
        second = (ray / "session_latest").resolve()
        assert second != head and len(_daemons(head)) == 2 and len(_daemons(second)) == 2
        done = cli("ray.stop", cwd=tmp_path, env=ray_folder)
        assert done.returncode == 0, done.stderr
        assert _daemons(head) == [] and len(_daemons(second)) == 2
    finally:
        newer.kill()
        newer.wait()
        _end_session(head)  # should ray.stop have failed: no Ray of this test outlives it


def _end_session(session: Path) -> None:
    """Kill every process whose command line names ``session`` (a Ray's daemons and workers)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if session.name in " ".join(p.info["cmdline"] or []):
                found.append(p)
        except psutil.Error:
            continue
    for p in found:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(found, timeout=10)


def _rows(sweep_dir: Path) -> list[dict]:
    with open(sweep_dir / "results.csv") as f:
        return list(csv.DictReader(f))


def _tracked_as_children(runs: Path, record: dict, rows: list[dict]) -> None:
    """The sweep's run in the runs folder's MLflow store, each trial's run under it with its
    parameters, its metric history at Caffe's iterations and its final figure, read back with
    MLflow's own client."""
    import mlflow
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{runs / 'mlflow.db'}"
    assert record["tracking"]["uri"] == uri
    before = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    try:
        found = mlflow.search_runs(experiment_names=["caffetool"], output_format="list")
    finally:
        mlflow.set_tracking_uri(before)
    parent = next(r for r in found if r.info.run_id == record["tracking"]["run_id"])
    assert parent.info.run_name == "tpe1" and parent.info.status == "FINISHED"
    assert parent.data.params["search"] == "optuna" and parent.data.params["seed"] == "5"
    assert parent.data.params["base_lr"] == "log:1e-3..1e-2" and parent.data.tags["status"] == "finished"
    best = max(rows, key=lambda r: float(r["test/accuracy"]))
    assert parent.data.tags["best_trial"] == best["trial"]
    assert parent.data.metrics["test0/accuracy"] == pytest.approx(float(best["test/accuracy"]))
    children = {r.info.run_name: r for r in found if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert sorted(children) == sorted(r["trial"] for r in rows)
    client = MlflowClient(uri)
    for row in rows:
        child = children[row["trial"]]
        assert child.info.status == "FINISHED" and child.data.tags["caffetool.sweep"] == "tpe1"
        assert float(child.data.params["base_lr"]) == pytest.approx(float(row["base_lr"]), rel=1e-6)
        assert child.data.params["type"] == row["type"]
        tests = json.loads((runs / "tpe1" / row["trial"] / "metrics.json").read_text())["test"]["0"]
        history = client.get_metric_history(child.info.run_id, "test0/accuracy")
        assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == \
            [(t["NumIters"], pytest.approx(t["accuracy"])) for t in tests]
