"""MLflow tracking of real trainings, read back with MLflow's own client from SQLite stores in tmp_path:
live logging, a store that fails, ``track.import``, parent and child runs, resume, the CLI, and
several processes writing one new store at once."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.entities import ViewType

from caffetool import track
from caffetool.nets.solvers import SolverOptions
from caffetool.runs import metrics_io
from caffetool.track import live
from caffetool.train import session

CAFFETOOL = Path(sys.executable).parent / "caffetool"
QUICK = {"max_iter": 200, "test_interval": 100, "test_iter": 5, "display": 20}
FLAGS = ["--max-iter", "40", "--test-interval", "20", "--test-iter", "5", "--display", "10"]
SOLVER = """net: "net.prototxt"
test_iter: 5
test_interval: 50
base_lr: 0.01
lr_policy: "fixed"
momentum: 0.9
display: 25
max_iter: 100
snapshot_prefix: "snap"
"""
NET = """name: "Linear"
layer {{ name: "data" type: "Data" top: "data" top: "label" include {{ phase: TRAIN }}
  transform_param {{ scale: 0.00390625 }} data_param {{ source: "{train}" batch_size: 32 backend: LMDB }} }}
layer {{ name: "data" type: "Data" top: "data" top: "label" include {{ phase: TEST }}
  transform_param {{ scale: 0.00390625 }} data_param {{ source: "{test}" batch_size: 50 backend: LMDB }} }}
layer {{ name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param {{ num_output: 10 weight_filler {{ type: "xavier" }} }} }}
layer {{ name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }}
layer {{ name: "accuracy" type: "Accuracy" bottom: "ip" bottom: "label" top: "accuracy" include {{ phase: TEST }} }}
"""


def uri_of(path: Path) -> str:
    return f"sqlite:///{path}"


def only_run(client: MlflowClient, experiment: str = track.DEFAULT_EXPERIMENT):
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    assert len(runs) == 1, [r.info.run_name for r in runs]
    return runs[0]


def history(client: MlflowClient, run_id: str) -> dict[str, list[tuple[int, float]]]:
    """Every metric of a run: its (step, value) points, in step order."""
    keys = client.get_run(run_id).data.metrics
    return {key: sorted((m.step, m.value) for m in client.get_metric_history(run_id, key)) for key in keys}


def artifact_paths(client: MlflowClient, run_id: str, folder: str | None = None) -> list[str]:
    out = []
    for item in client.list_artifacts(run_id, folder):
        out += artifact_paths(client, run_id, item.path) if item.is_dir else [item.path]
    return sorted(out)


def manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def train(engine, fashion_data, runs: Path, name: str, tracking: track.TrackingTarget | None, said: list[str],
          **options) -> session.TrainResult:
    request = session.TrainRequest(data_dir=fashion_data.path.parent, runs_dir=runs, name=name, tracking=tracking,
                                   options=SolverOptions(**{**QUICK, **options}))
    result = session.train(engine, request, say=said.append, progress=False)
    assert result.outcome.status == "finished", result.outcome.message
    return result


def cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("INVOKE_", "MLFLOW_"))}
    return subprocess.run([str(CAFFETOOL), *args], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**clean, **env}, stdin=subprocess.DEVNULL)


def quiet(done: subprocess.CompletedProcess) -> None:
    """Nothing of MLflow's, Alembic's or Python's own on the console."""
    out = done.stdout + done.stderr
    for noise in ("Traceback", "INFO mlflow", "alembic", "WARNING mlflow", "Warning:"):
        assert noise not in out, out


@pytest.fixture(scope="module")
def tracked(engine, fashion_data, tmp_path_factory):
    """A LeNet trained with tracking on, and what a reader of its store saw while it trained."""
    root = tmp_path_factory.mktemp("tracked")
    target = track.TrackingTarget(uri_of(root / "store" / "mlflow.db"))
    seen: list[tuple[str, int]] = []  # (run status, train/loss points) read while Caffe trained
    done = threading.Event()

    def watch() -> None:
        client = MlflowClient(target.uri)
        while not done.wait(0.3):
            try:
                run = only_run(client)
                seen.append((run.info.status, len(client.get_metric_history(run.info.run_id, "train/loss"))))
            except Exception:  # noqa: BLE001 - the store or the run is not made yet
                continue

    MlflowClient(target.uri).search_experiments()  # the store's schema, made before: a store in use already has one
    said: list[str] = []
    previous, live.SEND_EVERY = live.SEND_EVERY, 0.5
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = train(engine, fashion_data, root / "runs", "live", target, said, max_iter=1200, test_interval=600)
    finally:
        live.SEND_EVERY = previous
        done.set()
        watcher.join()
    return result, target, said, seen


def test_a_training_is_logged_with_its_record(tracked):
    result, target, said, _ = tracked
    assert said == [line for line in said if not line.startswith("warning")]
    client = MlflowClient(target.uri)
    run = only_run(client)
    m = manifest(result.run_dir)
    assert m["tracking"] == {"uri": target.uri, "run_id": run.info.run_id, "experiment_id": run.info.experiment_id}
    assert run.info.status == "FINISHED" and run.info.run_name == "live"
    params = run.data.params
    assert {k: params[k] for k in ("base_lr", "max_iter", "test_interval", "lr_policy", "type", "model", "dataset",
                                   "batch_size", "test_batch_size", "device")} == {
        "base_lr": "0.01", "max_iter": "1200", "test_interval": "600", "lr_policy": "inv", "type": "SGD",
        "model": "lenet", "dataset": "fashion-mnist", "batch_size": "64", "test_batch_size": "100", "device": "CPU"}
    assert len(params["dataset.sha256"]) == 64 and params["engine.version"] == m["engine"]["manifest"]["source"]["version"]
    assert run.data.tags["status"] == "finished" and run.data.tags["host"] == socket.gethostname()
    assert run.data.tags["gpu"] == "cpu" and run.data.tags["caffetool.run_dir"] == str(result.run_dir)
    assert run.data.tags["caffetool.version"] == m["caffetool"]["version"]

    recorded = metrics_io.read_json(result.run_dir / "metrics.json")
    points = history(client, run.info.run_id)
    assert [step for step, _ in points["train/loss"]] == [r["NumIters"] for r in recorded.train if "loss" in r]
    assert [value for _, value in points["train/loss"]] == pytest.approx([r["loss"] for r in recorded.train
                                                                          if "loss" in r], rel=1e-6)
    assert [step for step, _ in points["train/lr"]] == [r["NumIters"] for r in recorded.train]
    assert [step for step, _ in points["test0/accuracy"]] == [0, 600, 1200]
    assert points["test0/accuracy"][-1][1] == pytest.approx(m["final"]["test0"]["accuracy"])
    assert points["final/test0/accuracy"] == [(1200, pytest.approx(m["final"]["test0"]["accuracy"]))]

    assert artifact_paths(client, run.info.run_id) == sorted(
        ["manifest.json", "deploy.prototxt", "solver.prototxt", "train_val.prototxt", "labels.txt",
         "weights/lenet_iter_1200.caffemodel"] + [f"plots/{p.name}" for p in (result.run_dir / "plots").glob("*.png")])
    assert run.info.artifact_uri.startswith(str(Path(target.uri.removeprefix("sqlite:///")).parent / "mlartifacts"))


def test_metrics_reach_the_store_while_caffe_trains(tracked):
    _, _, _, seen = tracked
    growing = [points for status, points in seen if status == "RUNNING" and points]
    assert len(set(growing)) >= 2, seen  # the curve grew, in more than one step, before the run ended


def test_a_store_that_cannot_be_written_leaves_the_training_as_it_is(engine, fashion_data, tmp_path):
    (tmp_path / "a-file").write_text("not a folder\n")
    for name, uri in (("under-a-file", uri_of(tmp_path / "a-file" / "mlflow.db")), ("bad-uri", "nosuch://store")):
        said: list[str] = []
        result = train(engine, fashion_data, tmp_path / "runs", name, track.TrackingTarget(uri), said,
                       max_iter=40, test_interval=20, display=10)
        warnings = [line for line in said if line.startswith("warning")]
        assert len(warnings) == 1, said
        assert warnings[0].startswith(f"warning: {name} is not tracked in MLflow (cannot track in {uri}: ")
        assert f"`caffetool track.import {result.run_dir} --tracking-uri {uri}`" in warnings[0]
        m = manifest(result.run_dir)
        assert m["status"] == "finished" and "tracking" not in m and m["final"]["test0"]["NumIters"] == 40
        assert m == result.manifest.as_dict()
        assert (result.run_dir / "metrics.json").is_file() and list((result.run_dir / "plots").glob("*.png"))
    assert (tmp_path / "a-file").read_text() == "not a folder\n"


def test_import_logs_what_live_logging_logged(tracked, engine, tmp_path):
    result, target, _, _ = tracked
    copy = tmp_path / "runs" / "live"
    shutil.copytree(result.run_dir, copy)
    store = uri_of(tmp_path / "other.db")
    done = cli("track.import", "live", "--runs-dir", str(tmp_path / "runs"), "--tracking-uri", store, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    quiet(done)
    live_client, imported_client = MlflowClient(target.uri), MlflowClient(store)
    was, now = only_run(live_client), only_run(imported_client)
    assert done.stdout == f"imported live: MLflow run {now.info.run_id} in {store}\n"
    assert now.data.params == was.data.params
    assert now.data.tags | {"caffetool.run_dir": ""} == was.data.tags | {"caffetool.run_dir": ""}
    assert now.data.tags["caffetool.run_dir"] == str(copy)
    assert history(imported_client, now.info.run_id) == history(live_client, was.info.run_id)
    assert artifact_paths(imported_client, now.info.run_id) == artifact_paths(live_client, was.info.run_id)
    assert (now.info.status, now.info.start_time) == (was.info.status, was.info.start_time)
    assert manifest(copy)["tracking"]["run_id"] == now.info.run_id


def test_import_of_an_untracked_run_once_then_skipped_then_forced(trained_run, tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(trained_run, runs / trained_run.name)
    store = uri_of(tmp_path / "mlflow.db")
    args = ("track.import", trained_run.name, "--runs-dir", str(runs), "--tracking-uri", store)
    first = cli(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    quiet(first)
    client = MlflowClient(store)
    run = only_run(client)
    assert first.stdout == f"imported {trained_run.name}: MLflow run {run.info.run_id} in {store}\n"
    assert run.data.params["max_iter"] == "600" and run.data.tags["status"] == "finished"
    recorded = metrics_io.read_json(runs / trained_run.name / "metrics.json")
    assert [s for s, _ in history(client, run.info.run_id)["train/loss"]] == [r["NumIters"] for r in recorded.train
                                                                              if "loss" in r]
    again = cli(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout == (f"skipped {trained_run.name}: already tracked in {store} as MLflow run "
                            f"{run.info.run_id} (--force imports it again)\n")
    forced = cli(*args, "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    new = only_run(client)
    assert new.info.run_id != run.info.run_id
    assert forced.stdout == (f"imported {trained_run.name}: MLflow run {new.info.run_id} in {store} "
                             f"(replaces {run.info.run_id}, now marked deleted)\n")
    assert client.get_run(run.info.run_id).info.lifecycle_stage == "deleted"


def test_import_names_a_run_that_is_not_there(tmp_path):
    (tmp_path / "runs").mkdir()
    done = cli("track.import", "nope", "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr == (f"Error: no run 'nope' (looked for {tmp_path / 'runs' / 'nope'}/manifest.json); "
                           f"`ls {tmp_path / 'runs'}` lists the runs\n")
    assert not (tmp_path / "runs" / "mlflow.db").exists()


def test_a_child_run_is_logged_under_its_parent(engine, fashion_data, tmp_path):
    target = track.TrackingTarget(uri_of(tmp_path / "mlflow.db"), experiment="a-sweep")
    parent = track.start_parent(target, "sweep-1", params={"metric": "test/accuracy"}, tags={"kind": "sweep"})
    child = track.TrackingTarget(target.uri, "a-sweep", parent_run_id=parent, tags={"trial": "00000"})
    result = train(engine, fashion_data, tmp_path / "runs", "trial-00000", child, [], max_iter=40, test_interval=20)
    track.end_parent(target, parent, "finished", {"best/test0/accuracy": result.manifest.final["test0"]["accuracy"]})
    client = MlflowClient(target.uri)
    experiment = client.get_experiment_by_name("a-sweep").experiment_id
    children = client.search_runs([experiment], filter_string=f"tags.`mlflow.parentRunId` = '{parent}'")
    assert [(r.info.run_name, r.data.tags["trial"], r.info.status) for r in children] == [
        ("trial-00000", "00000", "FINISHED")]
    assert result.manifest.tracking["parent_run_id"] == parent
    sweep = client.get_run(parent)
    assert (sweep.info.run_name, sweep.info.status, sweep.data.params, sweep.data.tags["kind"]) == (
        "sweep-1", "FINISHED", {"metric": "test/accuracy"}, "sweep")
    assert sweep.data.metrics["best/test0/accuracy"] == pytest.approx(result.manifest.final["test0"]["accuracy"])


def test_a_resumed_run_goes_on_in_the_same_mlflow_run(engine, fashion_data, tmp_path):
    target = track.TrackingTarget(uri_of(tmp_path / "mlflow.db"))
    first = train(engine, fashion_data, tmp_path / "runs", "resumed", target, [], max_iter=40, test_interval=20,
                  display=10)
    run_id = first.manifest.tracking["run_id"]
    again = session.resume(engine, first.run_dir, max_iter=80, progress=False, say=lambda _: None, tracking=target)
    assert again.outcome.status == "finished", again.outcome.message
    assert again.manifest.tracking["run_id"] == run_id
    client = MlflowClient(target.uri)
    run = only_run(client)
    assert (run.info.run_id, run.info.status, run.data.params["max_iter"]) == (run_id, "FINISHED", "40")
    assert run.data.tags["resumed.max_iter"] == "80"  # MLflow's params never change
    points = history(client, run_id)
    assert [s for s, _ in points["train/loss"]] == [0, 10, 20, 30, 40, 50, 60, 70]
    assert [s for s, _ in points["test0/accuracy"]] == [0, 20, 40, 60, 80]
    assert "weights/lenet_iter_80.caffemodel" in artifact_paths(client, run_id)


@pytest.mark.engine
def test_the_cli_tracks_a_training_where_its_settings_say(fashion_data, tmp_path):
    data = str(fashion_data.path.parent)
    runs = tmp_path / "runs"
    done = cli("train", "--data-dir", data, "--runs-dir", str(runs), "--name", "default", *FLAGS,
               "--experiment", "first", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    quiet(done)
    default = MlflowClient(uri_of(runs / "mlflow.db"))
    run = only_run(default, "first")
    assert run.info.run_name == "default" and run.data.params["max_iter"] == "40"
    assert manifest(runs / "default")["tracking"]["uri"] == f"sqlite:///{runs / 'mlflow.db'}"
    assert (runs / "mlartifacts").is_dir()

    off = cli("train", "--data-dir", data, "--runs-dir", str(runs), "--name", "off", *FLAGS, cwd=tmp_path,
              INVOKE_TRACKING_URI="off")
    assert off.returncode == 0, off.stderr
    assert "tracking" not in manifest(runs / "off")
    everything = default.search_runs([e.experiment_id for e in default.search_experiments()], run_view_type=ViewType.ALL)
    assert [r.info.run_name for r in everything] == ["default"]

    project = tmp_path / "project"
    project.mkdir()
    (project / "solver.prototxt").write_text(SOLVER)
    (project / "net.prototxt").write_text(NET.format(train=fashion_data.path / "train_lmdb",
                                                     test=fashion_data.path / "test_lmdb"))
    done = cli("train", "--solver", "solver.prototxt", "--runs-dir", str(runs), "--name", "own",
               "--tracking-uri", uri_of(tmp_path / "own.db"), cwd=project)
    assert done.returncode == 0, done.stderr
    quiet(done)
    assert not [line for line in done.stdout.splitlines() if line.startswith("warning")], done.stdout
    run = only_run(MlflowClient(uri_of(tmp_path / "own.db")))
    assert (run.info.run_name, run.data.params["solver_file"], run.data.params["batch_size"]) == (
        "own", str(project / "solver.prototxt"), "32")
    assert len(run.data.params["project.sha256"]) == 64
    # a store that cannot be opened is named before the training (MLflow would retry it for a minute)
    (tmp_path / "a-file").write_text("")
    refused = cli("train", "--solver", "solver.prototxt", "--runs-dir", str(runs), "--name", "unwritable",
                  "--tracking-uri", uri_of(tmp_path / "a-file" / "x.db"), cwd=project)
    assert refused.returncode == 1 and refused.stderr == (
        f"Error: --tracking-uri {uri_of(tmp_path / 'a-file' / 'x.db')}: {tmp_path / 'a-file'} is a file, not a folder; "
        "name a database in a folder\n")
    assert not (runs / "unwritable").exists()


def test_mlflows_imports_stay_quiet_when_another_thread_restores_the_warning_filters(tmp_path):
    """The live thread imports MLflow (and requests, which silences urllib3's PySocks warning as it is
    imported) while the main thread may be inside ``warnings.catch_warnings``, whose exit drops filters
    added meanwhile; the filters set beforehand on the main thread hold."""
    pytest.importorskip("requests")
    if importlib.util.find_spec("socks"):
        pytest.skip("PySocks is installed here: urllib3 has no warning to give")
    script = tmp_path / "race.py"
    script.write_text(
        "import threading, warnings\n"
        "from caffetool.track.store import prepare\n"
        "prepare()\n"
        "with warnings.catch_warnings():\n"
        "    importer = threading.Thread(target=__import__, args=('requests',))\n"
        "    importer.start()\n"
        "    importer.join()\n"
        "try:\n"
        "    import urllib3.contrib.socks  # what requests imports, again: it warns each time\n"
        "except ImportError:\n"
        "    pass\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr
    without = subprocess.run([sys.executable, "-c", script.read_text().replace("prepare()\n", "", 1)],
                             capture_output=True, text=True, timeout=120)
    assert "DependencyWarning" in without.stderr  # the race is real without prepare()


def test_several_processes_write_one_new_store_at_once(tmp_path):
    """A sweep's trials: each process opens the store (the first creates its tables) and logs a child run."""
    store = uri_of(tmp_path / "new" / "mlflow.db")
    script = (
        "import sys, time\n"
        "from caffetool.track import TrackingTarget\n"
        "from caffetool.track.store import Store\n"
        "s = Store(TrackingTarget(sys.argv[1], 'crowd'))\n"
        "run = s.create_run('child-' + sys.argv[2], {'mlflow.parentRunId': 'the-sweep'})\n"
        "for step in range(40):\n"
        "    s.log(run, [(step, 'train/loss', 1.0 / (step + 1), int(time.time() * 1000))])\n"
        "s.end(run, 'FINISHED')\n")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    children = [subprocess.Popen([sys.executable, "-c", script, store, str(i)], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(scratch)})
                for i in range(4)]
    outputs = [child.communicate(timeout=300) for child in children]
    assert [child.returncode for child in children] == [0, 0, 0, 0], outputs
    assert outputs == [("", "")] * 4
    assert list(scratch.iterdir()) == []  # the lock leaves no file behind
    client = MlflowClient(store)
    runs = client.search_runs([client.get_experiment_by_name("crowd").experiment_id])
    assert sorted(r.info.run_name for r in runs) == [f"child-{i}" for i in range(4)]
    assert all(len(client.get_metric_history(r.info.run_id, "train/loss")) == 40 for r in runs)


def test_opening_a_sqlite_store_excludes_other_processes_until_it_is_done(tmp_path):
    """The lock is the database folder's own ``flock``: another process waits while it is held."""
    from caffetool.track.store import opening
    probe = ("import fcntl, os, sys\n"
             "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
             "try:\n"
             "    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
             "except BlockingIOError:\n"
             "    print('held')\n"
             "else:\n"
             "    print('free')\n")

    def other_process() -> str:
        return subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True,
                              check=True).stdout.strip()

    with opening(uri_of(tmp_path / "mlflow.db")):
        inside = other_process()
    assert (inside, other_process()) == ("held", "free")


def test_a_target_says_where_and_off_is_none(tmp_path):
    assert track.resolve(None, None, tmp_path) == track.TrackingTarget(f"sqlite:///{tmp_path}/mlflow.db", "caffetool")
    assert track.resolve("OFF", "x", tmp_path) is None
    assert track.resolve("http://host:5000", "exp", tmp_path) == track.TrackingTarget("http://host:5000", "exp")
    recorded = {"uri": "sqlite:////elsewhere/mlflow.db", "run_id": "abc"}
    target = track.TrackingTarget("sqlite:///here.db")
    assert track.continued(target, recorded) == (track.TrackingTarget("sqlite:////elsewhere/mlflow.db"), "abc")
    assert track.continued(None, recorded) == (None, None)
    assert track.continued(target, None) == (target, None)


def test_a_store_that_keeps_nothing_or_cannot_open_is_refused_at_once(trained_run, tmp_path):
    """What a file system can tell about a SQLite store is told before MLflow opens it (which would
    retry for a minute, then blame slowness); an in-memory store, which ends with the process, is no
    store for a run's record."""
    runs = tmp_path / "runs"
    shutil.copytree(trained_run, runs / trained_run.name)
    (tmp_path / "not-sqlite.db").write_text("plain text\n")
    for uri, words in (("sqlite:///:memory:", "keeps nothing: an in-memory database ends with the process"),
                       (uri_of(tmp_path), f"{tmp_path} is a folder; name the database file in it"),
                       (uri_of(tmp_path / "missing" / "mlflow.db"), f"the folder {tmp_path / 'missing'} does not exist"),
                       (uri_of(tmp_path / "not-sqlite.db"), "is not a SQLite database")):
        done = cli("track.import", trained_run.name, "--runs-dir", str(runs), "--tracking-uri", uri, cwd=tmp_path)
        assert done.returncode == 1 and done.stderr.startswith(f"Error: --tracking-uri {uri}") and words in done.stderr, \
            done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not-sqlite.db", "runs"]


def test_a_run_whose_folder_holds_a_space_is_imported_by_its_path(trained_run, tmp_path):
    runs = tmp_path / "my runs"
    shutil.copytree(trained_run, runs / "first run")
    store = uri_of(tmp_path / "mlflow.db")
    done = cli("track.import", str(runs / "first run"), "--tracking-uri", store, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("imported first run: MLflow run ")


def test_artifacts_that_cannot_be_stored_still_end_the_mlflow_run(engine, fashion_data, tmp_path):
    """The store takes the run's params and metrics, but its artifact folder is a file: the training is
    as it is, the user is told, and the MLflow run ends with the training's status rather than
    staying RUNNING for ever."""
    store = tmp_path / "store"
    store.mkdir()
    (store / "mlartifacts").write_text("in the way\n")
    said: list[str] = []
    result = train(engine, fashion_data, tmp_path / "runs", "no-artifacts", track.TrackingTarget(uri_of(store / "mlflow.db")),
                   said, max_iter=20, test_interval=20, display=10)
    warnings = [line for line in said if line.startswith("warning")]
    assert len(warnings) == 1 and "is not fully tracked in MLflow" in warnings[0] and "--force" in warnings[0], said
    run = only_run(MlflowClient(uri_of(store / "mlflow.db")))
    assert run.info.status == "FINISHED" and run.info.end_time, run.info
    assert manifest(result.run_dir)["status"] == "finished"
