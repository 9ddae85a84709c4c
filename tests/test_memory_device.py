"""What a GPU adds to Caffe's blobs (caffetool.memory.device): CUDA's pages, the layers cuDNN's classes
replace, cuDNN's shared workspace, and the estimator against the H200 record of patch 0006's engine
(benchmarks/gpu/h200-2026-11-27-call1: NVML's peak over a one-layer baseline net)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf import text_format

from benchmarks.gpuproof import nets as proof_nets
from caffetool.layers.convolutions import winograd_nonfused_bytes
from caffetool.memory import device, estimator, netgraph
from caffetool.memory.gpumeasure import BASELINE_NET

from .test_memory_layers import FILLER, layer

PAGE = device.PAGE
MIB = 2**20
RECORD = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu" / "h200-2026-11-27-call1" / "results.json"


def parse(caffe, text):
    return text_format.Parse(text, caffe.proto.caffe_pb2.NetParameter())


def record() -> dict:
    return json.loads(RECORD.read_text())


def measured(r: dict, name: str) -> int:
    """Bytes NVML saw over the baseline net."""
    return r[f"memory_{name}"]["used"] - r["memory_baseline"]["used"]


def test_large_allocations_take_whole_pages_and_small_ones_share_them():
    assert device.page_rounding([PAGE]) == 0
    assert device.page_rounding([PAGE + 1]) == PAGE - 1
    assert device.page_rounding([3 * MIB, 6 * MIB]) == MIB
    assert device.page_rounding([100]) == -100  # packed into the page of small blocks the baseline holds
    # 5,000 blocks of 1,000 bytes at 512-byte spacing: 5,120,000 bytes, three pages, two beyond the baseline's
    assert device.page_rounding([1000] * 5000) == 2 * PAGE - 5_000_000
    assert device.page_rounding([3 * MIB] + [1000] * 5000) == MIB + 2 * PAGE - 5_000_000


def test_gpu_estimates_count_pages_and_cpu_estimates_keep_mallocs_rounding(caffe):
    """Two 3 MiB blobs (an input and a ReLU's own top) hold two pages each on the device."""
    text = ('layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 dim: 786432 } } }\n'
            + layer("relu", "ReLU", ["x"], ["y"]))
    gpu = estimator.estimate(parse(caffe, text), estimator.Options(phase="test", mode="gpu"))
    cpu = estimator.estimate(parse(caffe, text), estimator.Options(phase="test", mode="cpu"))
    assert gpu.allocations == [3 * MIB, 3 * MIB]
    assert gpu.allocator == 2 * MIB and gpu.total == 8 * MIB
    assert cpu.total - cpu.allocator == gpu.total - gpu.allocator  # the same blobs
    assert 2 * 4096 <= cpu.allocator < MIB  # glibc's 4 KiB pages for mmapped chunks and Caffe's objects


CALIBRATION = {
    "dropout": proof_nets.dropout_net,
    **{f"cudnn_{kind}_{n}": (lambda kind=kind, n=n: proof_nets.neuron_chain(kind, n))
       for kind in ("relu", "pool") for n in (1, 16)},
    **{f"conv_{engine.lower()}_{n}": (lambda engine=engine, n=n: proof_nets.conv_chain(engine, n))
       for engine in ("CUDNN", "CAFFE") for n in (1, 4, 16)},
}


@pytest.mark.parametrize("name", list(CALIBRATION))
def test_small_nets_cost_what_the_h200_measured(caffe, name):
    """Patch 0006's engine: tiny blobs fit in the baseline's page of small blocks (+0 MiB, 16
    convolutions on Caffe's engine included), cuDNN's handle costs nothing, its convolutions 2 MiB
    once; Caffe ran them without a TEST net."""
    options = estimator.Options(mode="gpu", cudnn=True, test_net=False)
    assert estimator.estimate(parse(caffe, BASELINE_NET), options).total == 0
    assert estimator.estimate(parse(caffe, CALIBRATION[name]()), options).total == measured(record(), name)


CUDNN_NET = """
layer { name: "in" type: "Input" top: "data" top: "label" input_param { shape { dim: 8 dim: 16 dim: 20 dim: 20 } shape { dim: 8 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv" convolution_param { num_output: 16 kernel_size: 3 pad: 1 } }
layer { name: "norm" type: "LRN" bottom: "conv" top: "norm" lrn_param { local_size: 5 } }
layer { name: "fc" type: "InnerProduct" bottom: "norm" top: "fc" inner_product_param { num_output: 10 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss" }
"""


def test_cudnn_classes_hold_only_what_their_gpu_code_touches(caffe):
    """cudnn_conv_layer.cu takes the input's gradient only when it propagates (Caffe's engine takes it
    whenever the weights learn) and needs no columns; cudnn_lrn_layer.cu keeps no ``scale_``;
    cudnn_softmax_layer.cu neither ``scale_`` nor, on the device, ``sum_multiplier_``."""
    net = parse(caffe, CUDNN_NET)
    rows = {on: {r.layer: r for r in estimator.estimate(net, estimator.Options(mode="gpu", cudnn=on, test_net=False)).rows}
            for on in (False, True)}
    blob = 8 * 16 * 20 * 20 * 4
    assert rows[False]["in"].diff_bytes == blob and rows[True]["in"].diff_bytes == 0
    assert rows[False]["norm"].scratch_bytes == blob and rows[True]["norm"].scratch_bytes == 0
    columns, bias_multiplier = 16 * 9 * 20 * 20 * 4, 20 * 20 * 4
    assert rows[False]["conv"].scratch_bytes == columns + bias_multiplier
    assert rows[False]["loss"].scratch_bytes - rows[True]["loss"].scratch_bytes == (10 + 8) * 4  # sum_multiplier, scale
    caffe_loss = parse(caffe, CUDNN_NET.replace('top: "loss" }', 'top: "loss" softmax_param { engine: CAFFE } }'))
    kept = {r.layer: r for r in estimator.estimate(caffe_loss, estimator.Options(mode="gpu", cudnn=True, test_net=False)).rows}
    assert kept["loss"].scratch_bytes == rows[False]["loss"].scratch_bytes  # engine: CAFFE keeps Caffe's layer


def test_accuracy_on_a_gpu_counts_in_its_inputs_gradients(caffe):
    """accuracy_layer.cu works in the scores' gradient and counts in the labels' (the CPU code in
    neither); both are Split tops of their own in the TEST net, where softmax_loss_layer.cu also works
    in its input's gradient."""
    text = CUDNN_NET + layer("acc", "Accuracy", ["fc", "label"], ["acc"], "include { phase: TEST }")
    e = {mode: estimator.estimate(parse(caffe, text), estimator.Options(mode=mode)) for mode in ("cpu", "gpu")}
    test_diffs = {mode: {r.layer: r.diff_bytes for r in x.test_rows} for mode, x in e.items()}
    scores, labels = 8 * 10 * 4, 8 * 4
    assert sum(test_diffs["gpu"].values()) - sum(test_diffs["cpu"].values()) == 2 * scores + labels
    assert test_diffs["gpu"]["label_in_1_split"] == labels and test_diffs["cpu"]["label_in_1_split"] == 0


def chain(convs: int) -> str:
    text = 'layer { name: "in" type: "Input" top: "c0" top: "label" input_param { shape { dim: 4 dim: 8 dim: 16 dim: 16 } shape { dim: 4 } } }\n'
    for i in range(1, convs + 1):
        text += layer(f"c{i}", "Convolution", [f"c{i - 1}"], [f"c{i}"],
                      f"convolution_param {{ num_output: 8 kernel_size: 3 pad: 1 {FILLER} }}")
    return (text + layer("fc", "InnerProduct", [f"c{convs}"], ["fc"], "inner_product_param { num_output: 2 }")
            + layer("loss", "SoftmaxWithLoss", ["fc", "label"], ["loss"]))


LOG = """I20261127 13:10:35.088219  1050 cudnn_conv.cpp:371] cuDNN c1 forward: IMPLICIT_PRECOMP_GEMM, workspace 1024 bytes, FMA math (6 candidates, heuristic)
I20261127 13:10:35.184974  1050 cudnn_conv.cpp:371] cuDNN c2 forward: FFT, workspace 3000000 bytes, FMA math (6 candidates, heuristic)
I20261127 13:10:35.235865  1050 cudnn_conv.cpp:371] cuDNN c2 backward filter: WINOGRAD_NONFUSED, workspace 7000000 bytes, FMA math (3 candidates, heuristic)
W20261127 13:10:35.236000  1050 cudnn_conv.cpp:310] c2: cuDNN backward data FFT failed (CUDNN_STATUS_INTERNAL_ERROR); using the next candidate
I20261127 13:10:35.239440  1050 cudnn_conv.cpp:371] cuDNN c2 backward data: FFT, workspace 9000000 bytes, FMA math (4 candidates, heuristic)
I20261127 13:10:35.239500  1050 cudnn_conv.cpp:371] cuDNN c2 backward data: ALGO_1, workspace 0 bytes, FMA math (3 candidates, heuristic)
I20261127 13:10:35.247279  1050 cudnn_conv.cpp:371] cuDNN c1 backward filter: WINOGRAD_NONFUSED, workspace 5000000 bytes, FMA math (3 candidates, heuristic)
"""


def test_the_engines_logged_choices_size_the_one_shared_workspace(caffe, tmp_path):
    """Patch 0006: the workspace grows to the largest need of the calls that ran (a failed candidate's
    need included) within the limit; the TEST net and inference run forward only."""
    (tmp_path / "caffe.log").write_text(LOG)
    needs = device.logged_needs((tmp_path / "caffe.log").read_text())
    assert needs == {("c1", "forward"): 1024, ("c2", "forward"): 3_000_000, ("c2", "backward filter"): 7_000_000,
                     ("c2", "backward data"): 9_000_000, ("c1", "backward filter"): 5_000_000}
    net = parse(caffe, chain(2))

    def shared(**options) -> dict[str, int]:
        """Each convolution's scratch: cuDNN's class keeps no columns and no bias_multiplier, so only
        the fixed cost (on the first) and the workspace (on the layer that needs most) are there."""
        e = estimator.estimate(net, estimator.Options(mode="gpu", cudnn=True, cudnn_choices=needs, **options))
        return {r.layer: r.scratch_bytes for r in e.rows if r.layer in ("c1", "c2")}

    conv = device.CUDNN_CONV_BYTES
    assert shared(cudnn_workspace_mb=256) == {"c1": conv, "c2": 9_000_000}
    assert 9_000_000 in estimator.estimate(net, estimator.Options(mode="gpu", cudnn=True, cudnn_choices=needs)).allocations
    assert shared(phase="test", cudnn_workspace_mb=256) == {"c1": conv, "c2": 3_000_000}
    assert shared(cudnn_workspace_mb=2) == {"c1": conv + 2 * MIB, "c2": 0}  # Rank drops what is past the limit


def test_the_modelled_weight_gradient_of_a_3x3_convolution_is_cudnns_winograd(caffe):
    """WINOGRAD_NONFUSED, as cuDNN 9.19 logged it in the H200 record: VGG-16 b16 conv3_2 and CaffeNet
    b32 conv4 (two groups); where it is past the limit, one image's columns."""
    assert winograd_nonfused_bytes(16, 256, 256, 1, 56, 56) == 240_648_192
    assert winograd_nonfused_bytes(32, 384, 384, 2, 13, 13) == 67_239_936
    node = next(n for n in netgraph.build(parse(caffe, chain(1)), "train", None, None).nodes if n.name == "c1")
    winograd, columns = winograd_nonfused_bytes(4, 8, 8, 1, 16, 16), 8 * 9 * 16 * 16 * 4
    assert node.info.cudnn_work["backward filter"] == (winograd, columns)
    assert device.need(node, "backward filter", 10**9, None) == winograd
    assert device.need(node, "backward filter", winograd - 1, None) == min(columns, winograd - 1)
    assert device.need(node, "forward", 10**9, None) == columns


RECORDED = {("vgg16", "cudnn"), ("vgg16", "caffe"), ("googlenet", "cudnn"), ("googlenet", "caffe"),
            ("resnet50", "cudnn"), ("resnet50", "caffe"), ("caffenet", "cudnn")}


def test_the_estimate_matches_the_h200_record(caffe, monkeypatch):
    """Within 1% where NVML caught the whole step. CaffeNet on Caffe's engine measured its step
    without the solver's history, allocated last by the first update a millisecond before the
    process ends (within 1% of the estimate less that history: the 2 ms sampling missed the end);
    LeNet on cuDNN measured two pages more than its estimate."""
    monkeypatch.syspath_prepend(str(RECORD.parents[2]))  # the report's own imports: gpuproof, memory_nets
    from gpuproof import report

    r = record()
    estimated = report.estimates(list(proof_nets.MEMORY_NETS), r)
    for name, variant in RECORDED:
        got = measured(r, f"{name}_{variant}")
        assert abs(estimated[name][variant] - got) <= 0.01 * got, (name, variant)
    net, shape, _ = proof_nets.train_net(caffe, "caffenet", 32)
    history = estimator.estimate(net, estimator.Options(mode="gpu", input_shape=shape)).groups["model"] // 3
    got = measured(r, "caffenet_caffe")
    assert abs(estimated["caffenet"]["caffe"] - history - got) <= 0.01 * got
    assert 0 < measured(r, "lenet_cudnn") - estimated["lenet"]["cudnn"] <= 2 * PAGE
