"""caffetool.backends: the suite's trained LeNet (its deploy net and weights) through every backend on
real Fashion-MNIST test records, against pycaffe; the refusals the backend table drives."""

from __future__ import annotations

import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest

from caffetool.backends import dispatch
from caffetool.backends.devices import PycaffeDevice
from caffetool.backends.loaded import ModelSource
from caffetool.errors import ConfigError
from caffetool.export import served
from caffetool.inference import modelfiles, records
from caffetool.tasks import demo, evaluate

BLOBS = ["ip2", "prob"]  # LeNet's scores (what its Softmax reads) and probabilities
TOLERANCE = 1e-4  # of each blob's scale, as the export's verification takes it


@pytest.fixture(scope="module")
def run_copy(trained_run, tmp_path_factory) -> Path:
    """A copy of the suite's trained run: the export backends write its export folder."""
    return Path(shutil.copytree(trained_run, tmp_path_factory.mktemp("backends") / trained_run.name))


@pytest.fixture(scope="module")
def blob(caffe, run_copy) -> np.ndarray:
    """The first 50 test records, as Caffe's TEST transform feeds them."""
    src = records.source(run_copy, "test", caffe.proto.caffe_pb2)
    return next(records.batches(src, caffe.proto.caffe_pb2, 50, (1, 28, 28))).blob


@pytest.fixture(scope="module")
def pycaffes(engine, run_copy, blob) -> dict[str, np.ndarray]:
    return served.load(engine, modelfiles.from_run(run_copy), "caffe", outputs=BLOBS)(blob)


@pytest.mark.parametrize("name", list(dispatch.BACKENDS))
def test_every_backend_gives_pycaffes_blobs(engine, run_copy, blob, pycaffes, name):
    model = served.load(engine, modelfiles.from_run(run_copy), name, outputs=BLOBS)
    assert model.backend == name and model.outputs == tuple(BLOBS)
    got = model(blob)
    assert sorted(got) == BLOBS
    for b in BLOBS:
        assert got[b].shape == pycaffes[b].shape == (50, 10)
        assert np.abs(got[b] - pycaffes[b]).max() <= TOLERANCE * np.abs(pycaffes[b]).max(), b
    assert (got["prob"].argmax(1) == pycaffes["prob"].argmax(1)).all()
    again = model({model.inputs[0]: blob[:7]})  # by name, and a batch of another size
    assert np.abs(again["prob"] - got["prob"][:7]).max() < 1e-6


def test_only_pycaffes_model_keeps_every_layers_blobs(engine, run_copy, blob):
    assert [name for name, row in dispatch.BACKENDS.items() if row.activations] == ["caffe"]
    net = served.load(engine, modelfiles.from_run(run_copy), "caffe").net
    assert net.blobs["conv1"].data.shape[1:] == (20, 24, 24)


def test_opencv_reads_caffes_files_where_it_has_the_caffe_importer():
    assert dispatch.BACKENDS["opencv"].reads == ("caffe" if hasattr(cv2.dnn, "readNetFromCaffe") else "onnx")
    assert {name: row.reads for name, row in dispatch.BACKENDS.items() if name != "opencv"} == {
        "caffe": "caffe", "onnxruntime": "onnx", "pytorch": "pytorch"}


@pytest.mark.parametrize("name", [name for name, row in dispatch.BACKENDS.items() if not row.gpu])
def test_a_gpu_is_refused_for_a_cpu_only_backend_by_name_before_any_export(engine, tmp_path, name):
    files = modelfiles.ModelFiles(tmp_path / "deploy.prototxt", tmp_path / "net.caffemodel", None)
    gpu = PycaffeDevice(0, "GPU 0 (Tesla T4)")
    said = f"--gpu 0 runs the caffe and pytorch backends; the {name} backend runs on the CPU (use --gpu cpu)"
    with pytest.raises(ConfigError) as refused:
        served.load(engine, files, name, gpu)
    assert str(refused.value) == said
    with pytest.raises(ConfigError, match=r"^--gpu 0 runs the caffe and pytorch backends;"):
        dispatch.load(name, ModelSource(tmp_path / "model.onnx"), gpu)
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_backend_is_refused_with_the_choices(tmp_path):
    with pytest.raises(ConfigError) as refused:
        dispatch.load("tensorflow", ModelSource(tmp_path / "model.onnx"))
    assert str(refused.value) == "unknown --backend 'tensorflow'; choose one of: caffe, opencv, onnxruntime, pytorch"
    assert dispatch.chosen("PyTorch").name == "pytorch"


def test_the_table_is_the_backend_choice_of_evaluate_and_the_demo():
    for task in (evaluate.run, demo.serve, demo.classify):
        said = task.help["backend"]
        assert said == dispatch.help_text()
        assert [name for name in dispatch.BACKENDS if f"{name} (" in said] == list(dispatch.BACKENDS)
