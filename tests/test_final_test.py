"""The final figure is measured at the last iteration: `caffe test` on every test net Caffe did not
test there, with the nets, stages and batches the solver gives them."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys

from caffetool.engine.locate import caffe_env
from caffetool.nets import testnets
from caffetool.nets.solvers import SolverOptions
from caffetool.runs import final_figures
from caffetool.runs.logparse import parse_file
from caffetool.train import caffe_commands, final_test, session

from .caffe_root import AUTOENCODER, autoencoder_log
from .conftest import PROJECT

DUMMY_NET = """name: "dummy"
layer { name: "data" type: "DummyData" top: "data" top: "label"
  dummy_data_param { shape { dim: 4 dim: 3 } shape { dim: 4 }
    data_filler { type: "gaussian" } data_filler { type: "constant" value: 1 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param { num_output: 2 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""


def quick_run(engine, fashion_data, tmp_path, name: str, **solver) -> session.TrainResult:
    request = session.TrainRequest(data_dir=fashion_data.path.parent, runs_dir=tmp_path, name=name,
                                   options=SolverOptions(test_iter=5, display=10, **solver))
    result = session.train(engine, request, say=lambda _: None, progress=False)
    assert result.outcome.status == "finished", result.outcome.message
    return result


def test_a_run_ending_between_tests_is_tested_at_its_last_iteration(engine, fashion_data, tmp_path):
    """max_iter 30 with test_interval 20: Caffe tests at 0 and 20 only; the run ends with `caffe test`
    on the weights of iteration 30, and says so."""
    done = subprocess.run([sys.executable, "-m", "invoke", "train", "--data-dir", str(fashion_data.path.parent),
                           "--runs-dir", str(tmp_path), "--name", "r30", "--max-iter", "30", "--test-interval", "20",
                           "--test-iter", "5", "--display", "10"],
                          cwd=PROJECT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    run = tmp_path / "r30"
    expected = caffe_commands.caffe_test(engine, run, run / "snapshots/lenet_iter_30.caffemodel", 5, [])
    final = json.loads((run / "manifest.json").read_text())["final"]
    assert final["measured_by"] == {"test0": "caffe test"} and "not_measured" not in final
    assert final["test0"]["NumIters"] == 30
    assert (final["test0"]["accuracy"], final["test0"]["loss"]) == (expected.outputs["accuracy"], expected.outputs["loss"])
    rows = [r for r in csv.DictReader(open(run / "metrics.csv")) if r["phase"] == "test"]
    assert [(r["NumIters"], r["accuracy"]) for r in rows][-1] == ("30", str(expected.outputs["accuracy"]))
    assert [r["NumIters"] for r in rows] == ["0", "20", "30"]
    assert "testing the weights of iteration 30: test net #0 (5 batches)" in done.stdout
    assert (f"final test: iteration 30: accuracy {expected.outputs['accuracy']:.4f}, "
            f"loss {expected.outputs['loss']:.4f} (caffe test)") in done.stdout
    assert "final_test" in json.loads((run / "manifest.json").read_text())["timings_s"]
    kept = (run / "caffe_test.log").read_text()
    assert kept.startswith("==> the final test of test net #0 at iteration 30 <==\n")
    assert f"accuracy = {expected.outputs['accuracy']:g}" in kept


def test_caffes_own_test_at_the_last_iteration_is_kept(engine, fashion_data, tmp_path):
    result = quick_run(engine, fashion_data, tmp_path, "r40", max_iter=40, test_interval=20)
    final = result.manifest.final
    logged = parse_file(result.run_dir / "caffe.log").test[0][-1]
    assert final["measured_by"] == {"test0": "caffe train"}
    assert final["test0"] == logged and logged["NumIters"] == 40
    assert "final_test" in result.manifest.timings_s
    assert final_figures.summary(final) == [f"final test: iteration 40: accuracy {logged['accuracy']:.4f}, "
                                       f"loss {logged['loss']:.4f}"]


def test_a_resumed_run_keeps_the_figure_measured_before(fashion_data, tmp_path, engine):
    result = quick_run(engine, fashion_data, tmp_path, "resumed", max_iter=30, test_interval=20)
    measured = result.manifest.final["test0"]
    again = session.resume(engine, result.run_dir, max_iter=50, progress=False, say=lambda _: None)
    assert again.outcome.status == "finished"
    tests = json.loads((result.run_dir / "metrics.json").read_text())["test"]["0"]
    assert [r["NumIters"] for r in tests] == [0, 20, 30, 40, 50]
    assert tests[2] == measured
    assert again.manifest.final["test0"]["NumIters"] == 50


def test_every_test_net_of_the_autoencoder_is_measured_with_its_stage(engine, caffe, fashion_data, tmp_path):
    """BVLC's autoencoder: two test nets of one net file, told apart by test_state stages."""
    log, solver = autoencoder_log(engine, caffe, fashion_data, tmp_path)
    m = parse_file(log)
    said = []
    final = final_test.measure(engine, tmp_path, solver, m, [], caffe.proto.caffe_pb2, say=said.append)
    assert final.measured_by == {"test0": "caffe test", "test1": "caffe test"} and final.not_measured is None
    assert said == ["testing the weights of iteration 30: test net #0 (5 batches), test net #1 (3 batches)"]
    for net, stage, batches in ((0, "test-on-train", 5), (1, "test-on-test", 3)):
        done = subprocess.run([str(engine.caffe), "test", f"-model={AUTOENCODER}", f"-stage={stage}",
                               "-weights=examples/mnist/mnist_autoencoder_iter_30.caffemodel",
                               f"-iterations={batches}"], cwd=tmp_path, capture_output=True, text=True,
                              env=caffe_env())
        assert done.returncode == 0, done.stderr[-1000:]
        means = dict(re.findall(r"\] (cross_entropy_loss|l2_error) = ([-\d.e+]+)", done.stderr)[-2:])
        assert len(means) == 2
        row = m.test[net][-1]
        assert row["NumIters"] == 30
        assert {k: row[k] for k in means} == {k: float(v) for k, v in means.items()}
    assert [r["NumIters"] for r in m.test[1]] == [0, 20, 30]


def test_the_test_nets_are_built_in_caffes_order(caffe, tmp_path):
    """test_net_param, then test_net files, then the generic net for the remaining test_iter entries;
    each in the TEST phase with its test_state."""
    (tmp_path / "a.prototxt").write_text(DUMMY_NET.replace('name: "dummy"', 'name: "a"'))
    (tmp_path / "b.prototxt").write_text(DUMMY_NET.replace('name: "dummy"', 'name: "b"'))
    (tmp_path / "solver.prototxt").write_text(
        'test_net: "a.prototxt"\nnet: "b.prototxt"\ntest_iter: 2\ntest_iter: 3\ntest_iter: 4\n'
        'test_state { stage: "x" }\ntest_state { stage: "y" level: 2 }\ntest_state { }\n')
    nets = testnets.test_nets(tmp_path / "solver.prototxt", tmp_path, caffe.proto.caffe_pb2)
    assert [(t.index, t.source, t.batches, t.net.name) for t in nets] == [
        (0, "test_net a.prototxt", 2, "a"), (1, "net b.prototxt", 3, "b"), (2, "net b.prototxt", 4, "b")]
    assert [(list(t.net.state.stage), t.net.state.level, t.net.state.phase) for t in nets] == [
        (["x"], 0, caffe.TEST), (["y"], 2, caffe.TEST), ([], 0, caffe.TEST)]


def test_without_weights_at_the_last_iteration_the_figure_is_not_measured(engine, caffe, tmp_path):
    (tmp_path / "net.prototxt").write_text(DUMMY_NET)
    (tmp_path / "solver.prototxt").write_text(
        'net: "net.prototxt"\ntest_iter: 2\ntest_interval: 10\nbase_lr: 0.1\nlr_policy: "fixed"\n'
        "display: 5\nmax_iter: 15\nsnapshot_after_train: false\n")
    done = subprocess.run([str(engine.caffe), "train", "-solver=solver.prototxt"], cwd=tmp_path,
                          capture_output=True, text=True, env=caffe_env())
    assert done.returncode == 0, done.stderr[-1000:]
    (tmp_path / "caffe.log").write_text(done.stderr)
    m = parse_file(tmp_path / "caffe.log")
    final = final_test.measure(engine, tmp_path, tmp_path / "solver.prototxt", m, [], caffe.proto.caffe_pb2,
                             say=lambda _: None)
    assert (final.measured_by, final.not_measured) == ({}, "no weights were saved at iteration 15")
    record = final_figures.last_figures(m) | final.record()
    loss = m.test[0][-1]["loss"]
    assert final_figures.summary(record) == [f"final test: iteration 10: loss {loss:.4f}",
                                        "            not measured at iteration 15: no weights were saved at iteration 15"]


def test_a_run_that_did_not_finish_names_its_last_test_as_such():
    final = {"iteration": 25, "test0": {"NumIters": 0, "Seconds": 0.1, "LearningRate": 0.01, "accuracy": 0.1}}
    assert final_figures.summary(final, finished=False) == ["last test:  iteration 0: accuracy 0.1000"]
    assert final_figures.summary(final) == ["final test: iteration 0: accuracy 0.1000"]
