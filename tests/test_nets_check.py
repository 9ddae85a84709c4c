"""nets.check: nets validated by the real Caffe in a child; what it refuses and how it says so."""

from __future__ import annotations

import os

import pytest

from caffetool.errors import CaffeRefused, NetError
from caffetool.nets import check

PYTHON_NET = """name: "py"
input: "data" input_shape {{ dim: 2 dim: 3 }}
layer {{ name: "double" type: "Python" bottom: "data" top: "out"
  python_param {{ module: "{module}" layer: "{layer}" }} }}
"""

LAYER_MODULE = """import caffe


class Double(caffe.Layer):
    def setup(self, bottom, top):
        pass

    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].data.shape)

    def forward(self, bottom, top):
        top[0].data[...] = 2 * bottom[0].data

    def backward(self, top, propagate_down, bottom):
        bottom[0].diff[...] = 2 * top[0].diff
"""


def python_net(folder, module: str, layer: str = "Double") -> str:
    (folder / "deploy.prototxt").write_text(PYTHON_NET.format(module=module, layer=layer))
    return "deploy.prototxt"


def test_a_python_layer_whose_module_is_missing_is_named(engine, tmp_path):
    deploy = python_net(tmp_path, "no_such_layers")
    with pytest.raises(NetError) as err:
        check.validate(engine, tmp_path, deploy=[deploy])
    assert str(err.value) == (
        "the Python layer 'double' in deploy.prototxt needs module 'no_such_layers', which cannot be imported "
        "(ModuleNotFoundError: No module named 'no_such_layers'); put the module's folder on PYTHONPATH, "
        "or correct the layer's python_param.module")
    assert "SystemError" not in str(err.value)


def test_a_python_layer_module_that_fails_to_import_is_named(engine, tmp_path):
    (tmp_path / "broken_layers.py").write_text("raise RuntimeError('needs a licence file')\n")
    deploy = python_net(tmp_path, "broken_layers")
    with pytest.raises(NetError, match=r"needs module 'broken_layers', which cannot be imported "
                                       r"\(RuntimeError: needs a licence file\); put the module's folder"):
        check.validate(engine, tmp_path, deploy=[deploy])


def test_a_python_layer_class_that_is_missing_is_named(engine, tmp_path):
    (tmp_path / "my_layers.py").write_text(LAYER_MODULE)
    deploy = python_net(tmp_path, "my_layers", layer="Triple")
    with pytest.raises(NetError) as err:
        check.validate(engine, tmp_path, deploy=[deploy])
    assert str(err.value) == (
        f"the Python layer 'double' in deploy.prototxt needs class 'Triple' from module 'my_layers' "
        f"({tmp_path / 'my_layers.py'}), which has none; correct the layer's python_param.layer")


def test_a_python_layer_on_pythonpath_is_built(engine, tmp_path, monkeypatch):
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "my_layers.py").write_text(LAYER_MODULE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(modules), os.environ.get("PYTHONPATH", "")]))
    report = check.validate(engine, tmp_path, deploy=[python_net(tmp_path, "my_layers")])
    assert report["deploy"]["deploy.prototxt"]["blobs"] == {"data": [2, 3], "out": [2, 3]}


def test_a_python_layer_in_a_solvers_net_is_checked(engine, tmp_path):
    train = python_net(tmp_path, "absent_module")
    (tmp_path / "solver.prototxt").write_text(f'net: "{train}"\nbase_lr: 0.1\nmax_iter: 1\nsolver_mode: CPU\n')
    with pytest.raises(NetError, match=r"^the Python layer 'double' in deploy.prototxt needs module 'absent_module'"):
        check.validate(engine, tmp_path, solver="solver.prototxt")


def test_caffes_own_check_failure_is_caffe_refused(engine, tmp_path):
    (tmp_path / "deploy.prototxt").write_text(
        'input: "data" input_shape { dim: 1 dim: 1 dim: 8 dim: 8 }\n'
        'layer { name: "conv" type: "Convolution" bottom: "data" top: "c"\n'
        '  convolution_param { num_output: 0 kernel_size: 3 } }\n')
    with pytest.raises(CaffeRefused, match=r"^Caffe refused the net \(base_conv_layer.cpp:\d+\): "
                                           r"Check failed: num_output_ > 0"):
        check.validate(engine, tmp_path, deploy=["deploy.prototxt"])


def test_a_net_caffe_cannot_parse_is_still_refused_by_caffe(engine, tmp_path):
    (tmp_path / "deploy.prototxt").write_text("layer { nonsense: 1 }\n")
    with pytest.raises(NetError, match=r"^deploy.prototxt:1: unknown field 'nonsense', which this Caffe engine's "
                                       r"caffe.proto does not have$"):  # pycaffe's own check (caffe.net_check)
        check.validate(engine, tmp_path, deploy=["deploy.prototxt"])


def test_a_python_layer_that_fails_in_setup_shows_its_exception(engine, tmp_path):
    (tmp_path / "picky_layers.py").write_text(LAYER_MODULE.replace(
        "    def setup(self, bottom, top):\n        pass",
        "    def setup(self, bottom, top):\n        raise ValueError('param_str must name a scale')"))
    deploy = python_net(tmp_path, "picky_layers")
    with pytest.raises(NetError) as err:
        check.validate(engine, tmp_path, deploy=[deploy])
    assert str(err.value) == "a Python layer of the net raised ValueError: param_str must name a scale"
