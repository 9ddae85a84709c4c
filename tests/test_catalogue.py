"""The layer catalogue (caffetool/layers/): every type of the engine's own registry declared complete,
every declaration a function or a reason, and a new type found by the memory estimate and both exports
through its one entry."""

from __future__ import annotations

import types

import pytest
from google.protobuf import text_format

from caffetool.errors import ExportError
from caffetool.export import onnxnet, torchnet
from caffetool.layers import catalogue
from caffetool.layers.allocation import LayerInfo, count
from caffetool.layers.entry import CAPABILITIES, LayerType, Omitted, Refused, Sourced
from caffetool.memory import estimator


def test_every_type_of_the_engines_registry_is_declared_complete(caffe):
    """``caffe.layer_type_list()``: what the engine's layer factory can make, the fork's layers included."""
    registry = list(caffe.layer_type_list())
    assert len(registry) >= 60
    assert catalogue.gaps(registry) == []


def test_a_type_missing_or_incomplete_is_named_with_what_it_lacks(monkeypatch):
    class Upsample(LayerType):
        memory = staticmethod(lambda layer, bottoms, phase: LayerInfo([bottoms[0]]))
        onnx = Refused("not covered")

    monkeypatch.setitem(catalogue.CATALOGUE, "Upsample", Upsample)
    assert catalogue.gaps(["ReLU", "Upsample", "ROIPooling"]) == [
        "ROIPooling: not declared in the layer catalogue (caffetool/layers/)",
        "Upsample: declares no pytorch (a function, or Refused with the reason)"]


def test_every_declaration_is_a_function_or_a_stated_reason():
    kinds = {Refused, Omitted, Sourced}
    for name, kind in catalogue.CATALOGUE.items():
        assert kind.name() == name
        for capability in CAPABILITIES:
            declared = getattr(kind, capability)
            assert callable(declared) or type(declared) in kinds, (name, capability)
            if isinstance(declared, (Refused, Omitted)):
                assert declared.why.strip(), (name, capability)
    assert len(catalogue.CATALOGUE) == sum(len(catalogue.declared(f)) for f in catalogue.FAMILIES)


def test_each_capability_is_looked_up_in_the_catalogue():
    assert catalogue.translation("Convolution", "onnx") is catalogue.CATALOGUE["Convolution"].onnx
    assert catalogue.translation("Python", "onnx") is None
    assert catalogue.refusal("Python", "onnx") == "runs Python code, which an ONNX model cannot hold"
    assert catalogue.omitted("Input", "pytorch") and not catalogue.omitted("ReLU", "pytorch")
    assert catalogue.source("Data") is not None and catalogue.source("ReLU") is None
    assert catalogue.is_loss("SoftmaxWithLoss") and not catalogue.is_loss("Accuracy")
    assert catalogue.covered("Exp", "onnx") and not catalogue.covered("Exp", "pytorch")
    assert catalogue.declaration("ROIPooling", "memory") is None


NET = """
name: "added"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 dim: 8 dim: 8 } } }
layer { name: "up" type: "Upsample" bottom: "data" top: "up" }
layer { name: "relu" type: "ReLU" bottom: "up" top: "up" }
"""


def test_a_new_type_is_one_entry_that_the_estimate_and_the_exports_follow(caffe, monkeypatch):
    """A type added as one class: the memory estimate takes its rule (shapes and buffers), and both
    exports refuse it with its own reasons — no other table to edit."""
    def doubled(layer, bottoms, phase):
        n, c, h, w = bottoms[0]
        return LayerInfo([(n, c, 2 * h, 2 * w)], macc=count(bottoms[0]) * 4)

    added = types.new_class("Upsample", (LayerType,), exec_body=lambda ns: ns.update(
        memory=staticmethod(doubled), onnx=Refused("nearest-neighbour upsampling is not in this export yet"),
        pytorch=Refused("nearest-neighbour upsampling is not in this export yet")))
    net = text_format.Parse(NET, caffe.proto.caffe_pb2.NetParameter())
    options = estimator.Options(phase="test")
    before = estimator.estimate(net, options)
    assert [u[:2] for u in before.unmodelled] == [("up", "Upsample")]
    monkeypatch.setitem(catalogue.CATALOGUE, "Upsample", added)
    after = estimator.estimate(net, options)
    assert after.unmodelled == []
    assert [r.top for r in after.rows] == [(2, 3, 8, 8), (2, 3, 16, 16), (2, 3, 16, 16)]
    assert after.total > before.total
    for refusals in (onnxnet.refusals, torchnet.refusals):
        with pytest.raises(ExportError, match=r"layer 'up' \(Upsample\) cannot be exported: nearest-neighbour"):
            refusals(net)


@pytest.mark.parametrize("type_name, message", [
    ("Exp", r"layer 'x' \(Exp\) cannot be exported to PyTorch: the PyTorch export does not cover Exp layers; the "
            r"ONNX export \(caffetool export without --to\) covers it"),
    ("ROIPooling", r"layer 'x' \(ROIPooling\) cannot be exported to PyTorch: the PyTorch export does not cover "
                   r"ROIPooling layers; nor does the ONNX export"),
    ("SoftmaxWithLoss", r"layer 'x' \(SoftmaxWithLoss\) cannot be exported: is a training or test layer"),
])
def test_the_pytorch_refusal_says_whether_the_onnx_export_covers_the_type(caffe, type_name, message):
    net = caffe.proto.caffe_pb2.NetParameter()
    net.layer.add(name="x", type=type_name)
    with pytest.raises(ExportError, match=message):
        torchnet.refusals(net)
