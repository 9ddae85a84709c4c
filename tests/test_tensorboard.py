"""TensorBoard event files of runs, read back with TensorBoard's own reader."""

from __future__ import annotations

import copy

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from caffetool.errors import RunError
from caffetool.nets.solvers import SolverOptions
from caffetool.runs.folder import RunFolder
from caffetool.runs.logparse import Metrics, parse_file
from caffetool.train import runevents, session

from .caffe_root import autoencoder_log
from .smalldisk import small_disk


def read(folder) -> EventAccumulator:
    events = EventAccumulator(str(folder))
    events.Reload()
    return events


def steps(events: EventAccumulator, tag: str) -> list[int]:
    return [e.step for e in events.Scalars(tag)]


def values(events: EventAccumulator, tag: str) -> list[float]:
    return [e.value for e in events.Scalars(tag)]


@pytest.fixture(scope="module")
def autoencoder(engine, caffe, fashion_data, tmp_path_factory) -> Metrics:
    log, _ = autoencoder_log(engine, caffe, fashion_data, tmp_path_factory.mktemp("caffe-root"))
    return parse_file(log)


def test_a_training_writes_every_figure_for_tensorboard(engine, fashion_data, tmp_path):
    request = session.TrainRequest(data_dir=fashion_data.path.parent, runs_dir=tmp_path, name="tb",
                                   options=SolverOptions(max_iter=60, test_interval=40, test_iter=100, display=10))
    result = session.train(engine, request, say=lambda _: None, progress=False)
    assert result.outcome.status == "finished", result.outcome.message
    events = read(RunFolder(result.run_dir).tensorboard)
    assert set(events.Tags()["scalars"]) >= {
        "train/loss", "train/smoothed_loss", "train/lr", "train/iter_per_s", "test0/accuracy", "test0/loss",
        "system/cpu_percent", "system/rss_mb"}
    m = parse_file(result.run_dir / "caffe.log")
    assert steps(events, "train/loss") == [0, 10, 20, 30, 40, 50]
    assert values(events, "train/loss") == pytest.approx([r["loss"] for r in m.train if "loss" in r], rel=1e-6)
    assert steps(events, "train/lr") == [0, 10, 20, 30, 40, 50, 60]
    assert steps(events, "test0/accuracy") == [0, 40, 60]  # 60: measured by `caffe test` at the end
    assert values(events, "test0/accuracy")[-1] == pytest.approx(result.manifest.final["test0"]["accuracy"])
    assert all(0 <= step <= 60 for step in steps(events, "system/cpu_percent"))
    assert all(value > 10 for value in values(events, "system/rss_mb"))


def test_every_output_of_every_test_net_is_a_scalar(autoencoder, tmp_path):
    events = runevents.RunEvents(tmp_path, Metrics())
    events.update(autoencoder)
    events.close()
    read_back = read(tmp_path)
    outputs = ("cross_entropy_loss", "l2_error")
    assert sorted(read_back.Tags()["scalars"]) == sorted(
        [f"train/{k}" for k in outputs] + ["train/smoothed_loss", "train/lr", "train/iter_per_s"]
        + [f"test{net}/{k}" for net in (0, 1) for k in outputs])
    assert steps(read_back, "test1/l2_error") == [0, 20]
    assert values(read_back, "test1/l2_error") == pytest.approx([r["l2_error"] for r in autoencoder.test[1]])
    assert steps(read_back, "train/iter_per_s") == [10, 20]


def test_a_resumed_session_adds_a_file_without_writing_rows_again(autoencoder, tmp_path):
    m = copy.deepcopy(autoencoder)
    first = runevents.RunEvents(tmp_path, Metrics())
    first.update(m)
    first.close()
    second = runevents.RunEvents(tmp_path, m)
    second.update(m)
    m.add_test(1, {"NumIters": 30, "l2_error": 1.5})
    second.update(m)
    second.close()
    assert len(list(tmp_path.glob(runevents.PATTERN))) == 2
    read_back = read(tmp_path)
    assert steps(read_back, "test1/l2_error") == [0, 20, 30]
    assert steps(read_back, "test0/l2_error") == [0, 20]


def test_a_full_disk_is_named(autoencoder, tmp_path):
    with small_disk(tmp_path / "disk", "1m") as disk:
        events = runevents.RunEvents(disk / "tb", Metrics())
        with open(disk / "filler", "wb", buffering=0) as filler, pytest.raises(OSError):
            while True:
                filler.write(b"\0" * 65536)
        with pytest.raises(RunError) as err:
            events.update(autoencoder)
            events.close()
        assert str(err.value) == f"cannot write the TensorBoard events in {disk / 'tb'}: No space left on device"
        events.discard()
