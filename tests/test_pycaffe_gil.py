"""pycaffe's forward and backward passes let go of the GIL (engine patch 0007): other Python threads
run during a pass, and a net with a Python layer still runs from any thread (the layer takes the GIL
back), answering what it answers on the main thread."""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pytest

from .test_nets_check import LAYER_MODULE

pytestmark = pytest.mark.engine

HEAVY = """name: "heavy"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 256 dim: 3 dim: 64 dim: 64 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
  convolution_param { num_output: 64 kernel_size: 5 weight_filler { type: "gaussian" std: 0.01 } } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" }
"""
WITH_PYTHON = """name: "python"
force_backward: true
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 4 dim: 3 } } }
layer { name: "double" type: "Python" bottom: "data" top: "double"
  python_param { module: "doubling" layer: "Double" } }
layer { name: "ip" type: "InnerProduct" bottom: "double" top: "ip"
  inner_product_param { num_output: 2 weight_filler { type: "constant" value: 1 } } }
"""


def test_other_threads_run_during_a_forward_pass(caffe, tmp_path):
    (tmp_path / "heavy.prototxt").write_text(HEAVY)
    caffe.set_mode_cpu()
    net = caffe.Net(str(tmp_path / "heavy.prototxt"), caffe.TEST)
    net.blobs["data"].data[...] = np.random.default_rng(0).random(net.blobs["data"].data.shape)
    net.forward()  # first touch of every buffer
    alone = min(_timed(net.forward) for _ in range(2))
    assert alone > 0.05, f"a pass of {alone * 1e3:.1f} ms is too short to tell"

    passes = threading.Thread(target=lambda: [net.forward() for _ in range(3)])
    beats = []
    passes.start()
    while passes.is_alive():
        beats.append(time.perf_counter())  # this thread runs Python only while the passes let it
    passes.join()
    gaps = np.diff(beats)
    stalled = gaps[gaps > alone / 10].sum()  # gaps long enough to be a pass (or the scheduler)
    span = beats[-1] - beats[0]
    # holding the GIL, the passes would stall this loop for all their time; letting go of it, only the
    # scheduler stalls it now and then (on two busy cores, for up to tens of milliseconds)
    assert len(beats) > 1000 and stalled < span / 2, (len(beats), stalled, span, alone)


def _timed(step) -> float:
    started = time.perf_counter()
    step()
    return time.perf_counter() - started


def test_a_python_layer_runs_from_a_worker_thread_while_others_run_python(caffe, tmp_path, monkeypatch):
    (tmp_path / "doubling.py").write_text(LAYER_MODULE)
    (tmp_path / "net.prototxt").write_text(WITH_PYTHON)
    monkeypatch.syspath_prepend(str(tmp_path))
    caffe.set_mode_cpu()
    net = caffe.Net(str(tmp_path / "net.prototxt"), caffe.TEST)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    expected = np.full((4, 2), 0.0, np.float32) + 2 * x.sum(1, keepdims=True)
    answers, errors = [], []

    def work() -> None:
        try:
            for _ in range(50):
                net.blobs["data"].data[...] = x
                answers.append(net.forward()["ip"].copy())
                net.blobs["ip"].diff[...] = 1
                net.backward()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    worker = threading.Thread(target=work)
    worker.start()
    spins = 0
    while worker.is_alive():
        spins += sum(range(100))  # Python on this thread throughout
    worker.join()
    assert errors == [] and len(answers) == 50
    assert all(np.array_equal(a, expected) for a in answers)
    assert np.array_equal(net.blobs["data"].diff, np.full((4, 3), 4.0, np.float32))  # 2 x (1 + 1)
    assert "doubling" in sys.modules
