"""The GPU training loop's patches (0012-0014) read as they must where no GPU can run them.

Read from the patched source, not from the patch files: on the GPU path of a training iteration no
host copy of a blob is read or written and nothing waits for the device, since each such call
makes the host wait for every kernel queued before it. The same check on the engine without those
patches finds the waits BVLC Caffe had, so it can tell the two apart. The runs on a GPU
(``benchmarks/gpu_proof.py``) count the waits themselves.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from caffetool import config
from caffetool.engine import source
from caffetool.engine.recipe import CAFFE_SOURCE, GPU_LOOP_PATCHES, PROJECT_PATCHES

# What makes the host wait for the GPU, or touches a blob's host copy, on a GPU code path.
HOST_WAITS = re.compile(
    r"\b(?:mutable_)?cpu_(?:data|diff)\(\)|\bcaffe_gpu_(?:asum|dot)(?:<\w+>)?\(|\bcuda(?:Device|Stream|Event)Synchronize\b"
    r"|\bcudaMemcpy\(")
# The functions of one training iteration on the GPU: (file, the function's opening words).
ITERATION = (
    ("src/caffe/layers/softmax_loss_layer.cu", "void SoftmaxWithLossLayer<Dtype>::Forward_gpu("),
    ("src/caffe/layers/softmax_loss_layer.cu", "void SoftmaxWithLossLayer<Dtype>::Backward_gpu("),
    ("src/caffe/layers/base_data_layer.cu", "void BasePrefetchingDataLayer<Dtype>::Forward_gpu("),
)
ITERATION_WITH_LOOP = ITERATION + (
    ("src/caffe/solver.cpp", "void Solver<Dtype>::ForwardBackwardOnDevice("),
    ("src/caffe/solver.cpp", "void Solver<Dtype>::StepWithGraph("),
    ("src/caffe/solver.cpp", "void Solver<Dtype>::GraphedWork("),
    ("src/caffe/solvers/sgd_solver.cpp", "bool SGDSolver<Dtype>::PrepareFusedUpdate("),
    ("src/caffe/solvers/sgd_solver.cpp", "void SGDSolver<Dtype>::LaunchFusedUpdate("),
)


def patched(tmp: Path, patches: tuple[str, ...]) -> Path:
    tree = tmp / "caffe"
    source.unpack(CAFFE_SOURCE, config.cache_home() / "sources", tree)
    source.apply_patches(tree, tmp / "patch.log", patches)
    return tree


@pytest.fixture(scope="module")
def trees(tmp_path_factory) -> dict[str, Path]:
    if not (config.cache_home() / "sources" / CAFFE_SOURCE.orig.name).is_file():
        pytest.skip("the engine's source is not in the cache (engine.install puts it there)")
    without = tuple(p for p in PROJECT_PATCHES if p not in GPU_LOOP_PATCHES)
    return {"with": patched(tmp_path_factory.mktemp("gpu-loop"), PROJECT_PATCHES),
            "without": patched(tmp_path_factory.mktemp("before-gpu-loop"), without)}


def body(text: str, opening: str) -> str:
    """The function that starts with ``opening``, to its closing brace."""
    start = text.index(opening)
    depth, i = 0, text.index("{", start)
    for i in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i + 1]
    raise AssertionError(f"{opening} has no end")


def layer_forward_on_gpu(tree: Path) -> str:
    """``Layer::Forward``'s GPU case (layer.hpp), where each loss top's value is taken."""
    text = body((tree / "include/caffe/layer.hpp").read_text(), "inline Dtype Layer<Dtype>::Forward(")
    return text[text.index("case Caffe::GPU:"):text.index("default:")]


def waits(tree: Path, functions: tuple[tuple[str, str], ...]) -> dict[str, list[str]]:
    found = {}
    for file, opening in functions:
        calls = HOST_WAITS.findall(body((tree / file).read_text(), opening))
        if calls:
            found[opening] = calls
    return found


def test_no_host_copy_is_read_and_nothing_waits_in_a_gpu_training_iteration(trees):
    assert waits(trees["with"], ITERATION_WITH_LOOP) == {}
    # Layer::Forward keeps its host return for callers with no device sink (tests, pycaffe's forward):
    # the one dot it may take is behind the sink's check.
    forward = layer_forward_on_gpu(trees["with"])
    assert forward.index("if (sink)") < forward.index("caffe_gpu_dot(")


def test_the_engine_without_the_gpu_loop_waits_for_its_loss(trees):
    found = waits(trees["without"], ITERATION)
    assert found["void SoftmaxWithLossLayer<Dtype>::Forward_gpu("] == ["caffe_gpu_asum(", "caffe_gpu_asum(",
                                                                         "mutable_cpu_data()"]
    assert "cpu_diff()" in found["void SoftmaxWithLossLayer<Dtype>::Backward_gpu("]
    assert "caffe_gpu_dot(" in layer_forward_on_gpu(trees["without"])


# The CUDA sources of each layer type the graph replays (solver.cpp's kGraphLayers); Flatten and
# Reshape have none: their GPU pass shares the bottom's memory, as their CPU pass does.
GRAPH_LAYER_SOURCES = {
    "AbsVal": ("absval",), "Bias": ("bias",), "BNLL": ("bnll",), "Concat": ("concat",),
    "Convolution": ("conv", "cudnn_conv"), "ELU": ("elu",), "Eltwise": ("eltwise",), "Flatten": (),
    "InnerProduct": ("inner_product",), "LRN": ("lrn", "cudnn_lrn", "cudnn_lcn"),
    "Pooling": ("pooling", "cudnn_pooling"), "Power": ("power",), "ReLU": ("relu", "cudnn_relu"),
    "Reshape": (), "Sigmoid": ("sigmoid", "cudnn_sigmoid"), "Silence": ("silence",), "Slice": ("slice",),
    "Softmax": ("softmax", "cudnn_softmax"), "SoftmaxWithLoss": ("softmax_loss",), "Split": ("split",),
    "TanH": ("tanh", "cudnn_tanh"),
}


def test_the_graph_replays_only_layers_whose_gpu_code_reads_nothing_on_the_host(trees):
    solver = (trees["with"] / "src/caffe/solver.cpp").read_text()
    listed = re.findall(r'"(\w+)"', re.search(r"kGraphLayers\[\] = \{(.*?)\};", solver, re.S).group(1))
    assert sorted(listed) == sorted(GRAPH_LAYER_SOURCES)
    # InnerProduct's one-row case reads its all-ones multiplier's first value on the host: a
    # constant, filled once (0006), whose host copy is never stale, which a capture takes as it is.
    layers = trees["with"] / "src/caffe/layers"
    for name, stems in GRAPH_LAYER_SOURCES.items():
        for stem in stems:
            text = (layers / f"{stem}_layer.cu").read_text().replace("bias_multiplier_.cpu_data()[0]", "1")
            assert not HOST_WAITS.findall(text), f"{name}: {stem}_layer.cu"
    # The types the graph leaves out for a host read are caught by the same check.
    for left_out in ("scale", "prelu", "accuracy", "batch_norm", "euclidean_loss"):
        assert HOST_WAITS.findall((layers / f"{left_out}_layer.cu").read_text()), left_out
