"""``caffe test`` and ``caffe time`` through caffe_commands, on small nets, with the real binary."""

from __future__ import annotations

import pytest

from caffetool.engine import smoke
from caffetool.errors import RunError
from caffetool.train import caffe_commands

TEST_NET = smoke.NET + 'layer { name: "acc" type: "Accuracy" bottom: "ip" bottom: "label" top: "accuracy" }\n'


def test_caffe_time_reports_every_layer_and_the_averages(engine, tmp_path):
    net = tmp_path / "net.prototxt"
    net.write_text(smoke.NET)
    layers, averages = caffe_commands.caffe_time(engine, net, 2, [])
    assert {t.layer for t in layers} == {"data", "ip", "loss"}
    assert [t.total_ms for t in layers] == sorted((t.total_ms for t in layers), reverse=True)
    assert set(averages) == {"forward", "backward", "forward-backward"}


def test_caffe_time_on_a_net_caffe_refuses_names_the_check(engine, tmp_path):
    net = tmp_path / "net.prototxt"
    net.write_text(smoke.NET.replace("num_output: 2", "num_output: 0"))
    with pytest.raises(RunError, match=r"^caffe time failed \(killed by SIGABRT\): filler.hpp:\d+: "
                                       r"Check failed: blob->count\(\)$"):
        caffe_commands.caffe_time(engine, net, 2, [])


def test_caffe_test_gives_the_mean_of_each_output(engine, caffe, tmp_path):
    (tmp_path / "train_val.prototxt").write_text(TEST_NET)
    net = caffe.Net(str(tmp_path / "train_val.prototxt"), caffe.TEST)
    net.save(str(tmp_path / "w.caffemodel"))
    result = caffe_commands.caffe_test(engine, tmp_path, tmp_path / "w.caffemodel", 3, [])
    assert set(result.outputs) == {"accuracy", "loss"} and result.batches == 3
    assert 0 <= result.outputs["accuracy"] <= 1 and result.outputs["loss"] > 0


def test_caffe_test_without_the_weights_file_says_so(engine, tmp_path):
    (tmp_path / "train_val.prototxt").write_text(TEST_NET)
    gone = tmp_path / "gone.caffemodel"
    with pytest.raises(RunError) as err:
        caffe_commands.caffe_test(engine, tmp_path, gone, 1, [])
    assert str(err.value).startswith("caffe test failed (killed by SIGABRT): net.cpp:")
    assert str(err.value).endswith(f": Check failed: file_hid >= 0 (-1 vs. 0) Couldn't open {gone}")
