"""Nets written for another fork of Caffe (caffetool/nets/forks.py): every task that reads a net says
which layer, of which type, from which fork, in one ``Error:`` line, and a user's own pycaffe script
gets the engine's ``caffe.UnsupportedLayer`` for the same nets instead of an abort.

The nets are cut down from the published ones, written as their authors wrote them (single quotes,
comments, parameters on one line): py-faster-rcnn's VGG16 ``faster_rcnn_end2end/test.prototxt``,
SegNet's ``segnet_inference.prototxt``, PSPNet's ``pspnet50_ADE20K.prototxt``, a YOLO v2 port's
deploy net, and SSD's ``VGG_VOC0712_SSD_300x300`` ``train.prototxt``. Each comes as published and
"typed only": its fork's parameter blocks removed, so that it parses and only its layer types (or
its Python layer) are foreign.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import pytest

from caffetool.errors import NetError, UnsupportedLayer
from caffetool.layers import catalogue
from caffetool.layers.entry import LayerType
from caffetool.nets import forks, prototxt
from caffetool.runs.folder import RunFolder

from .test_demo import free_port
from .test_project_cli import caffetool

pytestmark = pytest.mark.engine

FASTER_RCNN = """name: "VGG_ILSVRC_16_layers"

input: "data"
input_shape {
  dim: 1
  dim: 3
  dim: 224
  dim: 224
}

input: "im_info"
input_shape {
  dim: 1
  dim: 3
}

layer {
  name: "conv5_3"
  type: "Convolution"
  bottom: "data"
  top: "conv5_3"
  convolution_param {
    num_output: 16
    pad: 1 kernel_size: 3
  }
}

#========= RPN ============

layer {
  name: "rpn_cls_score"
  type: "Convolution"
  bottom: "conv5_3"
  top: "rpn_cls_score"
  convolution_param {
    num_output: 18   # 2(bg/fg) * 9(anchors)
    kernel_size: 1 pad: 0 stride: 1
  }
}
layer {
  name: "rpn_bbox_pred"
  type: "Convolution"
  bottom: "conv5_3"
  top: "rpn_bbox_pred"
  convolution_param {
    num_output: 36   # 4 * 9(anchors)
    kernel_size: 1 pad: 0 stride: 1
  }
}
layer {
  name: 'proposal'
  type: 'Python'
  bottom: 'rpn_cls_score'
  bottom: 'rpn_bbox_pred'
  bottom: 'im_info'
  top: 'rois'
  python_param {
    module: 'rpn.proposal_layer'
    layer: 'ProposalLayer'
    param_str: "'feat_stride': 16"
  }
}

#========= RCNN ============

layer {
  name: "roi_pool5"
  type: "ROIPooling"
  bottom: "conv5_3"
  bottom: "rois"
  top: "pool5"
  roi_pooling_param {
    pooled_w: 7
    pooled_h: 7
    spatial_scale: 0.0625 # 1/16
  }
}
layer {
  name: "cls_score"
  type: "InnerProduct"
  bottom: "pool5"
  top: "cls_score"
  inner_product_param {
    num_output: 21
  }
}
"""

SEGNET = """name: "VGG_ILSVRC_16_layer"
input: "data"
input_dim: 1
input_dim: 3
input_dim: 360
input_dim: 480
layer {
  bottom: "data"
  top: "conv1_1"
  name: "conv1_1"
  type: "Convolution"
  convolution_param {
    num_output: 64
    pad: 1
    kernel_size: 3
  }
}
layer {
  bottom: "conv1_1"
  top: "pool1"
  top: "pool1_mask"
  name: "pool1"
  type: "Pooling"
  pooling_param {
    pool: MAX
    kernel_size: 2
    stride: 2
  }
}
layer {
  name: "upsample1"
  type: "Upsample"
  bottom: "pool1"
  top: "pool1_D"
  bottom: "pool1_mask"
  upsample_param {
    scale: 2
  }
}
layer {
  bottom: "pool1_D"
  top: "conv1_1_D"
  name: "conv1_1_D"
  type: "Convolution"
  convolution_param {
    num_output: 11
    pad: 1
    kernel_size: 3
  }
}
"""

PSPNET = """name: "pspnet50_ADE20K"
input: "data"
input_dim: 1
input_dim: 3
input_dim: 473
input_dim: 473
layer {
  name: "conv5_3"
  type: "Convolution"
  bottom: "data"
  top: "conv5_3"
  convolution_param {
    num_output: 32
    kernel_size: 3
    pad: 1
    stride: 8
  }
}
layer {
  name: "conv5_3_pool1"
  type: "Pooling"
  bottom: "conv5_3"
  top: "conv5_3_pool1"
  pooling_param {
    pool: AVE
    kernel_size: 60
    stride: 60
  }
}
layer {
  name: "conv5_3_pool1_interp"
  type: "Interp"
  bottom: "conv5_3_pool1"
  top: "conv5_3_pool1_interp"
  interp_param {
    height: 60
    width: 60
  }
}
layer {
  name: "conv5_3_concat"
  type: "Concat"
  bottom: "conv5_3"
  bottom: "conv5_3_pool1_interp"
  top: "conv5_3_concat"
}
"""

YOLO = """name: "Darknet-19"
input: "data"
input_shape { dim: 1 dim: 3 dim: 416 dim: 416 }
layer {
  name: "conv1"
  type: "Convolution"
  bottom: "data"
  top: "conv1"
  convolution_param {
    num_output: 32
    kernel_size: 3
    pad: 1
    stride: 32
    bias_term: false
  }
}
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" relu_param { negative_slope: 0.1 } }
layer {
  name: "conv22"
  type: "Convolution"
  bottom: "conv1"
  top: "conv22"
  convolution_param {
    num_output: 125
    kernel_size: 1
  }
}
layer {
  name: "region1"
  type: "Region"
  bottom: "conv22"
  top: "region1"
  region_param {
    classes: 20
    coords: 4
    boxes_of_each_grid: 5
    softmax: true
  }
}
"""

SSD_TRAIN = """name: "VGG_VOC0712_SSD_300x300_train"
layer {
  name: "data"
  type: "AnnotatedData"
  top: "data"
  top: "label"
  include {
    phase: TRAIN
  }
  transform_param {
    mirror: true
    mean_value: 104
    mean_value: 117
    mean_value: 123
    resize_param {
      prob: 1
      resize_mode: WARP
      height: 300
      width: 300
      interp_mode: LINEAR
    }
    emit_constraint {
      emit_type: CENTER
    }
  }
  data_param {
    source: "examples/VOC0712/VOC0712_trainval_lmdb"
    batch_size: 32
    backend: LMDB
  }
  annotated_data_param {
    batch_sampler {
      max_sample: 1
      max_trials: 1
    }
    label_map_file: "data/VOC0712/labelmap_voc.prototxt"
  }
}
layer {
  name: "mbox_loss"
  type: "MultiBoxLoss"
  bottom: "mbox_loc"
  bottom: "mbox_conf"
  bottom: "mbox_priorbox"
  bottom: "label"
  top: "mbox_loss"
  include {
    phase: TRAIN
  }
  propagate_down: true
  propagate_down: true
  propagate_down: false
  propagate_down: false
  loss_param {
    normalization: VALID
  }
  multibox_loss_param {
    loc_loss_type: SMOOTH_L1
    conf_loss_type: SOFTMAX
    loc_weight: 1.0
    num_classes: 21
    share_location: true
    match_type: PER_PREDICTION
    overlap_threshold: 0.5
    use_prior_for_matching: true
    background_label_id: 0
    neg_pos_ratio: 3.0
    code_type: CENTER_SIZE
    mining_type: MAX_NEGATIVE
  }
}
"""

# The fork's own parameter blocks, removed for the "typed only" form.
FORK_BLOCKS = ("roi_pooling_param", "upsample_param", "interp_param", "region_param", "resize_param",
               "emit_constraint", "annotated_data_param", "multibox_loss_param")


@dataclass(frozen=True)
class Expected:
    """What the refusal names: the layer, its type, the fork's words (``caffe.forks``' own) and the
    line it points at (the first line of the text holding ``at``)."""

    layer: str
    type: str
    fork: str
    at: str


# (net, form) -> (text, what its refusal names)
CASES = {
    ("faster-rcnn", "published"): (FASTER_RCNN, Expected("roi_pool5", "ROIPooling", "py-faster-rcnn",
                                                         "  roi_pooling_param {")),
    ("faster-rcnn", "typed"): (FASTER_RCNN, Expected("proposal", "Python", "py-faster-rcnn", "  python_param {")),
    ("segnet", "published"): (SEGNET, Expected("upsample1", "Upsample", "SegNet", "  upsample_param {")),
    ("segnet", "typed"): (SEGNET, Expected("upsample1", "Upsample", "SegNet", '  type: "Upsample"')),
    ("pspnet", "published"): (PSPNET, Expected("conv5_3_pool1_interp", "Interp", "PSPNet and DeepLab",
                                               "  interp_param {")),
    ("pspnet", "typed"): (PSPNET, Expected("conv5_3_pool1_interp", "Interp", "PSPNet and DeepLab", '  type: "Interp"')),
    ("yolo", "published"): (YOLO, Expected("region1", "Region", "YOLO v2 ports to Caffe", "  region_param {")),
    ("yolo", "typed"): (YOLO, Expected("region1", "Region", "YOLO v2 ports to Caffe", '  type: "Region"')),
    ("ssd-train", "published"): (SSD_TRAIN, Expected("data", "AnnotatedData", "SSD", "    resize_param {")),
    ("ssd-train", "typed"): (SSD_TRAIN, Expected("data", "AnnotatedData", "SSD", '  type: "AnnotatedData"')),
}


def typed_only(text: str) -> str:
    """``text`` without the fork's parameter blocks (each written over lines, closed at its own indent)."""
    for block in FORK_BLOCKS:
        text = re.sub(rf"^( *){block} {{\n.*?^\1}}\n", "", text, flags=re.M | re.S)
    return text


def net_file(folder: Path, case: tuple[str, str]) -> tuple[Path, Expected]:
    text, expected = CASES[case]
    path = folder / f"{case[0]}.prototxt"
    path.write_text(text if case[1] == "published" else typed_only(text))
    return path, expected


def line_of(path: Path, at: str) -> int:
    return path.read_text().splitlines().index(at) + 1


def column_of(path: Path, line: int, word: str) -> str:
    """``LINE:COLUMN`` of ``word`` on that line (1-based, as protobuf counts)."""
    return f"{line}:{path.read_text().splitlines()[line - 1].index(word) + 1}"


def fork_words(caffe, expected: Expected) -> str:
    """The engine's own description of the fork (``caffe.forks.describe``), which the message quotes."""
    table = forks.fork_table(caffe.proto.caffe_pb2.NetParameter())
    found = {fork for fork in [*table.LAYER_TYPES.values(), *table.PYTHON_MODULES.values()]
             if fork.name == expected.fork}
    assert len(found) == 1, expected.fork
    return table.describe(found.pop())


SUPPORTED = ("caffetool runs the layers of BVLC Caffe 1.0, plus Normalize, Permute, PriorBox and DetectionOutput "
             "from the SSD fork of Caffe (weiliu89/caffe, branch ssd); docs/reference/layers.md lists every type")


def test_the_segnet_upsample_is_named_with_its_fork_and_what_caffetool_runs(caffe, tmp_path):
    path, _ = net_file(tmp_path, ("segnet", "published"))
    with pytest.raises(UnsupportedLayer) as refused:
        prototxt.read(path, caffe.proto.caffe_pb2.NetParameter())
    line = line_of(path, "  upsample_param {")
    assert str(refused.value) == (
        f"{path}:{line}:3: layer 'upsample1' has type 'Upsample' and sets upsample_param, which caffetool's engine "
        "does not have: they come from the SegNet fork of Caffe (alexgkendall/caffe-segnet). " + SUPPORTED)
    assert (refused.value.layer, refused.value.layer_type) == ("upsample1", "Upsample")
    assert refused.value.fork == "the SegNet fork of Caffe (alexgkendall/caffe-segnet)"
    path.write_text(typed_only(SEGNET))
    with pytest.raises(UnsupportedLayer) as refused:
        prototxt.read(path, caffe.proto.caffe_pb2.NetParameter())
    line = line_of(path, '  type: "Upsample"')
    assert str(refused.value) == (
        f"{path}:{line}: layer 'upsample1' has type 'Upsample', which caffetool's engine does not have: it comes "
        "from the SegNet fork of Caffe (alexgkendall/caffe-segnet). " + SUPPORTED)


@pytest.mark.parametrize("case", CASES, ids=["-".join(case) for case in CASES])
def test_each_fork_net_is_refused_naming_layer_type_fork_and_line(caffe, tmp_path, case):
    path, expected = net_file(tmp_path, case)
    with pytest.raises(UnsupportedLayer) as refused:
        prototxt.read(path, caffe.proto.caffe_pb2.NetParameter())
    message = str(refused.value)
    assert message.startswith(f"{path}:{line_of(path, expected.at)}")
    assert f"layer '{expected.layer}' " in message and f"'{expected.type}'" in message
    assert fork_words(caffe, expected) in message and message.endswith(SUPPORTED)
    assert (refused.value.layer, refused.value.layer_type) == (expected.layer, expected.type)
    assert "Message type" not in message


def test_the_ssd_training_loss_and_segnet_batch_norm_name_their_forks(caffe, tmp_path):
    """MultiBoxLoss, after SSD's inference layers (which pass), and SegNet's BN, set inline."""
    path = tmp_path / "ssd.prototxt"
    path.write_text('input: "mbox_loc" input_shape { dim: 1 dim: 8 }\n'
                    'layer { name: "norm" type: "Normalize" bottom: "mbox_loc" top: "norm" }\n'
                    'layer { name: "mbox_loss" type: "MultiBoxLoss" bottom: "norm" top: "mbox_loss" '
                    "multibox_loss_param { num_classes: 21 } }\n")
    at = column_of(path, 3, "multibox_loss_param")
    with pytest.raises(UnsupportedLayer, match=rf":{at}: layer 'mbox_loss' has type 'MultiBoxLoss' and sets "
                       r"multibox_loss_param, .*: they come from the SSD fork of Caffe \(weiliu89/caffe, branch ssd; "
                       r"training SSD is not supported: this engine has SSD's inference layers only"):
        prototxt.read(path, caffe.proto.caffe_pb2.NetParameter())
    path.write_text('input: "data" input_shape { dim: 1 dim: 3 dim: 4 dim: 4 }\n'
                    'layer { bottom: "data" top: "bn" name: "conv1_1_bn" type: "BN"\n'
                    '  bn_param { bn_mode: INFERENCE } }\n')
    at = column_of(path, 3, "bn_param")
    with pytest.raises(UnsupportedLayer, match=rf":{at}: layer 'conv1_1_bn' has type 'BN' and sets bn_param, .*: "
                       r"they come from the SegNet and PSPNet fork of Caffe .*their own batch normalisation layer"):
        prototxt.read(path, caffe.proto.caffe_pb2.NetParameter())


def test_an_unknown_field_elsewhere_names_its_layer_and_a_typo_is_no_fork(caffe, tmp_path):
    path = tmp_path / "net.prototxt"
    path.write_text('input: "data" input_shape { dim: 1 dim: 3 dim: 4 dim: 4 }\n'
                    'layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"\n'
                    '  convolution_param { num_ouput: 2 kernel_size: 3 } }\n')
    with pytest.raises(NetError) as refused:
        prototxt.read(path, caffe.proto.caffe_pb2.NetParameter())
    assert not isinstance(refused.value, UnsupportedLayer)
    at = column_of(path, 3, "num_ouput")
    assert str(refused.value) == (f"{path}:{at}: layer 'conv' (Convolution) sets convolution_param.num_ouput, which "
                                  "is not a field of Convolution in BVLC Caffe 1.0 or in a fork caffetool knows of; "
                                  "correct or remove it")
    path.write_text('input: "data" input_shape { dim: 1 dim: 3 dim: 4 dim: 4 }\n'
                    'layer { name: "odd" type: "Frobnicate" bottom: "data" top: "out" frobnicate_param { x: 1 } }\n')
    with pytest.raises(UnsupportedLayer) as refused:
        prototxt.read(path, caffe.proto.caffe_pb2.NetParameter())
    at = column_of(path, 2, "frobnicate_param")
    assert str(refused.value) == (f"{path}:{at}: layer 'odd' has type 'Frobnicate' and sets frobnicate_param, which "
                                  "caffetool's engine does not have: no fork caffetool knows of defines them. "
                                  + SUPPORTED)


def test_a_type_in_the_catalogue_passes_and_one_no_table_knows_is_left_to_the_task(caffe, tmp_path, monkeypatch):
    """The catalogue is what caffetool knows: a type declared there is read; a type that no fork table
    names is read too, for the memory estimate to count as unmodelled and the engine to refuse."""
    path, _ = net_file(tmp_path, ("segnet", "typed"))
    added = types.new_class("Upsample", (LayerType,))
    monkeypatch.setitem(catalogue.CATALOGUE, "Upsample", added)
    assert [layer.type for layer in prototxt.read(path, caffe.proto.caffe_pb2.NetParameter()).layer][2] == "Upsample"
    monkeypatch.delitem(catalogue.CATALOGUE, "Upsample")
    path.write_text(typed_only(SEGNET).replace('"Upsample"', '"Frobnicate"'))
    assert prototxt.read(path, caffe.proto.caffe_pb2.NetParameter()).layer[2].type == "Frobnicate"


def test_a_fork_python_layer_passes_once_its_module_is_on_the_path_without_running_it(caffe, tmp_path, monkeypatch):
    path, _ = net_file(tmp_path, ("faster-rcnn", "typed"))
    lib = tmp_path / "lib" / "rpn"
    lib.mkdir(parents=True)
    (lib / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (lib / "proposal_layer.py").write_text("class ProposalLayer: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    with pytest.raises(UnsupportedLayer) as refused:
        prototxt.read(path, caffe.proto.caffe_pb2.NetParameter())
    assert refused.value.layer == "roi_pool5"  # the Python layer passed: the next foreign layer is named
    assert "rpn" not in sys.modules


def test_a_solvers_inline_net_is_checked_too(caffe, tmp_path):
    path = tmp_path / "solver.prototxt"
    path.write_text('base_lr: 0.01\nmax_iter: 10\nnet_param {\n  name: "inline"\n'
                    '  layer { name: "region1" type: "Region" bottom: "x" top: "y" }\n}\n')
    with pytest.raises(UnsupportedLayer, match=rf"^{re.escape(str(path))}:5: layer 'region1' has type 'Region', "
                       r"which caffetool's engine does not have: it comes from the YOLO v2 ports"):
        prototxt.read(path, caffe.proto.caffe_pb2.SolverParameter())


def test_without_the_fork_table_the_layer_is_still_named(caffe):
    """A pycaffe without ``caffe.forks`` (here: a message of another package): no fork, the same layer."""
    from google.protobuf import descriptor_pb2, text_format

    text = 'layer { name: "up" type: "Upsample" upsample_param { scale: 2 } }\n'
    with pytest.raises(text_format.ParseError) as parsed:
        text_format.Parse(text, caffe.proto.caffe_pb2.NetParameter())
    other = descriptor_pb2.FileDescriptorProto()
    assert forks.fork_table(other) is None
    refusal = forks.unknown_field(parsed.value, text, "net.prototxt", other)
    assert str(refusal) == (f"net.prototxt:1:{text.index('upsample_param') + 1}: layer 'up' has type 'Upsample' and "
                            "sets upsample_param, which caffetool's engine does not have: no fork caffetool knows of "
                            "defines them. " + SUPPORTED)


# Every task that reads a net, each with a net as published or typed only, so that each net and each
# form reach the command line: (task, net, form).
COMMANDS = [
    ("export", "faster-rcnn", "published"), ("export", "yolo", "typed"),
    ("evaluate", "segnet", "published"),
    ("memory.estimate", "pspnet", "published"), ("memory.estimate", "faster-rcnn", "typed"),
    ("memory.fit", "yolo", "published"), ("memory.measure", "ssd-train", "published"),
    ("demo.classify", "segnet", "typed"), ("demo.classify", "pspnet", "typed"),
    ("demo.serve", "faster-rcnn", "published"),
    ("train", "ssd-train", "published"), ("train", "segnet", "typed"),
]


def run_folder(folder: Path, net: Path) -> Path:
    """A ``--solver`` run's folder whose train net is ``net``, as ``caffetool train`` lays it out."""
    run = folder / "runs" / "forked"
    run.mkdir(parents=True)
    shutil.copy(net, RunFolder(run).train_net)
    RunFolder(run).solver.write_text(f'net: "{RunFolder(run).train_net.name}"\ntest_iter: 1\ntest_interval: 10\n'
                                     "base_lr: 0.01\nmax_iter: 10\n")
    RunFolder(run).manifest.write_text(json.dumps({"name": "forked", "status": "finished"}))
    return run


def arguments(task: str, net: Path, folder: Path) -> list[str]:
    """The command line of ``task`` on ``net``, with whatever else it needs written into ``folder``."""
    weights, labels, image = folder / "w.caffemodel", folder / "labels.txt", folder / "one.png"
    weights.write_bytes(b"never read: the net is refused first")
    labels.write_text("cat\ndog\n")
    cv2.imwrite(str(image), np.zeros((8, 8, 3), np.uint8))
    model = ["--deploy", str(net), "--weights", str(weights), "--labels", str(labels)]
    if task == "export":
        return ["export", "--deploy", str(net), "--weights", str(weights)]
    if task.startswith("memory."):
        return [task, "--net", str(net), *(["--gpu-memory", "2GiB"] if task == "memory.fit" else [])]
    if task == "demo.classify":
        return ["demo.classify", str(image), *model]
    if task == "demo.serve":
        return ["demo.serve", *model, "--port", str(free_port())]
    if task == "train":
        (folder / "solver.prototxt").write_text(f'net: "{net.name}"\nbase_lr: 0.01\nmax_iter: 10\nsolver_mode: CPU\n')
        return ["train", "--solver", "solver.prototxt", "--runs-dir", str(folder / "runs")]
    assert task == "evaluate"
    return ["evaluate", str(run_folder(folder, net)), "--weights", str(weights), "--no-caffe-test"]


def files_in(*folders: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for folder in folders for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("task, net, form", COMMANDS, ids=[f"{t}-{n}-{f}" for t, n, f in COMMANDS])
def test_every_task_that_reads_a_net_refuses_it_in_one_line(caffe, tmp_path, task, net, form):
    path, expected = net_file(tmp_path, (net, form))
    argv = arguments(task, path, tmp_path)
    before = files_in(tmp_path)
    done = caffetool(*argv, cwd=tmp_path, timeout=120)
    said = done.stdout + done.stderr
    assert done.returncode != 0, said
    errors = [line for line in said.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, said
    assert f"layer '{expected.layer}' " in errors[0] and f"'{expected.type}'" in errors[0], errors[0]
    assert fork_words(caffe, expected) in errors[0], errors[0]
    shown = RunFolder(tmp_path / "runs" / "forked").train_net if task == "evaluate" else path
    assert f"{shown.name}:{line_of(shown, expected.at)}" in errors[0], errors[0]
    assert "Traceback" not in said and "Message type" not in said and "Check failed" not in said
    assert "serving" not in done.stdout  # demo.serve: no server was started
    assert files_in(tmp_path) == before  # nothing written, nothing half-written


SCRIPT = """
import json, sys
import caffe
out = {}
for path in sys.argv[1:]:
    try:
        caffe.Net(path, caffe.TEST)
        out[path] = None
    except caffe.NetDefinitionError as e:
        out[path] = [type(e).__name__, isinstance(e, caffe.UnsupportedLayer), e.layer if hasattr(e, "layer") else None,
                     str(e)]
print(json.dumps(out))
"""


def test_a_users_pycaffe_script_gets_unsupported_layer_with_the_same_fork(engine, caffe, tmp_path):
    """``caffe.Net`` on such nets raises (the process goes on) and names the fork in the same words."""
    cases = [("segnet", "typed"), ("yolo", "typed"), ("faster-rcnn", "typed"), ("pspnet", "published")]
    paths = {}
    for case in cases:
        folder = tmp_path / "-".join(case)
        folder.mkdir()
        paths[case] = net_file(folder, case)
    done = subprocess.run([sys.executable, "-c", SCRIPT, *(str(p) for p, _ in paths.values())],
                          env={"PYTHONPATH": str(engine.python_path), "GLOG_minloglevel": "1"},
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr  # not -6: nothing aborted
    said = json.loads(done.stdout)
    for case, (path, expected) in paths.items():
        kind, unsupported, layer, message = said[str(path)]
        assert fork_words(caffe, expected) in message
        if case[1] == "typed":
            assert unsupported and layer == expected.layer, said[str(path)]
            assert kind == ("MissingPythonLayer" if expected.type == "Python" else "UnsupportedLayer")
        else:
            assert kind == "NetParseError" and "interp_param" in message
