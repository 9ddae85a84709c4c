"""``caffetool export`` as a user runs it: a trained run and BVLC's shipped deploy nets exported to ONNX,
verified against real Caffe by the export itself, then checked again here independently (onnxruntime
on the written file against pycaffe on the same inputs), served and evaluated on onnxruntime; and
every refusal one ``Error:`` line with nothing written."""

from __future__ import annotations

import json
import re
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
    model_path, record_path = run / "export" / "model.onnx", run / "export" / "model.export.json"
    record = json.loads(record_path.read_text())
    verified = record["verification"]
    assert verified["passed"] and verified["images"] == 10_000 and verified["top1_agreement"] == 10_000
    assert verified["output_max_abs_error"] <= 1e-5
    assert [row["layer"] for row in verified["layers"]] == ["conv1", "pool1", "conv2", "pool2", "ip1", "relu1",
                                                            "ip2", "prob"]
    assert all(row["max_rel_error"] <= 1e-4 for row in verified["layers"])
    assert "top-1 agrees on 10,000 of 10,000 images" in out and "conv2 (Convolution)" in out
    assert "(the run's 10,000 test images)" in out and verified["source"] == "the run's 10,000 test images"
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


def _no_outputs(model):
    del model.graph.output[:]


def _no_opset(model):
    del model.opset_import[:]


def _three_channels(model):
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 3


@pytest.mark.parametrize("damage, words", [
    (_no_outputs, "has no graph output 'prob', which the deploy net gives"),
    (_no_opset, "declares no ONNX operator set"),
    (_three_channels, "its input 'data' takes 3x28x28 per item, the deploy net 1x28x28")])
def test_export_check_names_what_is_wrong_with_a_damaged_model(exported, tmp_path, damage, words):
    run, _ = exported
    model = onnx.load(str(run / "export" / "model.onnx"))
    damage(model)
    onnx.save(model, str(tmp_path / "damaged.onnx"))
    done = caffetool("export.check", str(tmp_path / "damaged.onnx"), "--run", run.name, "--runs-dir",
                     str(run.parent), "--images", "50", cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and words in lines[0], done.stderr


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
    record = json.loads((tmp_path / "pre.export.json").read_text())
    assert record["preprocessing_in_graph"] is True and record["model"] == "pre.onnx"


def test_a_fixed_batch_and_an_opset(exported, tmp_path):
    run, _ = exported
    succeeded(caffetool("export", run.name, "--runs-dir", str(run.parent), "--batch", "4", "--opset", "13",
                        "--images", "10", "--out", str(tmp_path / "b4.onnx"), cwd=tmp_path))
    model = onnx.load(str(tmp_path / "b4.onnx"))
    assert [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] == [4, 1, 28, 28]
    assert model.opset_import[0].version == 13
    record = json.loads((tmp_path / "b4.export.json").read_text())
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


def test_a_re_export_keeps_what_the_user_keeps_beside_it_and_never_overwrites_a_changed_model(exported, tmp_path):
    """The run's export folder: a user's notes and quantised copy outlive a re-export. A model the user
    changed since, or another file that a record merely names, is refused with nothing changed."""
    run, _ = exported
    copy = tmp_path / run.name
    shutil.copytree(run, copy, symlinks=True)
    folder = copy / "export"
    (folder / "notes.txt").write_text("kept")
    (folder / "model.int8.onnx").write_bytes(b"a quantised copy")
    again = ("export", copy.name, "--runs-dir", str(tmp_path), "--images", "100")
    assert "(the run's first 100 test images)" in succeeded(caffetool(*again, cwd=tmp_path))
    assert (folder / "notes.txt").read_text() == "kept" and (folder / "model.int8.onnx").read_bytes() == b"a quantised copy"
    record = json.loads((folder / "model.export.json").read_text())
    assert record["sha256"]["onnx"] == sha256_file(folder / "model.onnx") and "replaced_onnx" not in record["sha256"]

    (folder / "model.onnx").write_bytes(b"the user's own edit")
    done = caffetool(*again, cwd=tmp_path)
    assert done.returncode == 1 and "is not the model caffetool wrote" in done.stderr, done.stderr
    evaluated = caffetool("evaluate", str(copy), "--backend", "onnxruntime", "--no-caffe-test", cwd=tmp_path)
    assert evaluated.returncode == 1 and "is not the model caffetool wrote" in evaluated.stderr, evaluated.stderr
    assert "--out" not in evaluated.stderr and f"move it out of {folder}," in evaluated.stderr  # evaluate has no --out
    assert (folder / "model.onnx").read_bytes() == b"the user's own edit"

    mine = tmp_path / "elsewhere"
    mine.mkdir()
    (mine / "m.onnx").write_bytes(b"another tool's model")
    (mine / "m.export.json").write_text(json.dumps({"model": "m.onnx", "sha256": {"onnx": "0" * 64}}))
    line = refused(mine, copy.name, "--runs-dir", str(tmp_path), "--out", str(mine / "m.onnx"))
    assert "is not the model caffetool wrote" in line and (mine / "m.onnx").read_bytes() == b"another tool's model"


def test_an_export_is_not_written_into_a_runs_top_folder(exported, tmp_path):
    run, _ = exported
    copy = tmp_path / run.name
    shutil.copytree(run, copy, symlinks=True)
    line = refused(copy, copy.name, "--runs-dir", str(tmp_path), "--out", str(copy / "manifest.onnx"))
    assert "is in the top folder of the run" in line and "export" in line


@pytest.mark.parametrize("value", [np.nan, 1e38])
def test_weights_that_are_or_become_non_finite_fail_the_export_naming_the_layer(exported, caffe, tmp_path, value):
    """NaN weights are refused before anything runs; weights of 1e38 overflow to infinity in Caffe's
    own outputs, which fails the verification at that layer: no model is written either way."""
    run, _ = exported
    weights = modelfiles.from_run(run).weights
    net = caffe.Net(str(run / "deploy.prototxt"), str(weights), caffe.TEST)
    net.params["ip1"][0].data[0, :] = value
    bad = tmp_path / "inputs" / "bad.caffemodel"
    bad.parent.mkdir()
    net.save(str(bad))
    out = tmp_path / "out"
    out.mkdir()
    done = caffetool("export", "--deploy", str(run / "deploy.prototxt"), "--weights", str(bad), "--out",
                     str(out / "m.onnx"), cwd=out)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert "'ip1'" in line and "not finite" in line, line
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("key, change, message", [
    ("caffetool.preprocessing", lambda v: v.replace('"input_scale": ', '"input_scale": -1e30, "was": '),
     "input_scale -1e+30"),
    ("caffetool.preprocessing", lambda v: re.sub(r'"white_on_black": (true|false)', '"white_on_black": "no"', v),
     "white_on_black 'no'"),
    ("caffetool.labels", lambda v: json.dumps("".join(json.loads(v))), "is not a JSON list of class names"),
    ("caffetool.preprocessing_in_graph", lambda v: "TRUE", "where caffetool writes \"true\" or \"false\""),
])
def test_metadata_that_no_export_writes_is_refused_by_the_server(exported, tmp_path, key, change, message):
    """An exported model's metadata is a file anyone can edit: what no export writes is refused when the
    model is loaded to serve, naming the key, instead of answering one class for every image."""
    from caffetool.serving import onnxmodel

    run, _ = exported
    model = onnx.load(str(run / "export" / "model.onnx"))
    prop = next(p for p in model.metadata_props if p.key == key)
    prop.value = change(prop.value)
    onnx.save(model, str(tmp_path / "edited.onnx"))
    with pytest.raises(ExportError, match=re.escape(message)):
        onnxmodel.load(tmp_path / "edited.onnx", "edited")


def test_labels_that_do_not_fit_the_net_are_refused_before_the_export(exported, tmp_path):
    run, _ = exported
    (tmp_path / "three.txt").write_text("a\nb\nc\n")
    line = refused(tmp_path, "--deploy", str(run / "deploy.prototxt"), "--weights",
                   str(modelfiles.from_run(run).weights), "--labels", str(tmp_path / "three.txt"),
                   "--out", str(tmp_path / "m.onnx"))
    assert "three.txt names 3 classes, but the net's output 'prob' has 10 values per image" in line


@pytest.mark.parametrize("flag, value, words", [
    ("--images", "1000000000", "--images must be a number of images from 1 to 1000000, got 1000000000"),
    ("--batch", "100000", "--batch must be a batch size from 1 to 4096, got 100000")])
def test_verification_without_bounds_is_refused_before_any_work(exported, tmp_path, flag, value, words):
    run, _ = exported
    line = refused(tmp_path, "--deploy", str(run / "deploy.prototxt"), "--weights",
                   str(modelfiles.from_run(run).weights), flag, value, "--out", str(tmp_path / "m.onnx"))
    assert words in line


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
    assert (tmp_path / "m.onnx").is_file() and json.loads((tmp_path / "m.export.json").read_text())["model"] == "m.onnx"
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


V1_DEPLOY = """name: "v1"
input: "data"
input_dim: 1 input_dim: 1 input_dim: 28 input_dim: 28
layers { name: "conv" type: CONVOLUTION bottom: "data" top: "conv" convolution_param { num_output: 4 kernel_size: 5 } }
layers { name: "relu" type: RELU bottom: "conv" top: "conv" }
layers { name: "ip" type: INNER_PRODUCT bottom: "conv" top: "ip" inner_product_param { num_output: 10 } }
layers { name: "prob" type: SOFTMAX bottom: "ip" top: "prob" }
"""


def test_an_old_format_deploy_net_is_upgraded_as_train_upgrades_it(caffe, tmp_path):
    """A V1 deploy net (``layers { type: INNER_PRODUCT }``), which Caffe reads and ``train`` upgrades with
    the engine's ``upgrade_net_proto_text``: exported and verified the same way."""
    deploy = tmp_path / "inputs" / "v1.prototxt"
    deploy.parent.mkdir()
    deploy.write_text(V1_DEPLOY)
    weights = random_weights(caffe, deploy, tmp_path / "inputs" / "v1.caffemodel")
    done = caffetool("export", "--deploy", str(deploy), "--weights", str(weights), "--out", str(tmp_path / "v1.onnx"),
                     cwd=tmp_path)
    assert "top-1 agrees on 16 of 16 images" in succeeded(done)
    assert [o.name for o in onnx.load(str(tmp_path / "v1.onnx")).graph.output] == ["prob"]


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
                       'layer { name: "odd" type: "Frobnicate" bottom: "data" top: "out" }\n')
    line = refused(tmp_path, "--deploy", str(unknown), "--weights", str(weights))
    assert "layer 'odd' has type 'Frobnicate', which is not a BVLC Caffe 1.0 layer the export covers" in line
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


def test_several_exports_share_a_folder_and_each_is_checked_against_what_its_record_names(exported, tmp_path):
    """``--out exports/a.onnx`` then ``--out exports/b.onnx``: two models, two records named after them;
    ``export.check`` of either, given nothing else, finds the run in its record and agrees."""
    run, _ = exported
    folder = tmp_path / "exports"
    for name, extra in (("a", ()), ("b", ("--batch", "8"))):
        succeeded(caffetool("export", run.name, "--runs-dir", str(run.parent), "--images", "50", *extra,
                            "--out", str(folder / f"{name}.onnx"), cwd=tmp_path))
    assert sorted(p.name for p in folder.iterdir()) == ["a.export.json", "a.onnx", "b.export.json", "b.onnx"]
    assert json.loads((folder / "b.export.json").read_text())["batch"] == 8
    assert json.loads((folder / "a.export.json").read_text())["run"] == str(run)
    checked = succeeded(caffetool("export.check", str(folder / "b.onnx"), "--images", "20", cwd=tmp_path))
    assert f"{folder / 'b.onnx'} agrees with Caffe" in checked
    (folder / "c.onnx").write_bytes((folder / "a.onnx").read_bytes())
    done = caffetool("export.check", str(folder / "c.onnx"), cwd=tmp_path)
    assert done.returncode == 1 and "has no export record beside it (c.export.json)" in done.stderr, done.stderr


def test_an_earlier_versions_export_json_is_read_and_gives_way_to_the_models_own_record(exported, tmp_path):
    """A run exported by an earlier version (``export/export.json``): the onnxruntime backend takes its
    model as the run's export, and a re-export replaces the model and moves its record to
    ``model.export.json``."""
    run, _ = exported
    copy = tmp_path / run.name
    shutil.copytree(run, copy, symlinks=True)
    folder = copy / "export"
    (folder / "model.export.json").rename(folder / "export.json")
    model = folder / "model.onnx"
    assert exporter.record_for(model) == folder / "export.json"
    succeeded(caffetool("export", copy.name, "--runs-dir", str(tmp_path), "--images", "50", cwd=tmp_path))
    assert not (folder / "export.json").exists()
    assert json.loads((folder / "model.export.json").read_text())["sha256"]["onnx"] == sha256_file(model)
