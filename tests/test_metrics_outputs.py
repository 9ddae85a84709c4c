"""Whatever a net outputs reaches the metrics files, the plots, the progress display and the report:
BVLC's autoencoder (two test nets, two losses, no accuracy) trained by the real `caffe train`."""

from __future__ import annotations

import csv
import io
import json

import pytest

from caffetool.runs import comparison, final_figures, metrics_io
from caffetool.runs.logparse import Metrics, parse_file
from caffetool.runs.runrecord import Manifest
from caffetool.train import plots, progress

from .caffe_root import autoencoder_log

OUTPUTS = ["cross_entropy_loss", "l2_error"]


@pytest.fixture(scope="module")
def autoencoder(engine, caffe, fashion_data, tmp_path_factory) -> Metrics:
    log, _ = autoencoder_log(engine, caffe, fashion_data, tmp_path_factory.mktemp("caffe-root"))
    return parse_file(log)


def test_each_test_net_and_output_is_parsed(autoencoder):
    m = autoencoder
    assert m.net_name == "MNISTAutoencoder" and m.done
    assert sorted(m.test) == [0, 1]
    for net in (0, 1):
        assert [r["NumIters"] for r in m.test[net]] == [0, 20]
        assert all(set(r) == {"NumIters", "Seconds", "LearningRate", *OUTPUTS} for r in m.test[net])
    assert [r["NumIters"] for r in m.train] == [0, 10, 20, 30]
    assert all(set(OUTPUTS) <= set(r) for r in m.train[:3]) and "iter_per_s" not in m.train[0]
    assert all(r["iter_per_s"] > 0 for r in m.train[1:3])
    assert m.test[0][0]["cross_entropy_loss"] != m.test[1][0]["cross_entropy_loss"]  # train vs test data


def test_the_metrics_files_hold_every_output(autoencoder, tmp_path):
    metrics_io.write_csv(autoencoder, tmp_path / "metrics.csv")
    metrics_io.write_json(autoencoder, tmp_path / "metrics.json")
    table = list(csv.DictReader(open(tmp_path / "metrics.csv")))
    assert set(OUTPUTS) <= set(table[0])
    assert [(r["phase"], r["net"], r["NumIters"]) for r in table if r["phase"] == "test"] == [
        ("test", "0", "0"), ("test", "0", "20"), ("test", "1", "0"), ("test", "1", "20")]
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["test"]["1"][1]["l2_error"] == autoencoder.test[1][1]["l2_error"]


def test_the_plots_draw_every_output_without_an_accuracy_axis(autoencoder, tmp_path):
    assert [label for label, *_ in plots.curves(autoencoder)] == [
        "train cross_entropy_loss", "train l2_error", "test #0 cross_entropy_loss", "test #0 l2_error",
        "test #1 cross_entropy_loss", "test #1 l2_error"]
    paths = plots.write_plots(autoencoder, tmp_path, "autoencoder")
    assert [p.name for p in paths] == list(plots.FILES) and all(p.stat().st_size > 10_000 for p in paths)


def test_a_classifiers_curves_keep_their_names():
    m = Metrics(train=[{"NumIters": 0, "smoothed_loss": 2.0, "loss": 2.0}],
                test={0: [{"NumIters": 0, "accuracy": 0.1, "loss": 2.3}]})
    assert [label for label, *_ in plots.curves(m)] == ["train loss", "test #0 accuracy", "test #0 loss"]


def test_progress_shows_each_test_nets_outputs(autoencoder):
    out = io.StringIO()
    lines = progress.ProgressLines(30, out=out, clock=lambda: 0.0)
    lines.show(autoencoder)
    m = autoencoder
    figures = ", ".join(f"test#{net} {k} {m.test[net][-1][k]:.4f}" for net in (0, 1) for k in OUTPUTS)
    assert out.getvalue() == f"iteration 30/30 (100%): loss {m.train[-1]['smoothed_loss']:.4f}, {figures}\n"


def test_the_report_has_a_column_for_each_test_output(autoencoder):
    manifest = Manifest(name="ae", status="finished", iterations=30, timings_s={"solving": 3.0},
                        device={"label": "CPU"}, final=final_figures.last_figures(autoencoder))
    classifier = Manifest(name="lenet", status="finished", iterations=30, timings_s={"solving": 1.5},
                          device={"label": "CPU"}, final={"test0": {"NumIters": 30, "accuracy": 0.7, "loss": 0.8}})
    t = comparison.table([manifest, classifier])
    assert t.columns == ["run", "device(s)", "iterations", "wall time", "iter/s",
                         "test #0 cross_entropy_loss", "test #0 l2_error", "test #1 cross_entropy_loss",
                         "test #1 l2_error", "test #0 accuracy", "test #0 loss", "tested at", "speed-up"]
    l2 = autoencoder.test[1][-1]["l2_error"]
    assert t.cells[0][8] == f"{l2:.4f}" and t.cells[0][-2:] == ["20", "1.00x"]
    assert t.cells[1][5:] == ["—", "—", "—", "—", "0.7000", "0.8000", "30", "2.00x"]
    alone = comparison.table([classifier])
    assert alone.columns[5:] == ["test accuracy", "test loss", "tested at", "speed-up"]
    assert comparison.text(alone).splitlines()[1].split() == ["lenet", "CPU", "30", "1.5", "s", "20.0", "0.7000",
                                                          "0.8000", "30", "1.00x"]
