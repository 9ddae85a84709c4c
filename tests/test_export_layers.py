"""Every layer type the ONNX export converts, each in a small net, against the real Caffe engine.

A net is written in ``tmp_path`` with random weights from a seeded rng, exported with
:func:`caffetool.export.exporter.export` (which compares it with pycaffe layer by layer), and the
written model is then run once more with onnxruntime, on inputs of the test's own (negative values
too, and another batch size than the export's for a dynamic batch), beside pycaffe's forward pass.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from google.protobuf import text_format

from caffetool.errors import ExportError
from caffetool.export import exporter, request
from caffetool.serving.classifier import ModelFiles

TOLERANCE = 1e-4  # the export's own, per layer, relative to the blob's scale
RTOL = 1e-5  # the test's check of the written model, also relative to the output's scale
IMAGES = 6  # verification inputs: a short last batch for a fixed batch of 4
DYNAMIC_RUN = 3  # the batch the test runs a dynamic-batch model at (its net says 1)
BN_FACTOR = 2.0  # BatchNorm's moving-average factor: its stored statistics are twice the real ones
HUGE = 1e30  # past this a value is Caffe's -FLT_MAX (a max over an empty window), not an activation


# --- nets as prototxt text -----------------------------------------------------------------------

def inputs(**blobs: tuple[int, ...]) -> str:
    """One Input layer per blob, ``name=(dims)``."""
    return "".join(f'layer {{ name: "{name}" type: "Input" top: "{name}" '
                   f'input_param {{ shape {{ {dims(shape)} }} }} }}\n' for name, shape in blobs.items())


def dims(shape: tuple[int, ...]) -> str:
    return " ".join(f"dim: {d}" for d in shape)


def layer(type_: str, name: str, bottoms: str = "data", tops: str | None = None, **params: str) -> str:
    """A layer; ``bottoms``/``tops`` are blob names separated by spaces (the top is ``name`` by
    default); each keyword is a ``KEY_param`` message's text."""
    text = [f'name: "{name}" type: "{type_}"', *(f'bottom: "{b}"' for b in bottoms.split()),
            *(f'top: "{t}"' for t in (tops or name).split()), *(f"{k}_param {{ {v} }}" for k, v in params.items())]
    return "layer { " + " ".join(text) + " }\n"


def single(type_: str, shape: tuple[int, ...] = (1, 2, 3, 4), **params: str) -> str:
    """One layer of ``type_`` on one input."""
    return inputs(data=shape) + layer(type_, type_.lower(), **params)


def pooled(shape: tuple[int, ...], window: str, *pools: str) -> str:
    """MAX and AVE pooling (or ``pools``) of one input with the same window."""
    return inputs(data=shape) + "".join(layer("Pooling", pool.lower(), pooling=f"pool: {pool} {window}")
                                        for pool in pools or ("MAX", "AVE"))


def branches(type_: str, shape: tuple[int, ...], *variants: str) -> str:
    """Several layers of ``type_`` side by side on one input, one per text of its parameter message
    (``TYPE_param``, the type in lower case)."""
    key = type_.lower()
    return inputs(data=shape) + "".join(layer(type_, f"{key}{k}", **{key: v}) for k, v in enumerate(variants))


def conv(name: str, bottom: str, params: str, top: str | None = None) -> str:
    return layer("Convolution", name, bottom, top, convolution=params)


def in_place(type_: str, name: str, blob: str, **params: str) -> str:
    return layer(type_, name, blob, blob, **params)


RESNET_BLOCK = (
    inputs(data=(1, 3, 6, 6))
    + conv("conv1", "data", "num_output: 4 kernel_size: 3 pad: 1 bias_term: false")
    + in_place("BatchNorm", "bn1", "conv1") + in_place("Scale", "scale1", "conv1", scale="bias_term: true")
    + in_place("ReLU", "relu1", "conv1")
    + conv("conv2", "conv1", "num_output: 4 kernel_size: 3 pad: 1 bias_term: false")
    + in_place("BatchNorm", "bn2", "conv2") + in_place("Scale", "scale2", "conv2", scale="bias_term: true")
    + conv("shortcut", "data", "num_output: 4 kernel_size: 1 bias_term: false")
    + layer("Eltwise", "sum", "conv2 shortcut", eltwise="operation: SUM")
    + in_place("ReLU", "relu2", "sum")
    + layer("Pooling", "pool", "sum", pooling="pool: AVE global_pooling: true")
    + layer("InnerProduct", "fc", "pool", inner_product="num_output: 5")
    + layer("Softmax", "prob", "fc")
)

# conv's blob "c" is rewritten in place three times, then read by a Pooling and a Concat (Caffe lets
# no layer read a version an in-place layer rewrites later)
RENAMED_BY_IN_PLACE = (
    inputs(data=(1, 2, 5, 5))
    + conv("conv", "data", "num_output: 3 kernel_size: 3 pad: 1", top="c")
    + in_place("ReLU", "relu", "c", relu="negative_slope: 0.2")
    + in_place("Scale", "scale", "c", scale="bias_term: true")
    + in_place("Power", "power", "c", power="power: 2 shift: 0.5")
    + layer("Pooling", "side", "c", pooling="pool: MAX kernel_size: 3 stride: 1 pad: 1")
    + layer("Concat", "cat", "c side data")
)


@dataclass(frozen=True)
class Case:
    """A net (prototxt text without its name) and how the test exports and runs it."""

    net: str
    batch: int | None = None  # the export's (None: dynamic); the test runs the model at it too
    opset: int = request.DEFAULT_OPSET
    positive: bool = False  # inputs above 0 only (a log, a fractional power), else of either sign
    bn_factor: float = BN_FACTOR


CASES = {
    # inputs
    "legacy-input-shape": Case('input: "data"\ninput_shape { dim: 1 dim: 3 dim: 5 dim: 5 }\n'
                               + conv("conv", "data", "num_output: 2 kernel_size: 3")),
    "legacy-input-dim": Case('input: "data"\ninput_dim: 1\ninput_dim: 3\ninput_dim: 5\ninput_dim: 5\n'
                             + conv("conv", "data", "num_output: 2 kernel_size: 3")),
    "legacy-two-inputs": Case('input: "a"\ninput_shape { dim: 1 dim: 3 dim: 2 dim: 2 }\n'
                              'input: "b"\ninput_shape { dim: 1 dim: 3 dim: 2 dim: 2 }\n'
                              + layer("Eltwise", "sum", "a b", eltwise="coeff: 1 coeff: -1")),
    "input-layer-two-tops": Case('layer { name: "in" type: "Input" top: "a" top: "b" input_param { '
                                 'shape { dim: 1 dim: 2 dim: 3 dim: 3 } shape { dim: 1 dim: 2 dim: 1 dim: 3 } } }\n'
                                 + layer("Tile", "tiled", "b", tile="axis: 2 tiles: 3")
                                 + layer("Eltwise", "prod", "a tiled", eltwise="operation: PROD")),
    # convolutions
    "convolution-groups-dilation": Case(inputs(data=(1, 4, 9, 9)) + conv(
        "conv", "data", "num_output: 6 group: 2 kernel_size: 3 dilation: 2 pad: 1 stride: 2")),
    "convolution-per-axis-no-bias": Case(inputs(data=(1, 3, 7, 8)) + conv(
        "conv", "data", "num_output: 4 kernel_h: 3 kernel_w: 2 stride_h: 2 stride_w: 1 pad_h: 0 pad_w: 1 "
                        "bias_term: false")),
    "convolution-listed-per-axis": Case(inputs(data=(1, 2, 7, 8)) + conv(
        "conv", "data", "num_output: 3 kernel_size: 3 kernel_size: 2 stride: 1 stride: 2 pad: 1 pad: 0 "
                        "dilation: 2 dilation: 1")),
    "convolution-3d": Case(inputs(data=(1, 2, 4, 5, 6)) + conv(
        "conv", "data", "num_output: 3 kernel_size: 2 kernel_size: 3 kernel_size: 2 stride: 2 pad: 1")),
    "deconvolution-groups-stride": Case(single("Deconvolution", (1, 4, 4, 5), convolution=(
        "num_output: 6 group: 2 kernel_size: 3 stride: 2 pad: 1 dilation: 2"))),
    "deconvolution-per-axis-no-bias": Case(single("Deconvolution", (1, 3, 4, 4), convolution=(
        "num_output: 2 kernel_h: 2 kernel_w: 3 stride_h: 2 stride_w: 1 pad_w: 1 bias_term: false"))),
    # pooling: Caffe's ceil rounding lets the last window overhang the (padded) input
    "pooling-13x13-k3-s2-p1": Case(pooled((1, 2, 13, 13), "kernel_size: 3 stride: 2 pad: 1")),
    "pooling-7x9-k2-s2-p1": Case(pooled((1, 2, 7, 9), "kernel_size: 2 stride: 2 pad: 1")),
    "pooling-kernel-below-stride": Case(pooled((1, 2, 7, 8), "kernel_size: 2 stride: 3")),
    # windows that lie wholly past the input: MAX gives -FLT_MAX there as Caffe does; AVE divides 0 by 0
    # (NaN), which fails the export (test_an_average_over_an_empty_window_fails_the_export)
    "pooling-kernel-below-stride-window-past-the-end": Case(pooled((1, 2, 8, 9), "kernel_size: 1 stride: 3", "MAX")),
    "pooling-window-starting-at-the-end": Case(pooled((1, 2, 8, 8), "kernel_size: 2 stride: 4", "MAX")),
    "pooling-padded-on-one-axis": Case(pooled((1, 2, 6, 9), "kernel_h: 2 kernel_w: 1 stride_h: 2 stride_w: 3 "
                                                            "pad_h: 1 pad_w: 0")),
    "pooling-round-floor": Case(pooled((1, 2, 7, 9), "kernel_size: 3 stride: 2 pad: 1 round_mode: FLOOR")),
    "pooling-global": Case(pooled((1, 2, 5, 7), "global_pooling: true")),
    # inner product, embedding
    "inner-product-axis1": Case(single("InnerProduct", (1, 3, 4, 4), inner_product="num_output: 5")),
    "inner-product-2d": Case(single("InnerProduct", (1, 6), inner_product="num_output: 3")),
    "inner-product-transpose-no-bias": Case(single("InnerProduct", (1, 3, 4, 4), inner_product=(
        "num_output: 5 transpose: true bias_term: false"))),
    "inner-product-axis2": Case(single("InnerProduct", (1, 3, 5), inner_product="num_output: 4 axis: 2")),
    "inner-product-axis2-transpose-no-bias": Case(single("InnerProduct", (1, 2, 3, 4), inner_product=(
        "num_output: 4 axis: 2 transpose: true bias_term: false"))),
    "embed-bias": Case(inputs(words=(1, 5)) + layer("Embed", "embed", "words", embed=(
        "input_dim: 10 num_output: 4 bias_term: true"))),
    "embed-no-bias-3d": Case(inputs(words=(1, 2, 3)) + layer("Embed", "embed", "words", embed=(
        "input_dim: 7 num_output: 3 bias_term: false"))),
    # element-wise
    "relu-negative-slope": Case(single("ReLU", relu="negative_slope: 0.1")),
    "prelu-channel-shared": Case(single("PReLU", prelu="channel_shared: true")),
    "prelu-per-channel": Case(single("PReLU", (1, 3, 2, 2))),
    "sigmoid": Case(single("Sigmoid")),
    "tanh": Case(single("TanH")),
    "elu": Case(single("ELU", elu="alpha: 0.7")),
    "bnll": Case(single("BNLL")),
    "absval": Case(single("AbsVal")),
    "power": Case(branches("Power", (1, 2, 3, 4), "power: 2 scale: 0.5 shift: 1", "power: 1",
                           "scale: -2", "power: 3")),
    "power-fractional": Case(single("Power", power="power: 0.5 scale: 2 shift: 0.5"), positive=True),
    "power-0": Case(single("Power", power="power: 0 scale: 3 shift: 2")),
    "power-scale-0": Case(single("Power", power="power: 3 scale: 0 shift: 2")),
    "exp-natural": Case(branches("Exp", (1, 2, 3, 4), "scale: 0.5 shift: 0.3", "")),
    "exp-base2-shift": Case(single("Exp", exp="base: 2 scale: 1.5 shift: 0.5")),
    "log-natural": Case(single("Log"), positive=True),
    "log-base10-shift": Case(single("Log", log="base: 10 scale: 2 shift: 0.5"), positive=True),
    "threshold": Case(single("Threshold", threshold="threshold: 0.3")),
    "clip": Case(single("Clip", clip="min: -0.5 max: 1.2")),
    "swish": Case(branches("Swish", (1, 2, 3, 4), "beta: 1.5", "")),
    "dropout": Case(single("Dropout", dropout="dropout_ratio: 0.3")),
    # normalisation
    "lrn-across-channels": Case(branches("LRN", (1, 6, 4, 4), "local_size: 3 alpha: 0.5 beta: 0.75 k: 2",
                                         "local_size: 5")),
    "lrn-within-channel": Case(branches("LRN", (1, 2, 5, 6), "norm_region: WITHIN_CHANNEL local_size: 3 alpha: 0.5 "
                                        "beta: 0.75", "norm_region: WITHIN_CHANNEL local_size: 5 k: 3")),
    "batchnorm-eps": Case(single("BatchNorm", (1, 3, 4, 4), batch_norm="eps: 0.001")),
    "batchnorm-factor-0.5": Case(single("BatchNorm", (1, 3, 4, 4)), bn_factor=0.5),
    "batchnorm-factor-0": Case(single("BatchNorm", (1, 3, 4, 4)), bn_factor=0.0),
    "batchnorm-2d": Case(single("BatchNorm", (1, 6))),
    "mvn": Case(branches("MVN", (1, 3, 4, 4), "normalize_variance: false", "across_channels: true eps: 0.001",
                         "normalize_variance: true")),
    "mvn-3d": Case(single("MVN", (1, 3, 8))),
    "mvn-2d": Case(branches("MVN", (1, 5), "normalize_variance: true", "across_channels: true")),
    "mvn-opset18": Case(branches("MVN", (1, 3, 4, 4), "normalize_variance: false", "across_channels: true"),
                        opset=18),
    # scale and bias
    "scale-bias-term": Case(single("Scale", (1, 3, 4, 4), scale="bias_term: true")),
    "scale-scalar": Case(single("Scale", (1, 3, 4, 4), scale="num_axes: 0 bias_term: true")),
    "scale-axis2-to-the-end": Case(single("Scale", (1, 3, 4, 4), scale="axis: 2 num_axes: -1")),
    "scale-axis0-num-axes2": Case(single("Scale", (2, 3, 4, 4), scale="axis: 0 num_axes: 2"), batch=2),
    "scale-two-bottoms": Case(inputs(data=(2, 3, 4, 4), factor=(2, 3, 4)) + layer(
        "Scale", "scale", "data factor", scale="axis: 0")),
    "scale-two-bottoms-bias-term": Case(inputs(data=(2, 3, 4, 4), factor=(2, 3)) + layer(
        "Scale", "scale", "data factor", scale="axis: 0 bias_term: true"), batch=2),
    "bias": Case(single("Bias", (1, 3, 4, 4))),
    "bias-axis0-num-axes1": Case(single("Bias", (2, 3, 4, 4), bias="axis: 0 num_axes: 1"), batch=2),
    "bias-axis-1-scalar": Case(single("Bias", (1, 3, 4, 4), bias="axis: -1 num_axes: 0")),
    "bias-two-bottoms": Case(inputs(data=(2, 3, 4, 4), shift=(2, 3)) + layer(
        "Bias", "bias", "data shift", bias="axis: 0")),
    # eltwise
    "eltwise-sum-coefficients": Case(inputs(a=(1, 3, 4, 4), b=(1, 3, 4, 4), c=(1, 3, 4, 4)) + layer(
        "Eltwise", "sum", "a b c", eltwise="operation: SUM coeff: 1 coeff: -0.5 coeff: 2")),
    "eltwise-prod": Case(inputs(a=(1, 3, 4, 4), b=(1, 3, 4, 4), c=(1, 3, 4, 4)) + layer(
        "Eltwise", "prod", "a b c", eltwise="operation: PROD")),
    "eltwise-max": Case(inputs(a=(1, 3, 4, 4), b=(1, 3, 4, 4), c=(1, 3, 4, 4)) + layer(
        "Eltwise", "max", "a b c", eltwise="operation: MAX")),
    # shapes
    "concat": Case(inputs(a=(1, 2, 3, 4), b=(1, 3, 3, 4), c=(1, 2, 3, 2))
                   + layer("Concat", "channels", "a b") + layer("Concat", "last", "a c", concat="axis: -1")
                   + layer("Concat", "legacy", "b a", concat="concat_dim: 1")),
    "slice-points": Case(inputs(data=(1, 5, 3, 4)) + layer("Slice", "slice", tops="s1 s2 s3", slice=(
        "axis: 1 slice_point: 1 slice_point: 3"))),
    "slice-equal-split": Case(inputs(data=(1, 2, 6, 4)) + layer("Slice", "slice", tops="u v", slice="axis: 2")
                              + layer("Slice", "legacy", tops="w z", slice="slice_dim: 1")),
    "split": Case(inputs(data=(1, 2, 3, 4)) + layer("Split", "split", tops="x y")),
    "flatten": Case(branches("Flatten", (1, 3, 4, 5), "", "axis: 1 end_axis: 2", "axis: 2 end_axis: -1")),
    "reshape-0-and-minus-1": Case(single("Reshape", (1, 4, 3, 2), reshape="shape { dim: 0 dim: -1 dim: 2 }")),
    "reshape-axis-num-axes": Case(branches("Reshape", (1, 4, 3, 2), "axis: 1 num_axes: 2 shape { dim: -1 }",
                                           "axis: -1 num_axes: 0 shape { dim: 1 }",
                                           "axis: 1 shape { dim: 2 dim: 0 dim: -1 }")),
    "crop-offsets": Case(inputs(data=(1, 3, 8, 8), ref=(1, 3, 5, 6))
                         + layer("Crop", "crop", "data ref", crop="axis: 2 offset: 1 offset: 2")
                         + layer("Crop", "corner", "data ref")),
    "crop-one-offset": Case(inputs(data=(1, 4, 6, 6), ref=(1, 2, 3, 3)) + layer(
        "Crop", "crop", "data ref", crop="axis: 1 offset: 1")),
    "tile": Case(branches("Tile", (1, 2, 3, 3), "axis: 1 tiles: 3", "axis: -1 tiles: 2")),
    "softmax-axis1": Case(single("Softmax", (1, 4, 3, 3))),
    "softmax-axis2": Case(single("Softmax", (1, 4, 3, 3), softmax="axis: 2")),
    "argmax-top-k": Case(single("ArgMax", (1, 6, 2, 2), argmax="top_k: 3")),
    "argmax-out-max-val": Case(single("ArgMax", (1, 6, 2, 2), argmax="top_k: 2 out_max_val: true")),
    "argmax-axis": Case(branches("ArgMax", (1, 6, 3, 2), "axis: 1 top_k: 2", "axis: 2 out_max_val: true",
                                 "axis: -1 top_k: 2 out_max_val: true")),
    "argmax-ties": Case(inputs(data=(1, 6, 2, 2)) + layer("Threshold", "steps", threshold="threshold: 0")
                        + layer("ArgMax", "first", "steps", argmax="top_k: 3")
                        + layer("ArgMax", "along", "steps", argmax="axis: 1 top_k: 2")),
    "reduction": Case(branches("Reduction", (1, 3, 4, 5), "operation: SUM axis: 1",
                               "operation: ASUM axis: 2 coeff: 0.5", "operation: SUMSQ axis: -1",
                               "operation: MEAN axis: 1 coeff: -2")),
    "reduction-opset13": Case(branches("Reduction", (1, 3, 4, 5), "operation: SUM axis: 2",
                                       "operation: ASUM axis: 1", "operation: SUMSQ axis: 1 coeff: 3",
                                       "operation: MEAN axis: 3"), opset=13),
    "reduction-opset18": Case(branches("Reduction", (1, 3, 4, 5), "operation: SUM axis: 2",
                                       "operation: ASUM axis: 1", "operation: SUMSQ axis: 1 coeff: 3",
                                       "operation: MEAN axis: 3"), opset=18),
    # in place, batch, a whole block
    "in-place-relu-on-convolution": Case(inputs(data=(1, 3, 5, 5))
                                         + conv("conv", "data", "num_output: 4 kernel_size: 3")
                                         + in_place("ReLU", "relu", "conv")),
    "in-place-batchnorm-scale": Case(inputs(data=(1, 3, 5, 5)) + conv("conv", "data", "num_output: 4 kernel_size: 3")
                                     + in_place("BatchNorm", "bn", "conv", batch_norm="eps: 0.0001")
                                     + in_place("Scale", "scale", "conv", scale="bias_term: true")),
    "in-place-on-the-input": Case(inputs(data=(1, 3, 5, 5)) + in_place("BatchNorm", "bn", "data")
                                  + in_place("Scale", "scale", "data")
                                  + conv("conv", "data", "num_output: 2 kernel_size: 1")),
    "in-place-on-the-input-as-output": Case(inputs(data=(1, 3, 2, 2))
                                            + in_place("Scale", "scale", "data", scale="bias_term: true")),
    "batch-fixed-4": Case(inputs(data=(1, 3, 5, 5)) + conv("conv", "data", "num_output: 4 kernel_size: 3")
                          + layer("InnerProduct", "fc", "conv", inner_product="num_output: 3"), batch=4),
}


# --- writing, exporting, comparing ---------------------------------------------------------------

def write_net(caffe: Any, folder: Path, text: str, bn_factor: float = BN_FACTOR, centre: bool = True) -> ModelFiles:
    """``text`` as ``deploy.prototxt``, and random weights for it as Caffe saves them."""
    deploy, weights = folder / "deploy.prototxt", folder / "weights.caffemodel"
    deploy.write_text(f'name: "{folder.name}"\n{text}')
    net = caffe.Net(str(deploy), caffe.TEST)
    rng = np.random.default_rng(0)
    for name, kind in zip(net._layer_names, (l.type for l in net.layers)):
        if name in net.params:
            fill(kind, net.params[name], rng, bn_factor)
    net.save(str(weights))
    files = ModelFiles(deploy, weights, labels=folder / "no-labels.txt")
    if not centre or len(net.inputs) != 1 or net.blobs[net.inputs[0]].data.ndim != 4:
        return files
    # one image input: verified on (255 x - 127.5) / 64 for drawn images x in [0, 1], of either sign
    channels = net.blobs[net.inputs[0]].data.shape[1]
    return ModelFiles(deploy, weights, labels=files.labels, mean_values=(127.5,) * channels, scale=1 / 64)


def fill(kind: str, blobs: Any, rng: np.random.Generator, bn_factor: float) -> None:
    """Random weights; BatchNorm's statistics as Caffe stores them: sums that its third blob, the
    moving-average factor, divides (0 makes them 0), the variances above 0."""
    if kind == "BatchNorm":
        mean, variance, factor = blobs
        mean.data[...] = rng.standard_normal(mean.data.shape) * (bn_factor or 1)
        variance.data[...] = rng.uniform(0.5, 2.0, variance.data.shape) * (bn_factor or 1)
        factor.data[...] = bn_factor
        return
    for blob in blobs:
        blob.data[...] = rng.standard_normal(blob.data.shape)


def export_and_compare(engine: Any, caffe: Any, folder: Path, files: ModelFiles, case: Case) -> Any:
    """Export ``files`` (verified by the exporter, every layer within the tolerance), then run the
    written model beside pycaffe on the test's own inputs."""
    request = exporter.ExportRequest(files, out=folder / "m.onnx", images=IMAGES, opset=case.opset,
                                     batch=case.batch, tolerance=TOLERANCE)
    result = exporter.export(engine, request, say=lambda _: None)
    verification = result.verification
    assert verification.passed
    assert {f.layer for f in verification.layers} == computing_layers(caffe, files.deploy)
    for figures in verification.layers:
        assert figures.rel <= TOLERANCE, figures
    assert (folder / "m.export.json").is_file()
    model = onnx.load(str(folder / "m.onnx"))
    assert model.opset_import[0].version == case.opset
    for value in model.graph.input:
        first = value.type.tensor_type.shape.dim[0]
        assert (first.dim_value == case.batch) if case.batch else (first.dim_param == "N"), value.name
    compare_with_onnxruntime(caffe, files, folder / "m.onnx", case)
    return result


def computing_layers(caffe: Any, deploy: Path) -> set[str]:
    """The deploy net's layers but its Input layers: each one the export converts and compares."""
    net = text_format.Merge(deploy.read_text(), caffe.proto.caffe_pb2.NetParameter())
    return {l.name for l in net.layer if l.type != "Input"}


def compare_with_onnxruntime(caffe: Any, files: ModelFiles, model: Path, case: Case) -> None:
    import onnxruntime

    net, feeds = caffe_on_own_inputs(caffe, files, case.batch or DYNAMIC_RUN, case.positive)
    session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    assert len(names) == len(net.outputs)
    for blob, name, got in zip(net.outputs, names, session.run(names, feeds)):
        # an input rewritten in place keeps its name for the input; its last version is BLOB/LAYER
        assert name == blob or (blob in net.inputs and name.startswith(f"{blob}/")), (blob, name)
        want = net.blobs[blob].data
        assert got.shape == want.shape, blob
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL * scale_of(want), err_msg=blob)


def caffe_on_own_inputs(caffe: Any, files: ModelFiles, batch: int, positive: bool) -> tuple[Any, dict]:
    """pycaffe's net of ``files`` run forward on :func:`own_inputs` at ``batch``; (the net, the inputs)."""
    net = caffe.Net(str(files.deploy), str(files.weights), caffe.TEST)
    feeds = own_inputs(net, batch, positive, np.random.default_rng(1))
    for name, x in feeds.items():
        net.blobs[name].reshape(*x.shape)
    net.reshape()
    for name, x in feeds.items():
        net.blobs[name].data[...] = x
    net.forward()
    return net, feeds


def own_inputs(net: Any, batch: int, positive: bool, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Each input at ``batch`` items: N(0, 4), or uniform in [0.5, 3), or indices below an Embed's input_dim."""
    index_range = {net.bottom_names[name][0]: l.blobs[0].data.shape[0]
                   for name, l in zip(net._layer_names, net.layers) if l.type == "Embed"}
    feeds = {}
    for name in net.inputs:
        shape = (batch, *net.blobs[name].data.shape[1:])
        if name in index_range:
            x = rng.integers(0, index_range[name], shape)
        elif positive:
            x = rng.uniform(0.5, 3.0, shape)
        else:
            x = rng.standard_normal(shape) * 2
        feeds[name] = x.astype(np.float32)
    return feeds


def scale_of(x: np.ndarray) -> float:
    ordinary = np.abs(x[np.isfinite(x)])
    return float(ordinary[ordinary < HUGE].max(initial=0.0))


# --- tests ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_layer_exports_as_caffe_computes_it(engine, caffe, tmp_path, case):
    files = write_net(caffe, tmp_path, case.net, case.bn_factor, centre=not case.positive)
    export_and_compare(engine, caffe, tmp_path, files, case)


def test_an_average_over_an_empty_window_fails_the_export(engine, caffe, tmp_path):
    """A window wholly past the input: Caffe's AVE pooling divides 0 by 0 there, so the net answers NaN
    for every input; that is a failed verification naming the layer, and nothing is written."""
    files = write_net(caffe, tmp_path, pooled((1, 2, 8, 8), "kernel_size: 2 stride: 4", "AVE"))
    with pytest.raises(ExportError, match=r"layer 'ave' \(Pooling\) gives \d+ values that are not finite"):
        exporter.export(engine, exporter.ExportRequest(files, out=tmp_path / "m.onnx", images=IMAGES),
                        say=lambda _: None)
    assert not (tmp_path / "m.onnx").exists()


def test_a_resnet_block_exports(engine, caffe, tmp_path):
    """Convolution, BatchNorm, Scale and ReLU in place, a shortcut summed in, global pooling and a
    classifier, through the whole export (the net and its weights checked by Caffe in a child first)."""
    result = export_and_compare(engine, caffe, tmp_path, write_net(caffe, tmp_path, RESNET_BLOCK), Case(RESNET_BLOCK))
    assert result.verification.top1_agree == IMAGES


def test_in_place_versions_are_named_after_their_layer(engine, caffe, tmp_path):
    """Each version of a blob rewritten in place is a tensor of its own, ``BLOB/LAYER``; the last
    keeps the blob's name, which the Pooling and the Concat read."""
    export_and_compare(engine, caffe, tmp_path, write_net(caffe, tmp_path, RENAMED_BY_IN_PLACE),
                       Case(RENAMED_BY_IN_PLACE))
    model = onnx.load(str(tmp_path / "m.onnx"))
    written = {name for node in model.graph.node for name in node.output}
    assert {"c/conv", "c/relu", "c/scale", "c", "side", "cat"} <= written
    assert [o.name for o in model.graph.output] == ["cat"]


REFUSALS = {
    "python-layer": (
        inputs(data=(1, 3, 4, 4)) + layer("Python", "py", python='module: "mine" layer: "Mine"'),
        "layer 'py' (Python) cannot be exported: runs Python code, which an ONNX model cannot hold"),
    "data-layer": (
        'layer { name: "mnist" type: "Data" top: "data" top: "label" data_param { source: "nowhere" '
        'backend: LMDB batch_size: 4 } }\n' + conv("conv", "data", "num_output: 2 kernel_size: 3")
        + layer("SoftmaxWithLoss", "loss", "conv label"),
        "layer 'mnist' (Data) cannot be exported: reads training data: export the deploy net (--deploy FILE), "
        "whose Input layer takes the images"),
    "unknown-type": (
        inputs(data=(1, 3, 4, 4)) + layer("Mystery", "mystery"),
        "layer 'mystery' has type 'Mystery', which is not a BVLC Caffe 1.0 layer the export covers"),
}


@pytest.mark.parametrize("text, message", REFUSALS.values(), ids=REFUSALS.keys())
def test_a_layer_caffe_cannot_build_here_is_refused_first(engine, caffe, tmp_path, text, message):
    """Refused before Caffe builds the net, so the weights are those of another net."""
    files = write_net(caffe, tmp_path, inputs(data=(1, 3, 4, 4)) + conv("conv", "data", "num_output: 2 kernel_size: 3"))
    files.deploy.write_text(f'name: "refused"\n{text}')
    assert_refused(engine, tmp_path, files, message)


BUILT_REFUSALS = {
    "pooling-stochastic": (
        inputs(data=(1, 2, 6, 6)) + conv("conv", "data", "num_output: 2 kernel_size: 1")
        + layer("Pooling", "pool", "conv", pooling="pool: STOCHASTIC kernel_size: 2 stride: 2"),
        "layer 'pool' (Pooling) cannot be exported: stochastic pooling at test time weights each window by its "
        "values; ONNX has no such operator"),
    "batchnorm-batch-statistics": (
        single("BatchNorm", (1, 3, 4, 4), batch_norm="use_global_stats: false"),
        "layer 'batchnorm' (BatchNorm) cannot be exported: use_global_stats is false, so Caffe normalises each "
        "batch by its own statistics at test time"),
}


@pytest.mark.parametrize("text, message", BUILT_REFUSALS.values(), ids=BUILT_REFUSALS.keys())
def test_a_layer_onnx_cannot_hold_is_refused(engine, caffe, tmp_path, text, message):
    assert_refused(engine, tmp_path, write_net(caffe, tmp_path, text), message)


def assert_refused(engine: Any, folder: Path, files: ModelFiles, message: str) -> None:
    request = exporter.ExportRequest(files, out=folder / "m.onnx", images=IMAGES)
    with pytest.raises(ExportError, match=re.escape(message)):
        exporter.export(engine, request, say=lambda _: None)
    assert not (folder / "m.onnx").exists()
    assert not (folder / "m.export.json").exists()
