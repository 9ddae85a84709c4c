"""``caffetool export --to pytorch``: Caffe's layers and seven published deploy nets as PyTorch code,
verified by the export against real Caffe and checked again here independently (the written
``model.py`` imported as a user imports it, its ``load()`` run on the test's own inputs beside
pycaffe); every refusal one ``Error:`` line with nothing written."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch
from google.protobuf import text_format

from benchmarks import published_nets
from caffetool.checksum import sha256_file
from caffetool.errors import ExportError
from caffetool.export import exporter, request
from caffetool.layers import catalogue
from caffetool.inference import modelfiles

from .test_export import refused
from .test_export_layers import CASES, DYNAMIC_RUN, IMAGES, RTOL, TOLERANCE, Case, caffe_on_own_inputs, scale_of, \
    write_net
from .test_project_cli import caffetool, succeeded

pytestmark = pytest.mark.engine
PUBLISHED_TOLERANCE = 1e-5  # per layer, relative to the blob's scale, as the issue of the export asks


def covered(case: Case) -> bool:
    """A case of the ONNX layer tests whose layers the PyTorch export covers, at a dynamic batch."""
    types = set(re.findall(r'type: "(\w+)"', case.net)) - {"Input"}
    return case.batch is None and all(catalogue.translation(kind, "pytorch") for kind in types)


# Cases of layers PyTorch's own modules compute otherwise, refused by layer and reason
REFUSED_CASES = {
    "convolution-3d": r"layer 'conv' \(Convolution\) cannot be exported to PyTorch: PyTorch's Conv2d takes "
                      r"\(N, C, H, W\) blobs; this one is 5-D",
    "pooling-kernel-below-stride-window-past-the-end": r"layer '\w+' \(Pooling\) cannot be exported to PyTorch: "
                                                        r"Caffe pools .* \(a window starting past the input\)",
    "pooling-window-starting-at-the-end": r"layer 'max' \(Pooling\) cannot be exported to PyTorch: Caffe pools 8x8 "
                                          r"to 3x3, PyTorch's pooling to 2x2 \(a window starting past the input\)",
}
LAYER_CASES = {k: c for k, c in CASES.items() if covered(c) and k not in REFUSED_CASES}


def imported(path: Path) -> ModuleType:
    """``path`` imported as a user imports it (its folder on sys.path), under a name of its own."""
    name = f"exported_{path.stem}_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module


def export_to_pytorch(engine: Any, files: modelfiles.ModelFiles, out: Path, tolerance: float = TOLERANCE,
                      images: int = IMAGES) -> exporter.Exported:
    return exporter.export(engine, exporter.ExportRequest(files, out, images=images, tolerance=tolerance,
                                                          to="pytorch"), say=lambda _: None)


def compare_with_torch(caffe: Any, files: modelfiles.ModelFiles, module: Path, positive: bool = False,
                       batch: int = DYNAMIC_RUN) -> tuple[np.ndarray, np.ndarray]:
    """The written module's outputs against pycaffe's on the test's own inputs, at ``batch`` (the net
    says 1); returns the last output of each."""
    net, feeds = caffe_on_own_inputs(caffe, files, batch, positive)
    model = imported(module).load()
    assert not model.training
    with torch.inference_mode():
        got = model(*(torch.from_numpy(feeds[name]) for name in net.inputs))
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(net.outputs)
    for blob, value in zip(net.outputs, got):
        want = net.blobs[blob].data
        assert tuple(value.shape) == want.shape, blob
        np.testing.assert_allclose(value.numpy(), want, rtol=RTOL, atol=RTOL * scale_of(want), err_msg=blob)
    return net.blobs[net.outputs[-1]].data.copy(), got[-1].numpy()


@pytest.mark.parametrize("case", LAYER_CASES.values(), ids=LAYER_CASES.keys())
def test_layer_exports_to_pytorch_as_caffe_computes_it(engine, caffe, tmp_path, case):
    files = write_net(caffe, tmp_path, case.net, case.bn_factor, centre=not case.positive)
    result = export_to_pytorch(engine, files, tmp_path / "m.py")
    assert result.verification.passed
    text = text_format.Merge(files.deploy.read_text(), caffe.proto.caffe_pb2.NetParameter())
    assert {f.layer for f in result.verification.layers} == {l.name for l in text.layer if l.type != "Input"}
    assert all(f.rel <= TOLERANCE for f in result.verification.layers)
    compare_with_torch(caffe, files, tmp_path / "m.py", case.positive)


@pytest.mark.parametrize("name", REFUSED_CASES)
def test_a_layer_pytorch_computes_otherwise_is_refused_by_name_and_nothing_is_written(engine, caffe, tmp_path, name):
    files = write_net(caffe, tmp_path, CASES[name].net)
    before = sorted(tmp_path.iterdir())
    with pytest.raises(ExportError, match=REFUSED_CASES[name]):
        export_to_pytorch(engine, files, tmp_path / "m.py")
    assert sorted(tmp_path.iterdir()) == before


@pytest.mark.parametrize("name", published_nets.NAMES)
def test_a_published_net_exports_to_pytorch_beside_its_onnx_export(engine, caffe, tmp_path, name):
    """Both exports of one net in one folder, each verified within 1e-5 of Caffe per layer with equal
    top-1; the module has one attribute per Caffe layer, named after it, and answers as Caffe on
    inputs of the test's own."""
    share = engine.prefix / "share" / "caffe"
    deploy = published_nets.deploy_file(name, caffe, share, tmp_path)
    weights = published_nets.seeded_weights(caffe, deploy, tmp_path / f"{name}.caffemodel")
    files = modelfiles.ModelFiles(deploy, weights, None, scale=1 / 64)  # drawn images in [0, 4)
    exports = tmp_path / "exports"
    for out, to in ((exports / f"{name}.py", "pytorch"), (exports / f"{name}.onnx", "onnx")):
        result = exporter.export(engine, exporter.ExportRequest(files, out, images=4, to=to), say=lambda _: None)
        assert result.verification.passed and result.verification.top1_agree == 4, to
        layers = result.verification.layers
        worst = max((f for f in layers if f.type != "Softmax"), key=lambda f: f.rel)
        assert worst.rel <= PUBLISHED_TOLERANCE, (to, worst)
        for before, softmax in zip(layers, layers[1:]):
            if softmax.type == "Softmax":  # its outputs move by at most twice its inputs' largest change
                assert softmax.max_abs <= 2 * before.max_abs + 1e-7, (to, before, softmax)
    assert sorted(p.name for p in exports.iterdir()) == sorted(
        [f"{name}.py", f"{name}.pt", f"{name}.pytorch.export.json", f"{name}.onnx", f"{name}.export.json"])
    record = json.loads((exports / f"{name}.pytorch.export.json").read_text())
    assert record["sha256"]["py"] == sha256_file(exports / f"{name}.py")
    assert record["sha256"]["pt"] == sha256_file(exports / f"{name}.pt")
    assert record["format"] == "pytorch" and record["versions"]["torch"] == torch.__version__

    net = caffe.Net(str(deploy), str(weights), caffe.TEST)
    model = imported(exports / f"{name}.py").load()
    kept = [n for n, layer in zip(net._layer_names, net.layers) if layer.type not in ("Input", "Split")]
    attributes = [re.sub(r"\W", "_", layer) for layer in kept]  # Caffe's names, '/' and '-' made '_'
    assert [name for name, _ in model.named_children()] == attributes
    assert set(model.state_dict()) == {f"{a}.{key}" for a in attributes for key in getattr(model, a).state_dict()}
    learned = {a: layer for a, layer in zip(attributes, kept)}
    for a, layer in learned.items():
        if layer in net.params and net.layer_dict[layer].type in ("Convolution", "InnerProduct"):
            assert np.array_equal(getattr(model, a).weight.detach().numpy().reshape(net.params[layer][0].data.shape),
                                  net.params[layer][0].data), layer
    x = (np.random.default_rng(2).random((2, *net.blobs[net.inputs[0]].data.shape[1:])) * 4).astype(np.float32)
    net.blobs[net.inputs[0]].reshape(*x.shape)
    net.reshape()
    net.blobs[net.inputs[0]].data[...] = x
    want = net.forward()[net.outputs[-1]].copy()
    with torch.inference_mode():
        got = model(torch.from_numpy(x)).numpy()
    # the saturated softmax of seeded weights doubles float32 rounding of logits near 30: the export's own bar
    assert np.abs(got - want).max() <= request.DEFAULT_TOLERANCE * np.abs(want).max()
    assert (got.reshape(2, -1).argmax(1) == want.reshape(2, -1).argmax(1)).all()


@pytest.fixture(scope="module")
def exported_to_pytorch(trained_run, tmp_path_factory):
    """A copy of the trained LeNet run, exported to PyTorch by the command (the whole test set verified)."""
    run = tmp_path_factory.mktemp("pytorch-runs") / trained_run.name
    shutil.copytree(trained_run, run, symlinks=True)
    done = caffetool("export", run.name, "--to", "pytorch", "--runs-dir", str(run.parent), cwd=run.parent)
    return run, succeeded(done)


def test_a_run_exports_to_pytorch_verified_on_its_whole_test_set(exported_to_pytorch, caffe):
    run, out = exported_to_pytorch
    folder = run / "export"
    assert f"wrote {folder / 'model.py'}, {folder / 'model.pt'} and {folder / 'model.pytorch.export.json'}" in out
    assert "top-1 agrees on 10,000 of 10,000 images" in out
    record = json.loads((folder / "model.pytorch.export.json").read_text())
    assert record["verification"]["passed"] and record["verification"]["images"] == 10_000
    assert record["run"] == str(run) and record["class"] == "LeNet"
    assert record["preprocessing"] is not None
    source = (folder / "model.py").read_text()
    assert "class LeNet(nn.Module):" in source and "self.conv1 = nn.Conv2d(1, 20, 5)" in source
    assert "import caffe" not in source and "caffetool" not in source.split('"""', 2)[2]
    files = modelfiles.from_run(run)
    caffe_out, torch_out = compare_with_torch(caffe, files, folder / "model.py", batch=5)
    assert (caffe_out.argmax(1) == torch_out.argmax(1)).all()


def test_export_check_of_a_pytorch_export_names_the_layer_that_was_changed(exported_to_pytorch, tmp_path):
    run, _ = exported_to_pytorch
    copy = tmp_path / "copy"
    shutil.copytree(run / "export", copy)
    done = caffetool("export.check", str(copy / "model.py"), "--runs-dir", str(run.parent), "--images", "200",
                     cwd=tmp_path)
    assert f"{copy / 'model.py'} agrees with Caffe" in succeeded(done)
    source = (copy / "model.py").read_text()
    (copy / "model.py").write_text(source.replace("self.relu1 = nn.ReLU()", "self.relu1 = nn.Identity()"))
    done = caffetool("export.check", str(copy / "model.py"), "--runs-dir", str(run.parent), "--images", "200",
                     cwd=tmp_path)
    assert done.returncode == 1
    assert re.search(r"Error: .*model\.py: layer 'relu1' \(ReLU\) differs from Caffe by", done.stderr), done.stderr
    (copy / "model.py").write_text(source)
    state = torch.load(copy / "model.pt", weights_only=True)
    state["ip2.bias"] += 1.0
    torch.save(state, copy / "model.pt")
    done = caffetool("export.check", str(copy / "model.py"), "--runs-dir", str(run.parent), "--images", "200",
                     cwd=tmp_path)
    assert done.returncode == 1 and "layer 'ip2' (InnerProduct) differs from Caffe" in done.stderr, done.stderr


def test_a_pytorch_export_replaces_only_what_caffetool_wrote(exported_to_pytorch, tmp_path):
    run, _ = exported_to_pytorch
    deploy, weights = run / "deploy.prototxt", modelfiles.from_run(run).weights
    args = ("--deploy", str(deploy), "--weights", str(weights), "--to", "pytorch", "--images", "8")
    succeeded(caffetool("export", *args, "--out", "lenet.py", cwd=tmp_path))
    first = sha256_file(tmp_path / "lenet.pt")
    succeeded(caffetool("export", *args, "--out", "lenet.py", cwd=tmp_path))  # its own files: replaced
    assert sha256_file(tmp_path / "lenet.pt") == first
    (tmp_path / "lenet.pt").write_bytes((tmp_path / "lenet.pt").read_bytes() + b"\0")
    message = refused(tmp_path, *args, "--out", "lenet.py")
    assert "lenet.pt is not the weights file caffetool wrote" in message
    (tmp_path / "other.pt").write_bytes(b"a user's file")
    message = refused(tmp_path, *args, "--out", "other.py")
    assert "other.pt exists and caffetool did not make it" in message


@pytest.mark.parametrize("flags, words", [
    (("--opset", "17"), "--opset is for ONNX exports"),
    (("--batch", "4"), "--batch is for ONNX exports"),
    (("--with-preprocessing",), "--with-preprocessing is for ONNX exports"),
    (("--out", "lenet.onnx"), "lenet.onnx should end in .py (--to pytorch writes a Python module, its weights "
                              "beside it as NAME.pt)"),
    (("--out", "my-lenet.py"), "'my-lenet' is not a name Python can import; choose one such as my_lenet.py"),
    (("--out", "class.py"), "'class' is not a name Python can import; choose one such as class_.py"),
    (("--to", "keras"), "--to"),
])
def test_pytorch_flags_that_do_not_fit_are_refused_before_any_work(exported_to_pytorch, tmp_path, flags, words):
    run, _ = exported_to_pytorch
    weights = modelfiles.from_run(run).weights
    message = refused(tmp_path, "--deploy", str(run / "deploy.prototxt"), "--weights", str(weights),
                      *(() if "--to" in flags else ("--to", "pytorch")), *flags)
    assert words in message


def test_a_layer_the_pytorch_export_does_not_cover_is_refused_by_name_before_anything_is_written(caffe, tmp_path):
    deploy = tmp_path / "deploy.prototxt"
    deploy.write_text('name: "n"\nlayer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 '
                      'dim: 4 dim: 4 } } }\nlayer { name: "scores" type: "ArgMax" bottom: "data" top: "scores" }\n')
    weights = tmp_path / "w.caffemodel"
    caffe.Net(str(deploy), caffe.TEST).save(str(weights))
    message = refused(tmp_path, "--deploy", str(deploy), "--weights", str(weights), "--to", "pytorch")
    assert message == ("Error: layer 'scores' (ArgMax) cannot be exported to PyTorch: the PyTorch export does not "
                       "cover ArgMax layers; the ONNX export (caffetool export without --to) covers it")
