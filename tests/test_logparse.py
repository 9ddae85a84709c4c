"""The log parser against a real Caffe log with two test nets, and against broken logs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from caffetool.engine.locate import caffe_env
from caffetool.errors import RunError
from caffetool.runs.logparse import LogParser, outputs, parse_file

PROJECT = Path(__file__).resolve().parent.parent

DUMMY_NET = """name: "{name}"
layer {{ name: "data" type: "DummyData" top: "data" top: "label"
  dummy_data_param {{ shape {{ dim: 8 dim: 6 }} shape {{ dim: 8 }}
    data_filler {{ type: "gaussian" }} data_filler {{ type: "constant" value: 1 }} }} }}
layer {{ name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param {{ num_output: 3 weight_filler {{ type: "xavier" }} }} }}
layer {{ name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }}
layer {{ name: "acc" type: "Accuracy" bottom: "ip" bottom: "label" top: "accuracy" }}
"""


@pytest.fixture(scope="module")
def two_test_nets_log(tmp_path_factory, engine):
    """A real `caffe train` log whose solver has two test nets (#0 and #1)."""
    folder = tmp_path_factory.mktemp("twotest")
    for name in ("train", "t1", "t2"):
        (folder / f"{name}.prototxt").write_text(DUMMY_NET.format(name=name))
    (folder / "solver.prototxt").write_text(
        'train_net: "train.prototxt"\ntest_net: "t1.prototxt"\ntest_net: "t2.prototxt"\n'
        "test_iter: 2\ntest_iter: 3\ntest_interval: 20\nbase_lr: 0.1\nlr_policy: \"step\"\n"
        "gamma: 0.5\nstepsize: 10\ndisplay: 10\nmax_iter: 40\nsnapshot_after_train: false\n")
    done = subprocess.run([str(engine.caffe), "train", "-solver=solver.prototxt"], cwd=folder,
                          capture_output=True, text=True, env=caffe_env())
    assert done.returncode == 0, done.stderr[-1000:]
    log = folder / "caffe.log"
    log.write_text(done.stderr)
    return log


def test_two_test_nets_are_kept_apart(two_test_nets_log):
    m = parse_file(two_test_nets_log)
    assert m.net_name == "train" and m.done
    assert sorted(m.test) == [0, 1]
    for net in (0, 1):
        assert [r["NumIters"] for r in m.test[net]] == [0, 20, 40]
        assert all({"accuracy", "loss"} <= set(r) for r in m.test[net])
    assert [r["NumIters"] for r in m.train] == [0, 10, 20, 30, 40]
    # step policy: lr 0.1 halves every 10 iterations
    assert [r["LearningRate"] for r in m.train[:4]] == pytest.approx([0.1, 0.05, 0.025, 0.0125])
    seconds = [r["Seconds"] for r in m.train]
    assert seconds == sorted(seconds) and seconds[0] >= 0


def test_rows_match_the_log_lines(two_test_nets_log):
    text = two_test_nets_log.read_text()
    m = parse_file(two_test_nets_log)
    losses = [float(x) for x in re.findall(r"Train net output #\d+: loss = (\S+)", text)]
    assert len(losses) == 4  # the final "Iteration 40, loss" line has no net outputs
    assert [r["loss"] for r in m.train if "loss" in r] == losses


def test_truncated_log_gives_the_whole_rows(two_test_nets_log, tmp_path):
    text = two_test_nets_log.read_text()
    cut = text.index("Iteration 30") + 5
    (tmp_path / "cut.log").write_text(text[:cut])
    m = parse_file(tmp_path / "cut.log")
    assert not m.done
    assert [r["NumIters"] for r in m.train] == [0, 10, 20]
    assert [r["NumIters"] for r in m.test[1]] == [0, 20]


def test_garbled_lines_are_skipped(two_test_nets_log, tmp_path):
    lines = two_test_nets_log.read_text().splitlines()
    noisy = []
    for i, line in enumerate(lines):
        noisy.append(line)
        if i % 7 == 0:
            noisy += ["\x00\xff garbage", "I1122 99:99:99.0 1 x.cpp:1] Iteration 5, loss = 1",
                      "I1122 10:00:00.000000 1 solver.cpp:1] Iteration 12, loss = not-a-number"]
    (tmp_path / "noisy.log").write_text("\n".join(noisy), errors="surrogateescape")
    clean, dirty = parse_file(two_test_nets_log), parse_file(tmp_path / "noisy.log")
    assert [r["NumIters"] for r in dirty.train] == [r["NumIters"] for r in clean.train]
    assert {k: [r["NumIters"] for r in v] for k, v in dirty.test.items()} == \
        {k: [r["NumIters"] for r in v] for k, v in clean.test.items()}


def feed(lines: list[str], year: int = 2025) -> LogParser:
    parser = LogParser(year)
    parser.feed_all(lines)
    return parser


def test_midnight_and_new_year_without_a_year_in_the_prefix():
    m = feed(["I1231 23:59:59.500000  7 solver.cpp:1] Solving X",
              "I1231 23:59:59.900000  7 solver.cpp:1] Iteration 0, loss = 2",
              "I0101 00:00:01.000000  7 solver.cpp:1] Iteration 10, loss = 1"]).metrics
    assert [r["Seconds"] for r in m.train] == [0.4, 1.5]
    assert m.last_time.year == 2026


def test_midnight_with_the_year_in_the_prefix():
    m = feed(["I20261231 23:59:58.000000 7 solver.cpp:1] Solving X",
              "I20270101 00:00:02.250000 7 solver.cpp:1] Iteration 0, loss = 2"]).metrics
    assert m.train[0]["Seconds"] == 4.25


def test_a_resumed_run_continues_the_seconds():
    m = feed(["I20260101 10:00:00.000000 7 s.cpp:1] Solving X",
              "I20260101 10:00:10.000000 7 s.cpp:1] Iteration 100, loss = 1",
              "I20260101 12:00:00.000000 7 s.cpp:1] Solving X",
              "I20260101 12:00:05.000000 7 s.cpp:1] Iteration 200, loss = 0.5"]).metrics
    assert [r["Seconds"] for r in m.train] == [10.0, 15.0]


def test_the_engines_thread_changes_are_kept_with_their_iteration():
    """The lines patch 0009 writes as it re-sizes its team, among the solver's (from a run beside a
    busy loop that ended at iteration 300)."""
    m = feed(["I20261127 15:25:49.999598 15488 solver.cpp:289] Solving LeNet",
              "I20261127 15:25:50.255283 15488 thread_share.cpp:248] Threads: 1 (2 cores allowed, others busy on "
              "1.2, at most 2)",
              "I20261127 15:25:51.744036 15488 sgd_solver.cpp:112] Iteration 0, lr = 0.01",
              "I20261127 15:25:56.491566 15488 solver.cpp:228] Iteration 300 (80.1 iter/s, 1.25s/100 iters), "
              "loss = 0.6",
              "I20261127 15:25:57.102000 15488 thread_share.cpp:248] Threads: 2 (2 cores allowed, others busy on "
              "0.1, at most 2)"]).metrics
    assert m.threads == [(0, 1), (300, 2)]


def test_nan_loss_marks_divergence_after_the_last_good_iteration():
    m = feed(["I20260101 10:00:00.000000 7 s.cpp:1] Solving X",
              "I20260101 10:00:01.000000 7 s.cpp:1] Iteration 10, loss = 0.5",
              "I20260101 10:00:02.000000 7 s.cpp:1] Iteration 20, loss = nan"]).metrics
    assert (m.last_good, m.diverged_at) == (10, 20)


def parse_task(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", "train.parse", *args], cwd=PROJECT,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("content, why", [
    (b"", "it is empty"),
    (bytes(range(256)) * 40, "it has no glog line (I0101 10:00:00.000000 ...)"),
    (b"Iteration 10, loss = 0.5\nsome other tool's log\n", "it has no glog line (I0101 10:00:00.000000 ...)"),
])
def test_a_file_that_is_no_caffe_log_is_refused(tmp_path, content, why):
    log = tmp_path / "x.log"
    log.write_bytes(content)
    with pytest.raises(RunError) as err:
        parse_file(log)
    assert str(err.value) == f"{log} is not a Caffe log: {why}"


def test_a_directory_or_a_missing_file_is_refused(tmp_path):
    with pytest.raises(RunError) as err:
        parse_file(tmp_path)
    assert str(err.value) == f"{tmp_path} is a directory; give a Caffe log file (a run's caffe.log)"
    with pytest.raises(RunError) as err:
        parse_file(tmp_path / "gone.log")
    assert str(err.value) == f"{tmp_path / 'gone.log'} does not exist; give a Caffe log file (a run's caffe.log)"


def test_a_log_with_glog_lines_but_no_training_is_read():
    m = feed(["I20260101 10:00:00.000000 7 caffe.cpp:1] Use CPU."]).metrics
    assert (m.train, m.test, m.done) == ([], {}, False)


@pytest.mark.parametrize("make, message", [
    (lambda p: p.write_bytes(b""), "{log} is not a Caffe log: it is empty"),
    (lambda p: p.write_bytes(bytes(range(256)) * 4), "{log} is not a Caffe log: it has no glog line"),
    (lambda p: p.mkdir(), "{log} is a directory; give a Caffe log file"),
    (lambda p: None, "{log} does not exist; give a Caffe log file"),
])
def test_the_parse_task_says_error_and_writes_nothing(tmp_path, make, message):
    log, out = tmp_path / "caffe.log", tmp_path / "out"
    make(log)
    done = parse_task(str(log), "--out", str(out))
    assert done.returncode == 1
    assert done.stderr.startswith("Error: " + message.format(log=log)), done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert not out.exists()


def test_the_parse_task_writes_the_metrics_of_a_real_log(two_test_nets_log, tmp_path):
    done = parse_task(str(two_test_nets_log), "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("train: 5 train rows, net #0: 3 tests, net #1: 3 tests; finished -> ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["caffe.metrics.csv", "caffe.metrics.json"]


def test_the_parse_task_with_a_file_as_out_folder_says_error(two_test_nets_log, tmp_path):
    blocker = tmp_path / "taken"
    blocker.write_text("a file")
    done = parse_task(str(two_test_nets_log), "--out", str(blocker))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    csv = blocker / "caffe.metrics.csv"
    assert done.stderr.startswith(f"Error: cannot write {csv}: {blocker} is a file, not a folder")


def test_the_first_display_line_counts_whatever_its_rate_says():
    """Caffe computes the first rate of a session from an unset counter: "-nan", or any number."""
    m = feed(["I20260101 10:00:00.000000 7 s.cpp:1] Solving X",
              "I20260101 10:00:01.000000 7 s.cpp:1] Iteration 0 (-nan iter/s, 0.149s/10 iters), loss = 2",
              "I20260101 10:00:02.000000 7 s.cpp:1] Iteration 10 (10.5 iter/s, 0.95s/10 iters), loss = 1",
              "I20260101 10:00:03.000000 7 s.cpp:1] Solving X",
              "I20260101 10:00:04.000000 7 s.cpp:1] Iteration 10 (-6.1e+16 iter/s, 0.1s/10 iters), loss = 1",
              "I20260101 10:00:05.000000 7 s.cpp:1] Iteration 20 (inf iter/s, 0s/10 iters), loss = 0.5"]).metrics
    assert [(r["NumIters"], r.get("iter_per_s")) for r in m.train] == [(0, None), (10, 10.5), (10, None),
                                                                      (20, float("inf"))]


def test_any_outputs_of_any_number_of_test_nets_are_kept():
    m = feed(["I20260101 10:00:00.000000 7 s.cpp:1] Solving X",
              "I20260101 10:00:01.000000 7 s.cpp:1] Iteration 0, Testing net (#0)",
              "I20260101 10:00:01.000000 7 s.cpp:1] Test loss: 968.062",
              "I20260101 10:00:01.000000 7 s.cpp:1]     Test net output #0: cross_entropy_loss = 968.062 (* 1 = 968.062 loss)",
              "I20260101 10:00:01.000000 7 s.cpp:1]     Test net output #1: l2_error = 114.274",
              "I20260101 10:00:02.000000 7 s.cpp:1] Iteration 0, Testing net (#2)",
              "I20260101 10:00:02.000000 7 s.cpp:1]     Test net output #0: top-5 = 0.5",
              "I20260101 10:00:03.000000 7 s.cpp:1] Iteration 0, loss = 968.483",
              "I20260101 10:00:03.000000 7 s.cpp:1]     Train net output #0: cross_entropy_loss = 968.483 (* 1 = 968.483 loss)",
              "I20260101 10:00:03.000000 7 s.cpp:1]     Train net output #1: l2_error = 115.056"]).metrics
    assert {net: [{k: v for k, v in r.items() if k != "Seconds"} for r in rows] for net, rows in m.test.items()} == {
        0: [{"NumIters": 0, "LearningRate": None, "cross_entropy_loss": 968.062, "l2_error": 114.274}],
        2: [{"NumIters": 0, "LearningRate": None, "top-5": 0.5}]}
    assert m.train == [{"NumIters": 0, "Seconds": 3.0, "LearningRate": None, "smoothed_loss": 968.483,
                        "cross_entropy_loss": 968.483, "l2_error": 115.056}]
    assert outputs(m.train) == ["cross_entropy_loss", "l2_error"]


def test_a_test_row_measured_after_the_log_goes_in_iteration_order_once():
    m = feed(["I20260101 10:00:00.000000 7 s.cpp:1] Solving X",
              "I20260101 10:00:01.000000 7 s.cpp:1] Iteration 20, Testing net (#0)",
              "I20260101 10:00:01.000000 7 s.cpp:1]     Test net output #0: accuracy = 0.5"]).metrics
    assert m.add_test(0, {"NumIters": 10, "accuracy": 0.4}) and m.add_test(0, {"NumIters": 30, "accuracy": 0.6})
    assert not m.add_test(0, {"NumIters": 20, "accuracy": 0.9})
    assert [(r["NumIters"], r["accuracy"]) for r in m.test[0]] == [(10, 0.4), (20, 0.5), (30, 0.6)]


def test_the_train_loss_is_the_last_lines_even_without_outputs():
    """The final iteration's line carries only Caffe's loss; it is the run's last train loss."""
    lines = [
        "I1123 11:29:14.000000 10735 solver.cpp:294] Solving LeNet",
        "I1123 11:29:18.000000 10735 solver.cpp:218] Iteration 200 (45.0 iter/s, 2.2s/100 iters), loss = 0.3392",
        "I1123 11:29:18.000001 10735 solver.cpp:237]     Train net output #0: loss = 0.3392 (* 1 = 0.3392 loss)",
        "I1123 11:29:18.000002 10735 sgd_solver.cpp:105] Iteration 200, lr = 0.00985",
        "I1123 11:29:20.622779 10735 solver.cpp:327] Iteration 300, loss = 0.568284",
        "I1123 11:29:20.622867 10735 solver.cpp:332] Optimization Done.",
    ]
    m = LogParser().feed_all(lines)
    assert [r["NumIters"] for r in m.train] == [200, 300]
    assert m.train_loss() == 0.568284
    assert m.latest("loss", -1) == 0.3392
