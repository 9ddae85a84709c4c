"""The verified export cache that the export backends run (``--backend onnxruntime`` or ``opencv`` on a
deploy net and weights) re-verifies what it serves and makes again what is damaged, saying so in one
line and never blocking; and ``export --out`` removes a folder's ``export.json`` only where it is
provably an earlier version's record of that model, leaving another tool's file alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from caffetool import config
from caffetool.checksum import sha256_file
from caffetool.export import exporter, reuse, served
from caffetool.inference.modelfiles import ModelFiles

from .test_export import SHARE, random_weights
from .test_project_cli import caffetool, succeeded

pytestmark = pytest.mark.engine
DAMAGED = "the cached ONNX export of lenet.caffemodel is damaged ("


@pytest.fixture(scope="module")
def lenet(caffe, tmp_path_factory) -> ModelFiles:
    """BVLC's LeNet deploy net with seeded weights."""
    folder = tmp_path_factory.mktemp("lenet")
    deploy = Path(shutil.copy(SHARE / "examples" / "mnist" / "lenet.prototxt", folder / "lenet.prototxt"))
    return ModelFiles(deploy, random_weights(caffe, deploy, folder / "lenet.caffemodel"), labels=None)


@pytest.fixture(scope="module")
def pristine(engine, lenet, tmp_path_factory) -> Path:
    """A cache holding the verified export of ``lenet``, as the backends first make it."""
    cache = tmp_path_factory.mktemp("pristine-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(config, "cache_home", lambda: cache)
        reuse.verified_export(engine, lenet, say=lambda _: None)
    return cache


@pytest.fixture
def cached(pristine, tmp_path, monkeypatch) -> Path:
    """A copy of the pristine cache as caffetool's cache; its model file."""
    shutil.copytree(pristine, tmp_path / "cache")
    monkeypatch.setattr(config, "cache_home", lambda: tmp_path / "cache")
    (model,) = (tmp_path / "cache" / "exports").glob("*/model.onnx")
    return model


def answers_as_caffe(engine, caffe, files: ModelFiles, said: list[str]) -> None:
    """The onnxruntime backend on ``files`` gives pycaffe's probabilities."""
    x = np.random.default_rng(3).random((2, 1, 28, 28)).astype(np.float32)
    model = served.load(engine, files, "onnxruntime", outputs=("prob",))
    net = caffe.Net(str(files.deploy), str(files.weights), caffe.TEST)
    net.blobs["data"].reshape(*x.shape)
    net.blobs["data"].data[...] = x
    expected = net.forward()["prob"].copy()
    assert np.abs(model(x)["prob"] - expected).max() <= 1e-5, said


def _truncated(model: Path) -> None:
    model.write_bytes(model.read_bytes()[:200])


def _no_record(model: Path) -> None:
    exporter.record_of(model).unlink()


def _record_not_json(model: Path) -> None:
    exporter.record_of(model).write_text("{ cut short")


def _record_rewritten(model: Path) -> None:
    """Another model in the entry, and a record rewritten to vouch for it, verification and all."""
    record = exporter.record_of(model)
    made = json.loads(record.read_text())
    model.write_bytes(model.read_bytes().replace(b"conv1", b"convX"))
    made["sha256"]["onnx"] = sha256_file(model)
    record.write_text(json.dumps(made, indent=2) + "\n")


def _record_failed(model: Path) -> None:
    """A record whose verification no longer passes, every sha256 still right."""
    record = exporter.record_of(model)
    made = json.loads(record.read_text())
    made["verification"]["passed"] = False
    record.write_text(json.dumps(made))


def _model_a_folder(model: Path) -> None:
    model.unlink()
    model.mkdir()
    (model / "inside").write_text("not a model")


@pytest.mark.parametrize("damage, reason", [
    (_truncated, "its files are not those model.export.json vouches for: changed or cut short"),
    (_no_record, "no model.export.json"),
    (_record_not_json, "model.export.json is not the record caffetool wrote there: changed since, or never sealed"),
    (_record_rewritten, "model.export.json is not the record caffetool wrote there"),
    (_record_failed, "model.export.json is not the record caffetool wrote there"),
    (_model_a_folder, "model.onnx is not a file"),
], ids=lambda v: getattr(v, "__name__", "").strip("_") or None)
def test_a_damaged_cache_entry_is_exported_again_in_one_line_and_answers(engine, caffe, lenet, cached, damage,
                                                                          reason):
    damage(cached)
    said: list[str] = []
    assert reuse.verified_export(engine, lenet, say=said.append) == cached
    assert len(said) == 1 and said[0].startswith(DAMAGED + reason), said
    assert said[0].endswith(f"exporting it again to {cached}, verified against Caffe first")
    made = json.loads(exporter.record_of(cached).read_text())
    assert made["verification"]["passed"] and made["sha256"]["onnx"] == sha256_file(cached)
    assert b"convX" not in cached.read_bytes()
    answers_as_caffe(engine, caffe, lenet, said)
    assert len(said) == 1  # made once: served as it is from now on
    assert reuse.verified_export(engine, lenet, say=said.append) == cached and len(said) == 1


def test_an_intact_entry_is_served_untouched_and_a_new_one_said_as_made(engine, lenet, cached, tmp_path,
                                                                         monkeypatch):
    entry = cached.parent
    before = {p.name: (p.stat().st_mtime_ns, sha256_file(p)) for p in entry.iterdir()}
    said: list[str] = []
    assert reuse.verified_export(engine, lenet, say=said.append) == cached and said == []
    assert {p.name: (p.stat().st_mtime_ns, sha256_file(p)) for p in entry.iterdir()} == before
    assert sorted(before) == ["model.export.json", "model.export.json.sha256", "model.onnx"]

    monkeypatch.setattr(config, "cache_home", lambda: tmp_path / "empty-cache")
    model = reuse.verified_export(engine, lenet, say=said.append)
    assert said == [f"exporting lenet.caffemodel to ONNX ({model}), verified against Caffe first"]


FOREIGN = {"model": "m.onnx", "notes": "served by our other tool", "sha256": {"onnx": "0" * 64}}


def test_a_foreign_export_json_beside_out_is_left_untouched(lenet, tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    foreign = folder / "export.json"
    foreign.write_text(json.dumps(FOREIGN))
    args = ("--deploy", str(lenet.deploy), "--weights", str(lenet.weights), "--images", "4")
    succeeded(caffetool("export", *args, "--out", str(folder / "m.onnx"), cwd=tmp_path))
    assert json.loads(foreign.read_text()) == FOREIGN
    assert sorted(p.name for p in folder.iterdir()) == ["export.json", "m.export.json", "m.onnx"]
    # exported again over its own model: the model's own record is the one read, export.json still kept
    succeeded(caffetool("export", *args, "--out", str(folder / "m.onnx"), cwd=tmp_path))
    assert json.loads(foreign.read_text()) == FOREIGN

    # a user's m.onnx that the foreign export.json names is not caffetool's: refused, both kept
    other = tmp_path / "other"
    other.mkdir()
    (other / "export.json").write_text(json.dumps(FOREIGN))
    (other / "m.onnx").write_bytes(b"a user's model")
    done = caffetool("export", *args, "--out", str(other / "m.onnx"), cwd=tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert lines[0] == (f"Error: {other / 'm.onnx'} exists and caffetool did not make it (no m.export.json beside "
                        "it names m.onnx); move it away or choose another --out (nothing was changed)")
    assert (other / "m.onnx").read_bytes() == b"a user's model"
    assert json.loads((other / "export.json").read_text()) == FOREIGN
    assert sorted(p.name for p in other.iterdir()) == ["export.json", "m.onnx"]


def test_only_an_earlier_versions_own_record_of_the_model_there_is_taken_for_one(lenet, tmp_path):
    """Its keys and the sha256 of the model beside it: a copy of a caffetool record naming another
    model's bytes, or one without its verification, is not one."""
    folder = tmp_path / "out"
    succeeded(caffetool("export", "--deploy", str(lenet.deploy), "--weights", str(lenet.weights), "--images", "4",
                        "--out", str(folder / "m.onnx"), cwd=tmp_path))
    model = folder / "m.onnx"
    made = json.loads((folder / "m.export.json").read_text())
    (folder / "m.export.json").rename(folder / "export.json")
    assert exporter.record_for(model) == folder / "export.json"
    for changed in ({**made, "sha256": {**made["sha256"], "onnx": "0" * 64}},
                    {k: v for k, v in made.items() if k != "verification"},
                    {**made, "versions": {}}):
        (folder / "export.json").write_text(json.dumps(changed))
        assert exporter.record_for(model) is None
