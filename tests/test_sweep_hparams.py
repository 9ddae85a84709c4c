"""A sweep in TensorBoard's HParams dashboard and in MLflow's UI: real sweeps (LeNet, 100 iterations
a trial), read back with the HParams plugin's own backend, and the real ``tensorboard`` and
``mlflow ui`` servers in a browser.

One sweep of 8 trials (a grid of ``base_lr`` and ``type`` with a sampled ``momentum``, 2 samples)
serves every test but one; a sweep of a project whose net Caffe refuses at one batch size gives a
failed trial. The browser tests take the documentation's ``tensorboard-hparams.png`` and
``mlflow-sweep.png`` (:mod:`tests.screenshots`).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from caffetool.errors import RunError
from caffetool.sweep import hparams, leaderboard

from . import screenshots
from .test_demo import free_port
from .test_demo_page import browser  # noqa: F401 - the fixture: one Chromium for the module
from .test_sweep import CAFFETOOL, FIXED_BATCH_NET, SOLVER, leftovers, results

pytestmark = [pytest.mark.slow, pytest.mark.engine]

PARAMS = ("--param", "base_lr=0.001,0.01", "--param", "type=SGD,Adam", "--param", "momentum=uniform:0.8..0.95",
          "--samples", "2")
TRIALS = 8
MLFLOW_COLUMNS = ("test0/accuracy", "base_lr", "momentum", "type", "status")  # shown; Dataset, Source, Models hidden


def sweep_in(root: Path, name: str, *args: str, cwd: Path | None = None) -> Path:
    """Runs ``caffetool sweep`` (which starts and stops a Ray of its own) and checks it left nothing running."""
    proc = subprocess.Popen([str(CAFFETOOL), "sweep", "--name", name, "--cpus-per-trial", "1", "--runs-dir",
                             str(root / "runs"), *args], cwd=cwd or root, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                            env={k: v for k, v in os.environ.items() if not k.startswith("INVOKE_")})
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "Traceback" not in out + err, out + err
    assert leftovers(root, proc.pid) == []
    assert proc.returncode in (0, 1), out + err
    return root / "runs" / name


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, fashion_data) -> Path:
    root = tmp_path_factory.mktemp("hparams")
    sweep_dir = sweep_in(root, "hp", *PARAMS, "--max-iter", "100", "--test-iter", "5", "--display", "20",
                         "--data-dir", str(fashion_data.path.parent))
    assert [r["status"] for r in results(sweep_dir)] == ["finished"] * TRIALS
    return sweep_dir


def dashboard(logdir: Path) -> tuple[object, dict[str, tuple[object, dict]]]:
    """The experiment and the session groups (the table's "Trial ID": its one session and the
    hparams) as the HParams plugin serves them to its dashboard, read from ``logdir`` by
    TensorBoard's own multiplexer."""
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.hparams import api_pb2, backend_context, get_experiment, list_session_groups

    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(logdir))
    multiplexer.Reload()
    tb = base_plugin.TBContext(data_provider=data_provider.MultiplexerDataProvider(multiplexer, str(logdir)),
                               logdir=str(logdir))
    backend = backend_context.Context(tb)
    request = context.RequestContext()
    experiment = get_experiment.Handler(request, backend, "", api_pb2.GetExperimentRequest()).run()
    every = api_pb2.ListSessionGroupsRequest(start_index=0, slice_size=1000, allowed_statuses=[
        api_pb2.STATUS_UNKNOWN, api_pb2.STATUS_SUCCESS, api_pb2.STATUS_FAILURE, api_pb2.STATUS_RUNNING])
    groups = list_session_groups.Handler(request, backend, "", every).run().session_groups
    assert all(len(group.sessions) == 1 for group in groups), groups
    return experiment, {g.name: (g.sessions[0], {k: _python(v) for k, v in g.hparams.items()}) for g in groups}


def _python(value) -> object:
    return getattr(value, value.WhichOneof("kind"))


def manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def last_test(run_dir: Path, output: str) -> tuple[int, float]:
    """The last row of test net #0 in the run's record: its iteration and ``output``."""
    row = json.loads((run_dir / "metrics.json").read_text())["test"]["0"][-1]
    return int(row["NumIters"]), float(row[output])


def hparams_files(sweep_dir: Path) -> list[str]:
    return sorted(str(p.relative_to(sweep_dir)) for p in sweep_dir.rglob(f"*{Path(hparams.FILE).suffix}"))


def test_every_trial_is_a_session_with_its_parameters_metrics_and_status(sweep: Path) -> None:
    from tensorboard.plugins.hparams import api_pb2

    experiment, sessions = dashboard(sweep)
    infos = {h.name: h for h in experiment.hparam_infos}
    assert sorted(infos) == ["base_lr", "momentum", "type"]  # the plugin serves them sorted
    assert [v.number_value for v in infos["base_lr"].domain_discrete.values] == [0.001, 0.01]
    assert infos["base_lr"].type == api_pb2.DATA_TYPE_FLOAT64
    assert [v.string_value for v in infos["type"].domain_discrete.values] == ["SGD", "Adam"]
    assert infos["type"].type == api_pb2.DATA_TYPE_STRING
    assert (infos["momentum"].domain_interval.min_value, infos["momentum"].domain_interval.max_value) == (0.8, 0.95)
    tags = [m.name.tag for m in experiment.metric_infos]
    assert tags[:2] == ["test0/accuracy", "train/loss"] and "test0/loss" in tags and "train/smoothed_loss" in tags
    assert not [t for t in tags if t.startswith("system/")]
    assert {m.name.group for m in experiment.metric_infos} == {"tensorboard"}

    trials = sorted(p.name for p in sweep.glob("trial-*"))
    assert len(trials) == TRIALS and sorted(sessions) == trials
    for trial in trials:
        session, values = sessions[trial]
        assert session.name == trial  # the run whose "tensorboard" subfolder holds the metrics
        m = manifest(sweep / trial)
        assert values == m["sweep"]["params"]
        assert session.status == api_pb2.STATUS_SUCCESS and m["status"] == "finished"
        measured = {v.name.tag: v for v in session.metric_values}
        iteration, accuracy = last_test(sweep / trial, "accuracy")
        assert measured["test0/accuracy"].training_step == iteration == 100
        assert math.isclose(measured["test0/accuracy"].value, accuracy, rel_tol=1e-6), (trial, measured)
        assert math.isclose(measured["test0/loss"].value, last_test(sweep / trial, "loss")[1], rel_tol=1e-6)
        assert set(tags) <= set(measured)  # every metric has a value in every session


def test_writing_again_leaves_one_session_per_trial_and_no_leftovers(sweep: Path) -> None:
    written = hparams_files(sweep)
    assert written == [hparams.FILE] + [f"{t}/{hparams.FILE}" for t in sorted(p.name for p in sweep.glob("trial-*"))]
    # what a write killed before its rename leaves: a hidden sibling holding part of a session
    trial = sweep / "trial-00003"
    partial = trial / f".{Path(hparams.FILE).stem}.tmp-0badf00d{Path(hparams.FILE).suffix}"
    partial.write_bytes((trial / hparams.FILE).read_bytes()[:40])
    # what a write made while the trial had no run yet (a report during the sweep)
    (sweep / hparams.NO_RUN / trial.name).mkdir(parents=True)
    shutil.copyfile(trial / hparams.FILE, sweep / hparams.NO_RUN / trial.name / hparams.FILE)
    before = (trial / hparams.FILE).stat().st_ino

    leaderboard.write(sweep)
    leaderboard.write(sweep)

    assert hparams_files(sweep) == written and not partial.exists() and not (sweep / hparams.NO_RUN).exists()
    assert (trial / hparams.FILE).stat().st_ino != before  # replaced, not appended to
    _, sessions = dashboard(sweep)
    assert sorted(sessions) == sorted(p.name for p in sweep.glob("trial-*")) and len(sessions) == TRIALS


def test_a_failed_trial_is_a_failed_session(tmp_path: Path, fashion_data) -> None:
    from tensorboard.plugins.hparams import api_pb2

    project = tmp_path / "project"
    project.mkdir()
    (project / "net.prototxt").write_text(FIXED_BATCH_NET.format(train=fashion_data.path / "train_lmdb",
                                                                 test=fashion_data.path / "test_lmdb"))
    (project / "solver.prototxt").write_text(SOLVER.replace("max_iter: 150", "max_iter: 100"))
    sweep_dir = sweep_in(tmp_path, "crash", "--solver", "solver.prototxt", "--param", "batch_size=64,32",
                         cwd=project)
    by_size = {int(r["batch_size"]): r for r in results(sweep_dir)}
    assert by_size[64]["status"] == "finished" and by_size[32]["status"] == "failed", by_size

    experiment, sessions = dashboard(sweep_dir)
    assert [v.number_value for v in experiment.hparam_infos[0].domain_discrete.values] == [64, 32]
    finished, failed = sessions[by_size[64]["trial"]], sessions[by_size[32]["trial"]]
    assert finished[0].status == api_pb2.STATUS_SUCCESS and finished[1] == {"batch_size": 64}
    assert failed[0].status == api_pb2.STATUS_FAILURE and failed[1] == {"batch_size": 32}
    # Caffe refused the net before the first iteration: the trial has no run, and no metrics
    assert not (sweep_dir / by_size[32]["trial"]).exists()
    assert failed[0].name == f"{hparams.NO_RUN}/{by_size[32]['trial']}" and not failed[0].metric_values
    assert finished[0].name == by_size[64]["trial"]
    accuracy = {v.name.tag: v.value for v in finished[0].metric_values}["test0/accuracy"]
    assert math.isclose(accuracy, float(by_size[64]["test/accuracy"]), rel_tol=1e-4)


def test_a_summary_that_cannot_be_written_is_named(sweep: Path, tmp_path: Path) -> None:
    copy = tmp_path / "hp"
    shutil.copytree(sweep, copy, ignore=shutil.ignore_patterns("snapshots", "tune"))
    (copy / hparams.FILE).unlink()
    (copy / hparams.FILE).mkdir()
    (copy / hparams.FILE / "in-the-way").touch()
    plan, rows = leaderboard.collect(copy)
    with pytest.raises(RunError) as caught:
        hparams.write(copy, plan, rows)
    assert str(caught.value) == f"cannot write {copy / hparams.FILE}: Is a directory"
    assert not list(copy.glob(f".*{Path(hparams.FILE).suffix}"))  # the temporary sibling went


def shown_table(cells: list[str]) -> list[dict[str, str]]:
    """The rows of the HParams table from the texts of its cells, in order: the header, a blank
    cell per row (its details), then each row's cells; the "Show Metrics" column has no text."""
    header = cells[:cells.index(" ")]
    columns = [c for c in header if c != "Show Metrics"]
    values = [c for c in cells[len(header):] if c.strip()]
    assert len(values) % len(columns) == 0, (columns, values)
    return [dict(zip(columns, values[i:i + len(columns)])) for i in range(0, len(values), len(columns))]


def serving(argv: list[str], ready: str) -> Iterator[str]:
    """The server ``argv`` (with ``--port`` added) until the generator is closed; its URL once
    ``ready`` (a path) answers 200. Its whole process group ends with it (``mlflow ui`` starts workers)."""
    port = free_port()
    child = subprocess.Popen([*argv, "--port", str(port), "--host", "127.0.0.1"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert child.poll() is None, child.communicate()[0]
            try:
                if httpx.get(f"{url}{ready}", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"{argv[0]} did not start"
            time.sleep(0.2)
        yield url
    finally:
        os.killpg(child.pid, signal.SIGTERM)
        try:
            child.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.communicate()


@pytest.fixture
def tensorboard_server(sweep: Path):
    yield from serving([str(CAFFETOOL.parent / "tensorboard"), "--logdir", str(sweep)], "/data/plugins_listing")


@pytest.fixture
def mlflow_server(sweep: Path):
    store = f"sqlite:///{sweep.parent / 'mlflow.db'}"
    yield from serving([str(CAFFETOOL.parent / "mlflow"), "ui", "--backend-store-uri", store, "--workers", "1"], "/")


@pytest.fixture
def new_page(browser):  # noqa: F811 - the fixture imported above
    """A page of the demo tests' Chromium, of the size given, closed after the test."""
    pages = []

    def opened(width: int, height: int):
        pages.append(browser.new_page(viewport={"width": width, "height": height}))
        return pages[-1]

    yield opened
    for page in pages:
        page.close()


def test_the_dashboard_lists_every_trial_in_a_browser(tensorboard_server: str, sweep: Path, new_page) -> None:
    trials = sorted(p.name for p in sweep.glob("trial-*"))
    page = new_page(1600, 600)
    page.goto(f"{tensorboard_server}/#hparams")
    page.locator("#sessionGroupsTable div.table-cell", has_text=trials[-1]).wait_for(timeout=30_000)
    table = shown_table(page.locator("#sessionGroupsTable div.table-cell").all_inner_texts())
    assert len(table) == TRIALS and [r["Trial ID"] for r in table] == trials
    for row in table:
        run_dir = sweep / row["Trial ID"]
        # numbers are shown as JavaScript's toPrecision(5) writes them
        assert row["test0/accuracy"] == f"{last_test(run_dir, 'accuracy')[1]:#.5g}"
        params = manifest(run_dir)["sweep"]["params"]
        assert row["type"] == params["type"] and row["base_lr"] == f"{params['base_lr']:#.5g}"
        assert row["momentum"] == f"{params['momentum']:#.5g}"
    screenshots.save(page, "tensorboard-hparams.png")


def test_mlflow_shows_the_sweep_with_its_trials_nested_in_a_browser(mlflow_server: str, sweep: Path,
                                                                    new_page) -> None:
    """``mlflow ui`` on the runs folder's store: the sweep's run, expanded, lists every trial with the
    parameters and the accuracy its run recorded."""
    record = json.loads((sweep / "sweep.json").read_text())
    experiment = httpx.get(f"{mlflow_server}/ajax-api/2.0/mlflow/experiments/get-by-name",
                           params={"experiment_name": "caffetool"}).json()["experiment"]
    assert {t["key"]: t["value"] for t in experiment["tags"]}["mlflow.experimentKind"] == "custom_model_development"
    trials = sorted(p.name for p in sweep.glob("trial-*"))
    page = new_page(1500, 560)
    page.goto(f"{mlflow_server}/#/experiments/{experiment['experiment_id']}/runs")
    page.get_by_text("hp", exact=True).wait_for(timeout=60_000)  # the sweep's run, its trials folded
    assert page.get_by_text(trials[0], exact=True).count() == 0
    page.locator("button[data-component-id='mlflow.assistant.chat_panel.close']").click()
    page.locator("button[data-component-id$='runnamecellrenderer.tsx_46']").first.click()  # unfold
    page.get_by_text(trials[-1], exact=True).wait_for()
    page.locator("button[data-testid='column-selection-dropdown']").first.click()
    columns = page.get_by_role("dialog")
    for label in ("Dataset", "Source", "Models", *MLFLOW_COLUMNS):
        columns.get_by_placeholder("Search columns").fill(label)
        title = re.compile(f"^{re.escape(label)}$")  # the column itself, not those it is part of
        columns.locator("[class*='tree-title']").filter(has_text=title).first.click()
    page.keyboard.press("Escape")
    rows = page.locator(".ag-center-cols-container .ag-row")
    assert rows.count() == TRIALS + 1
    shown = {}
    for row in rows.all():
        at = f".ag-pinned-left-cols-container .ag-row[row-index='{row.get_attribute('row-index')}']"
        name = page.locator(f"{at} [col-id='attributes.`Run Name`']").inner_text().split()[-1]
        shown[name] = {c: row.locator(f"[col-id$='`{c}`']").inner_text().strip() for c in MLFLOW_COLUMNS}
    assert sorted(shown) == sorted([*trials, "hp"])
    for trial in trials:
        params = manifest(sweep / trial)["sweep"]["params"]
        cells = shown[trial]
        assert float(cells["test0/accuracy"]) == pytest.approx(last_test(sweep / trial, "accuracy")[1], abs=1e-3)
        assert float(cells["base_lr"]) == pytest.approx(params["base_lr"], rel=1e-3)
        assert cells["type"] == params["type"] and cells["status"] == "finished"
    assert shown["hp"]["type"] == "SGD,Adam" and shown["hp"]["momentum"] == "uniform:0.8..0.95"
    best = record["best"]
    assert shown["hp"]["test0/accuracy"] == shown[best]["test0/accuracy"]
    screenshots.save(page, "mlflow-sweep.png")


def test_a_figure_of_the_untrained_net_names_no_best_trial(sweep: Path, tmp_path: Path) -> None:
    """A sweep stopped before any trial's first test past iteration 0 (its test_interval past where it
    got): the only figures are the untrained nets', at iteration 0, and rank no trial."""
    copy = tmp_path / "hp"
    shutil.copytree(sweep, copy, ignore=shutil.ignore_patterns("snapshots", "tune"))
    for record in copy.glob("*/metrics.json"):
        data = json.loads(record.read_text())
        data["test"] = {net: [row for row in rows if int(row["NumIters"]) == 0] for net, rows in data["test"].items()}
        assert all(data["test"].values())  # Caffe tested the untrained net (test_initialization)
        record.write_text(json.dumps(data))
    plan, rows = leaderboard.collect(copy)
    assert [r["metric"] for r in rows] == [None] * TRIALS
    assert leaderboard.text(rows, plan["metric"]).splitlines()[TRIALS + 1].startswith(
        "best: none (no trial measured the metric after training")


def test_importing_a_sweeps_folder_imports_each_trials_run(sweep: Path, tmp_path: Path) -> None:
    """What a sweep says to do when its store fails (``track.import SWEEP``): each trial's run is
    logged, none of the sweep's own files taken for a run."""
    copy = tmp_path / "hp"
    shutil.copytree(sweep, copy, ignore=shutil.ignore_patterns("snapshots", "tune"))
    store = f"sqlite:///{tmp_path / 'other.db'}"
    done = subprocess.run([str(CAFFETOOL), "track.import", str(copy), "--tracking-uri", store], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    imported = [line.split(":")[0] for line in done.stdout.splitlines() if line.startswith("imported ")]
    assert imported == [f"imported {r['trial']}" for r in sorted(results(sweep), key=lambda r: r["trial"])]
