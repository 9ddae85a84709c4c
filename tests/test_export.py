"""``caffetool export`` as a user runs it: a trained run and BVLC's shipped deploy nets exported to ONNX,
verified against real Caffe by the export itself, then checked again here independently (onnxruntime
on the written file against pycaffe on the same inputs), served and evaluated on onnxruntime; and
every refusal one ``Error:`` line with nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import cv2
import httpx
import numpy as np
import onnx
import onnxruntime as ort
import pytest

from caffetool.checksum import sha256_file
from caffetool.data import db
from caffetool.engine import locate
from caffetool.errors import ExportError
from caffetool.export import exporter
from caffetool.inference import modelfiles, records
from caffetool.serving import classifier

from .processes import stop
from .test_demo import free_port, start_server, test_images  # noqa: F401 - test_images is a fixture
from .test_project_cli import caffetool, succeeded

pytestmark = pytest.mark.engine
SHARE = locate().prefix / "share" / "caffe"

# Every deploy net shipped with the engine (BVLC's models/ and examples/), each with random weights.
SHIPPED = ["examples/mnist/lenet.prototxt", "examples/cifar10/cifar10_quick.prototxt",
           "examples/cifar10/cifar10_full.prototxt", "examples/siamese/mnist_siamese.prototxt",
           "examples/net_surgery/conv.prototxt", "examples/net_surgery/bvlc_caffenet_full_conv.prototxt",
           "models/bvlc_googlenet/deploy.prototxt", "models/bvlc_alexnet/deploy.prototxt",
           "models/bvlc_reference_caffenet/deploy.prototxt", "models/bvlc_reference_rcnn_ilsvrc13/deploy.prototxt",
           "models/finetune_flickr_style/deploy.prototxt"]


def random_weights(caffe, deploy: Path, out: Path, seed: int = 0) -> Path:
    """He-scaled Gaussian weights for ``deploy``, saved by pycaffe."""
    net = caffe.Net(str(deploy), caffe.TEST)
    rng = np.random.default_rng(seed)
    for blobs in net.params.values():
        for blob in blobs:
            fan_in = max(1, int(np.prod(blob.data.shape[1:])))
            blob.data[...] = rng.normal(0, np.sqrt(2.0 / fan_in), blob.data.shape)
    net.save(str(out))
    return out


@pytest.fixture(scope="module")
def exported(trained_run, tmp_path_factory):
    """A copy of the trained LeNet run, exported by the command (the whole test set verified)."""
    run = tmp_path_factory.mktemp("export-runs") / trained_run.name
    shutil.copytree(trained_run, run, symlinks=True)
    done = caffetool("export", run.name, "--runs-dir", str(run.parent), cwd=run.parent)
    return run, succeeded(done)


def test_a_run_exports_verified_on_its_whole_test_set(exported, caffe):
    run, out = exported
    model_path, record_path = run / "export" / "model.onnx", run / "export" / "export.json"
    record = json.loads(record_path.read_text())
    verified = record["verification"]
    assert verified["passed"] and verified["images"] == 10_000 and verified["top1_agreement"] == 10_000
    assert verified["output_max_abs_error"] <= 1e-5
    assert [row["layer"] for row in verified["layers"]] == ["conv1", "pool1", "conv2", "pool2", "ip1", "relu1",
                                                            "ip2", "prob"]
    assert all(row["max_rel_error"] <= 1e-4 for row in verified["layers"])
    assert "top-1 agrees on 10,000 of 10,000 images" in out and "conv2 (Convolution)" in out
    weights = modelfiles.from_run(run).weights
    assert record["sha256"] == {"deploy": sha256_file(run / "deploy.prototxt"), "weights": sha256_file(weights),
                                "onnx": sha256_file(model_path)}
    assert record["versions"]["onnx"] == onnx.__version__ and record["versions"]["onnxruntime"] == ort.__version__
    assert record["versions"]["engine"]
    model = onnx.load(str(model_path))
    onnx.checker.check_model(model, full_check=True)
    props = {p.key: p.value for p in model.metadata_props}
    assert json.loads(props["caffetool.labels"]) == (run / "labels.txt").read_text().split("\n")[:10]
    steps = json.loads(props["caffetool.preprocessing"])
    assert steps["input_scale"] == 0.00390625 and steps["raw_scale"] == 255 and steps["mean"] is None
    # independently of the export's own check: the written file against pycaffe on test records
    src = records.source(run, "test", caffe.proto.caffe_pb2)
    batch = next(records.batches(src, caffe.proto.caffe_pb2, 64, (1, 28, 28)))
    net = caffe.Net(str(run / "deploy.prototxt"), str(weights), caffe.TEST)
    net.blobs["data"].reshape(64, 1, 28, 28)
    net.blobs["data"].data[...] = batch.blob
    expected = net.forward()["prob"].copy()
    got = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"]).run(["prob"],
                                                                                       {"data": batch.blob})[0]
    assert np.abs(got - expected).max() < 1e-5
    assert (got.argmax(1) == expected.argmax(1)).all()


def test_export_check_passes_on_the_export_and_names_the_layer_of_a_changed_one(exported, tmp_path):
    run, _ = exported
    model_path = run / "export" / "model.onnx"
    done = caffetool("export.check", str(model_path), "--run", run.name, "--runs-dir", str(run.parent),
                     "--images", "500", cwd=tmp_path)
    assert "agrees with Caffe" in succeeded(done)
    model = onnx.load(str(model_path))
    weight = next(t for t in model.graph.initializer if t.name == "conv2/weight")
    changed = onnx.numpy_helper.to_array(weight).copy()
    changed[0, 0, 0, 0] += 0.05
    weight.CopyFrom(onnx.numpy_helper.from_array(changed, weight.name))
    onnx.save(model, str(tmp_path / "changed.onnx"))
    done = caffetool("export.check", str(tmp_path / "changed.onnx"), "--run", run.name, "--runs-dir",
                     str(run.parent), "--images", "500", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith("Error: ")
    assert "layer 'conv2' (Convolution) differs from Caffe" in done.stderr and "Traceback" not in done.stderr


def test_a_tolerance_no_export_meets_writes_nothing(exported, tmp_path):
    run, _ = exported
    weights = modelfiles.from_run(run).weights
    done = caffetool("export", "--deploy", str(run / "deploy.prototxt"), "--weights", str(weights), "--out",
                     str(tmp_path / "m.onnx"), "--tolerance", "1e-12", cwd=tmp_path)
    assert done.returncode == 1
    assert "past the tolerance of 1e-12: no model was written" in done.stderr
    assert "conv2 (Convolution)" in done.stdout and "<- past the tolerance" in done.stdout
    assert list(tmp_path.iterdir()) == []


def test_with_preprocessing_the_model_takes_images(exported, caffe, tmp_path):
    run, _ = exported
    weights = modelfiles.from_run(run).weights
    succeeded(caffetool("export", run.name, "--runs-dir", str(run.parent), "--with-preprocessing", "--images",
                        "1000", "--out", str(tmp_path / "pre.onnx"), cwd=tmp_path))
    session = ort.InferenceSession(str(tmp_path / "pre.onnx"), providers=["CPUExecutionProvider"])
    assert [(i.name, i.shape) for i in session.get_inputs()] == [("image", ["N", 28, 28, 1])]
    src = records.source(run, "test", caffe.proto.caffe_pb2)
    pixels = np.stack([records.planes(v, caffe.proto.caffe_pb2, src.transform)[0] for _, v in
                       zip(range(32), (value for _, value in db.read(src.path)))])
    transformer = records.Transformer(src, caffe.proto.caffe_pb2)
    net = caffe.Net(str(run / "deploy.prototxt"), str(weights), caffe.TEST)
    net.blobs["data"].reshape(32, 1, 28, 28)
    net.blobs["data"].data[...] = np.stack([transformer(p) for p in pixels])
    expected = net.forward()["prob"].copy()
    images = pixels.transpose(0, 2, 3, 1).astype(np.float32) / 255
    got = session.run(["prob"], {"image": images})[0]
    assert np.abs(got - expected).max() < 1e-5
    record = json.loads((tmp_path / "export.json").read_text())
    assert record["preprocessing_in_graph"] is True and record["model"] == "pre.onnx"


def test_a_fixed_batch_and_an_opset(exported, tmp_path):
    run, _ = exported
    succeeded(caffetool("export", run.name, "--runs-dir", str(run.parent), "--batch", "4", "--opset", "13",
                        "--images", "10", "--out", str(tmp_path / "b4.onnx"), cwd=tmp_path))
    model = onnx.load(str(tmp_path / "b4.onnx"))
    assert [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] == [4, 1, 28, 28]
    assert model.opset_import[0].version == 13
    record = json.loads((tmp_path / "export.json").read_text())
    assert record["verification"]["images"] == 10 and record["batch"] == 4
    done = caffetool("export", run.name, "--runs-dir", str(run.parent), "--opset", "12", "--out",
                     str(tmp_path / "o12.onnx"), cwd=tmp_path)
    assert done.returncode == 1 and "--opset 12 is outside 13.." in done.stderr


def test_an_export_is_only_replaced_where_caffetool_made_it(exported, tmp_path):
    run, _ = exported
    mine = tmp_path / "mine.onnx"
    mine.write_bytes(b"the user's own model")
    done = caffetool("export", run.name, "--runs-dir", str(run.parent), "--out", str(mine), cwd=tmp_path)
    assert done.returncode == 1 and "caffetool did not make it" in done.stderr
    assert mine.read_bytes() == b"the user's own model"


def test_evaluate_and_the_demo_on_onnxruntime_answer_as_caffe(exported, tmp_path, test_images):  # noqa: F811
    run, _ = exported
    runs = str(run.parent)
    ours = succeeded(caffetool("evaluate", run.name, "--runs-dir", runs, "--backend", "onnxruntime", cwd=tmp_path))
    theirs = succeeded(caffetool("evaluate", run.name, "--runs-dir", runs, "--no-caffe-test", cwd=tmp_path))
    top1 = next(line for line in ours.splitlines() if line.startswith("top-1:"))
    assert "(caffe test:" in top1 and top1.split()[1] == next(
        line for line in theirs.splitlines() if line.startswith("top-1:")).split()[1]
    predicted = {}
    for backend, folder in (("onnxruntime", "-onnxruntime"), ("caffe", "")):
        rows = (next((run / "eval").glob(f"*{folder}")) / "predictions.csv").read_text().splitlines()
        predicted[backend] = [row.split(",")[3] for row in rows[1:]]
    assert len(predicted["caffe"]) == 10_000 and predicted["onnxruntime"] == predicted["caffe"]
    images, _ = test_images
    port = free_port()
    child = start_server(["--run", str(run), "--backend", "onnxruntime"], port)
    try:
        assert child.poll() is None, child.stderr.read()
        caffe_side = classifier.load(locate(), modelfiles.from_run(run), "caffe")
        for data in images[:50]:
            answer = httpx.post(f"http://127.0.0.1:{port}/api/classify", content=data, timeout=30).json()
            expected = caffe_side.classify(data)["top"]
            assert [t["label"] for t in answer["top"]] == [t["label"] for t in expected]
            assert max(abs(a["prob"] - b["prob"]) for a, b in zip(answer["top"], expected)) < 1e-5
        assert httpx.get(f"http://127.0.0.1:{port}/api/model", timeout=10).json()["backend"] == "onnxruntime"
    finally:
        stop(child)


@pytest.mark.parametrize("deploy", SHIPPED, ids=lambda p: p.split("/")[-2] + "/" + Path(p).stem)
def test_every_deploy_net_shipped_with_the_engine_exports_and_verifies(engine, caffe, deploy, tmp_path):
    source = SHARE / deploy
    weights = random_weights(caffe, source, tmp_path / "random.caffemodel")
    request = exporter.ExportRequest(modelfiles.ModelFiles(source, weights, None), tmp_path / "m.onnx", images=4)
    result = exporter.export(engine, request, say=lambda _: None)
    assert result.verification.passed and result.verification.images == 4
    assert all(f.rel <= 1e-4 for f in result.verification.layers)
    compared = {f.layer for f in result.verification.layers}
    net = caffe.Net(str(source), str(weights), caffe.TEST)
    assert compared == {n for n, layer in zip(net._layer_names, net.layers) if layer.type not in ("Input", "Split")}
    assert (tmp_path / "m.onnx").is_file() and json.loads((tmp_path / "export.json").read_text())["model"] == "m.onnx"
    # another reader of the file: OpenCV's ONNX importer (the one OpenCV 5 keeps), against Caffe itself
    x = np.random.default_rng(1).random(net.blobs[net.inputs[0]].data.shape).astype(np.float32) * 255
    net.blobs[net.inputs[0]].data[...] = x
    expected = net.forward()[net.outputs[-1]].copy()
    reader = cv2.dnn.readNetFromONNX(str(tmp_path / "m.onnx"))
    reader.setInput(x)
    assert np.abs(reader.forward(net.outputs[-1]).reshape(expected.shape) - expected).max() <= 1e-3 * np.abs(
        expected).max()


def refused(tmp_path: Path, *args: str) -> str:
    """The command's one ``Error:`` line; nothing written in ``tmp_path`` but the inputs."""
    before = sorted(tmp_path.rglob("*"))
    done = caffetool("export", *args, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
    assert sorted(tmp_path.rglob("*")) == before
    return lines[0]


def test_refusals_name_the_layer_and_write_nothing(exported, caffe, tmp_path):
    run, _ = exported
    weights = modelfiles.from_run(run).weights
    line = refused(tmp_path, "--deploy", str(run / "train_val.prototxt"), "--weights", str(weights))
    assert "layer 'mnist' (Data) cannot be exported: reads training data: export the deploy net" in line
    python_net = tmp_path / "python.prototxt"
    python_net.write_text('input: "data" input_shape { dim: 1 dim: 1 dim: 4 dim: 4 }\n'
                          'layer { name: "mine" type: "Python" bottom: "data" top: "out" '
                          'python_param { module: "mymod" layer: "Mine" } }\n')
    line = refused(tmp_path, "--deploy", str(python_net), "--weights", str(weights))
    assert "layer 'mine' (Python) cannot be exported: runs Python code" in line
    unknown = tmp_path / "unknown.prototxt"
    unknown.write_text('input: "data" input_shape { dim: 1 dim: 1 dim: 4 dim: 4 }\n'
                       'layer { name: "odd" type: "Upsample" bottom: "data" top: "out" }\n')
    line = refused(tmp_path, "--deploy", str(unknown), "--weights", str(weights))
    assert "layer 'odd' has type 'Upsample', which is not a BVLC Caffe 1.0 layer the export covers" in line
    other = random_weights(caffe, SHARE / "examples/cifar10/cifar10_quick.prototxt", tmp_path / "cifar.caffemodel")
    line = refused(tmp_path, "--deploy", str(run / "deploy.prototxt"), "--weights", str(other))
    assert "conv1" in line


def test_library_refusal_of_a_net_without_input(engine, caffe, tmp_path):
    net = tmp_path / "none.prototxt"
    net.write_text('layer { name: "d" type: "DummyData" top: "x" dummy_data_param { shape { dim: 1 } } }\n')
    with pytest.raises(ExportError, match=r"layer 'd' \(DummyData\) cannot be exported"):
        exporter.export(engine, exporter.ExportRequest(modelfiles.ModelFiles(net, net, None),
                                                       tmp_path / "m.onnx"), say=lambda _: None)
    assert not (tmp_path / "m.onnx").exists()
