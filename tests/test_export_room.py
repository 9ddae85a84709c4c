"""How many images a verification pass holds: sized from the memory estimator before any work, so a
deploy net that declares huge inputs (a 1.5 KB file) is refused or verified in smaller passes,
never run out of memory."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format

from caffetool.errors import ExportError
from caffetool.export import room
from caffetool.nets import prototxt

from .test_project_cli import caffetool

HUGE = """name: "huge"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 dim: 6000 dim: 6000 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv" convolution_param { num_output: 16 kernel_size: 3 pad: 1 } }
layer { name: "pool" type: "Pooling" bottom: "conv" top: "pool" pooling_param { pool: AVE global_pooling: true } }
layer { name: "ip" type: "InnerProduct" bottom: "pool" top: "ip" inner_product_param { num_output: 10 } }
layer { name: "prob" type: "Softmax" bottom: "ip" top: "prob" }
"""
GiB = 2**30


@pytest.fixture
def huge(caffe):
    return text_format.Parse(HUGE, caffe.proto.caffe_pb2.NetParameter())


def test_a_pass_holds_what_fits_and_never_what_caffe_cannot_build(huge):
    one = room.need(huge, 1)
    assert 20 * GiB < one < 30 * GiB  # 2.7 GB of feature maps, 4 GB of im2col scratch, onnxruntime's arenas
    assert room.pass_size(huge, 50, fixed=False, available=100 * GiB) == 3  # 4 images: a blob past INT_MAX
    with pytest.raises(ExportError, match=r"needs about 2\d\.\d GiB for a single input .* has about 12\.8 GiB"):
        room.pass_size(huge, 50, fixed=False, available=16 * GiB)
    with pytest.raises(ExportError, match="--batch 4 needs more than Caffe can hold in one blob"):
        room.pass_size(huge, 4, fixed=True, available=1000 * GiB)


def test_a_small_net_verifies_fifty_at_a_time(caffe, engine):
    lenet = prototxt.read(engine.prefix / "share/caffe/examples/mnist/lenet.prototxt", caffe.proto.caffe_pb2.NetParameter())
    assert room.pass_size(lenet, 50, fixed=False, available=2 * GiB) == 50


@pytest.mark.engine
def test_the_export_of_a_net_too_large_to_verify_is_refused_before_it_runs(caffe, huge, tmp_path: Path):
    if room.SHARE * room.available_bytes() > room.need(huge, 1):
        pytest.skip("this machine has the memory to verify the net")
    deploy = tmp_path / "inputs" / "huge.prototxt"
    deploy.parent.mkdir()
    deploy.write_text(HUGE)
    small = deploy.read_text().replace("dim: 6000 dim: 6000", "dim: 6 dim: 6")
    (tmp_path / "inputs" / "small.prototxt").write_text(small)  # the same weights at a size that loads fast
    caffe.Net(str(tmp_path / "inputs" / "small.prototxt"), caffe.TEST).save(str(tmp_path / "inputs" / "w.caffemodel"))
    done = caffetool("export", "--deploy", str(deploy), "--weights", str(tmp_path / "inputs" / "w.caffemodel"),
                     "--out", str(tmp_path / "huge.onnx"), cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("Error: verifying this net needs about "), done.stderr
    assert not (tmp_path / "huge.onnx").exists()
