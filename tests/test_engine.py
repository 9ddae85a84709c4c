"""The installed engine works: binary, pycaffe, locate() and the install's idempotence."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from caffetool.engine import locate
from caffetool.engine.install import _existing, install, link_pycaffe
from caffetool.engine.locate import MANIFEST
from caffetool.engine.recipe import BLAS, CAFFE_SOURCE, BuildOptions
from caffetool.errors import ConfigError, EngineCorrupt, EngineError, EngineNotFound

from .test_project_cli import caffetool


NET = """name: "tiny" force_backward: true
layer { name: "in" type: "Input" top: "data" top: "label"
  input_param { shape { dim: 4 dim: 3 } shape { dim: 4 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""


def test_caffe_binary_reports_its_version(engine):
    done = subprocess.run([str(engine.caffe), "--version"], capture_output=True, text=True)
    assert done.returncode == 0
    assert done.stdout.strip() == "caffe version 1.0.0"


def test_every_tool_is_installed(engine):
    assert {name for name, path in engine.tools.items() if path is None} == set()


def test_pycaffe_forward_and_backward(caffe, tmp_path):
    net_file = tmp_path / "net.prototxt"
    net_file.write_text(NET)
    net = caffe.Net(str(net_file), caffe.TRAIN)
    net.blobs["data"].data[...] = np.arange(12, dtype=np.float32).reshape(4, 3) / 12
    net.blobs["label"].data[...] = [0, 1, 0, 1]
    loss = net.forward()["loss"]
    weights = net.params["ip"][0].data
    # Softmax loss of the linear layer, computed here from the same weights.
    logits = net.blobs["data"].data @ weights.T + net.params["ip"][1].data
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    assert loss == pytest.approx(-np.log(probs[[0, 1, 2, 3], [0, 1, 0, 1]]).mean(), rel=1e-5)
    net.backward()
    assert np.abs(net.params["ip"][0].diff).sum() > 0


def test_two_sgd_iterations_change_the_weights(caffe, tmp_path):
    net_file = tmp_path / "net.prototxt"
    net_file.write_text(NET.replace('type: "Input"', 'type: "DummyData"').replace(
        "input_param { shape { dim: 4 dim: 3 } shape { dim: 4 } }",
        "dummy_data_param { shape { dim: 4 dim: 3 } shape { dim: 4 } "
        'data_filler { type: "gaussian" } data_filler { type: "constant" value: 1 } }',
    ))
    solver_file = tmp_path / "solver.prototxt"
    solver_file.write_text(f'net: "{net_file}"\nbase_lr: 0.5\nlr_policy: "fixed"\nmax_iter: 2\n'
                           "solver_mode: CPU\nsnapshot_after_train: false\n")
    solver = caffe.SGDSolver(str(solver_file))
    before = solver.net.params["ip"][0].data.copy()
    solver.step(2)
    assert solver.iter == 2
    assert not np.allclose(before, solver.net.params["ip"][0].data)


def test_locate_without_install_says_how_to_fix(tmp_path):
    with pytest.raises(EngineNotFound) as err:
        locate(tmp_path / "nothing-here")
    assert str(err.value) == f"no Caffe engine at {tmp_path / 'nothing-here'} — run `caffetool engine.install`"


def test_prefix_without_binary_is_corrupt(tmp_path, engine):
    (tmp_path / MANIFEST).write_text(json.dumps(engine.manifest))
    with pytest.raises(EngineCorrupt, match=r"bin/caffe is missing or not executable — run `caffetool engine.install --force`"):
        locate(tmp_path)


def test_unreadable_manifest_is_corrupt(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / MANIFEST).write_text("{not json")
    with pytest.raises(EngineCorrupt, match=rf"{MANIFEST} is unreadable"):
        locate(tmp_path)


def test_prefix_without_manifest_is_corrupt(tmp_path):
    (tmp_path / "bin").mkdir()
    with pytest.raises(EngineCorrupt, match=rf"{MANIFEST} is missing"):
        locate(tmp_path)


def test_binary_that_does_not_run_is_corrupt(tmp_path, engine):
    (tmp_path / MANIFEST).write_text(json.dumps(engine.manifest))
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "caffe").write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    (tmp_path / "bin" / "caffe").chmod(0o755)
    pycaffe = tmp_path / "lib/python3/dist-packages/caffe"
    pycaffe.mkdir(parents=True)
    (pycaffe / "__init__.py").write_text("")
    with pytest.raises(EngineCorrupt, match=r"`caffe --version` failed: broken"):
        locate(tmp_path)


def test_second_install_is_a_no_op(engine):
    manifest = engine.prefix / MANIFEST
    mtime = manifest.stat().st_mtime_ns
    result = install(prefix=engine.prefix, say=lambda _: None)
    assert result.cached
    assert manifest.stat().st_mtime_ns == mtime


def test_install_with_other_options_refuses_and_keeps_the_engine(engine):
    mtime = (engine.prefix / MANIFEST).stat().st_mtime_ns
    with pytest.raises(ConfigError, match="built with other options .* rerun with --force"):
        install(prefix=engine.prefix, options=BuildOptions(cuda=True, cuda_arch=("90",)))
    assert (engine.prefix / MANIFEST).stat().st_mtime_ns == mtime


def test_install_over_a_corrupt_prefix_changes_nothing(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / MANIFEST).write_text("{}")
    with pytest.raises(EngineCorrupt, match="nothing was changed"):
        install(prefix=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", MANIFEST]


def test_manifest_records_source_patches_and_mode(engine):
    m = engine.manifest
    assert m["options"]["cpu_only"] is True
    assert {t["name"]: t["sha256"] for t in m["source"]["tarballs"]} == {
        t.name: t.sha256 for t in CAFFE_SOURCE.tarballs
    }
    names = [p["name"] for p in m["patches"]]
    ours = BuildOptions().patches  # the default engine's: the fixes, the tuning, and MKL's where it uses MKL
    assert names[-len(ours):] == list(ours)
    assert "6693.diff" in names
    assert "-DCPU_ONLY=ON" in m["cmake_flags"]


def test_pth_makes_pycaffe_importable_in_a_fresh_interpreter(engine):
    pth = link_pycaffe(engine, say=lambda _: None)
    assert pth.read_text().strip() == str(engine.python_path)
    done = subprocess.run([sys.executable, "-c", "import caffe, sys; print(caffe.__file__)"],
                          capture_output=True, text=True, cwd="/", env={**os.environ, "GLOG_minloglevel": "2"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(str(engine.python_path))


def _copy_of(engine, tmp_path, patches):
    """The engine seen through another prefix (links to its files) with ``patches`` in its manifest."""
    for part in ("bin", "lib", "python", "include", "share"):
        if (engine.prefix / part).exists():
            (tmp_path / part).symlink_to(engine.prefix / part)
    manifest = dict(engine.manifest, patches=patches)
    (tmp_path / MANIFEST).write_text(json.dumps(manifest))
    return tmp_path


def test_an_engine_from_an_older_recipe_is_rebuilt_and_one_with_other_options_refused(engine, tmp_path):
    said = []
    patches = [dict(p) for p in engine.manifest["patches"]]
    older = [dict(p, sha256="0" * 64) if p["name"] == BuildOptions().patches[-1] else p for p in patches]
    (tmp_path / "older").mkdir()
    (tmp_path / "current").mkdir()
    assert _existing(_copy_of(engine, tmp_path / "older", older), BuildOptions(), False, said.append) is None
    assert said == [f"the engine at {tmp_path / 'older'} was built with older caffetool patches; rebuilding it"]
    # built before a patch of today's recipe existed: every patch it has is current, one is missing
    fewer = [p for p in patches if p["name"] != BuildOptions().patches[-1]]
    (tmp_path / "fewer").mkdir()
    assert _existing(_copy_of(engine, tmp_path / "fewer", fewer), BuildOptions(), False, said.append) is None
    assert said[-1] == f"the engine at {tmp_path / 'fewer'} was built with older caffetool patches; rebuilding it"
    current = _copy_of(engine, tmp_path / "current", patches)
    assert _existing(current, BuildOptions(), False, said.append).prefix == current
    other = BuildOptions(blas=BLAS["openblas"] if BuildOptions().mkl else BLAS["mkl"])
    with pytest.raises(ConfigError, match="built with other options"):
        _existing(current, other, False, said.append)


@pytest.mark.parametrize("arg, decides", [
    ("-DCMAKE_INSTALL_PREFIX=/opt/elsewhere", "--prefix"), ("-DCUDA_ARCH_BIN:STRING=90", "--cuda-arch"),
    ("-DBLAS=mkl", "--blas")])
def test_a_cmake_arg_that_redefines_what_caffetool_sets_is_refused_before_building(tmp_path, arg, decides):
    done = caffetool("engine.install", "--prefix", str(tmp_path / "e"), "--cmake-arg", arg, cwd=tmp_path)
    assert done.returncode == 1 and done.stderr.startswith(f"Error: --cmake-arg {arg}: caffetool sets "), done.stderr
    assert f"({decides} decides it)" in done.stderr and not (tmp_path / "e").exists()


@pytest.fixture
def small_file_system(tmp_path):
    """A 64 MB tmpfs at ``tmp_path / "small"`` (needs root), unmounted after."""
    folder = tmp_path / "small"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_prefix_on_a_file_system_too_small_is_refused_before_building(small_file_system):
    done = caffetool("engine.install", "--prefix", str(small_file_system / "engine"), cwd=small_file_system)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"Error: {small_file_system} has ") and "MB free; building the engine there needs "\
        "about 800 MB" in done.stderr, done.stderr
    assert list(small_file_system.iterdir()) == []


def test_running_out_of_room_while_building_names_the_folder_and_leaves_nothing(small_file_system, monkeypatch):
    """Past the check (another program filled the disk meanwhile, simulated by a check that lets it
    through): the build runs out of room (here the compiler, writing its precompiled header), and
    that is one error naming the folder, with nothing left behind."""
    monkeypatch.setattr("caffetool.engine.install.BUILD_ROOM_MB", 1)
    with pytest.raises(EngineError, match=rf"{small_file_system} ran out of room while the engine was built there "
                                          r"\(\d+ MB free now; a build needs about 1 MB\)"):
        install(small_file_system / "engine", BuildOptions(), link=False, progress=False, say=lambda _: None)
    assert list(small_file_system.iterdir()) == []
