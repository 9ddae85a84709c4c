"""Hostile input to the commands that work on runs and their weights, through the real ``caffetool``
command: one ``Error: ...`` naming the file, exit 1, no traceback, and nothing the user had lost.

The run the cases use (``trained_run``) is the session's; a case that must change a run copies it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from .conftest import PROJECT

CAFFETOOL = Path(sys.executable).parent / "caffetool"
pytestmark = pytest.mark.engine


def caffetool(*args: str, cwd: Path = PROJECT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(CAFFETOOL), *args], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


def refused(done: subprocess.CompletedProcess) -> str:
    """The one error line of a refused command."""
    assert done.returncode == 1, done.stdout[-1500:] + done.stderr[-1500:]
    assert "Traceback" not in done.stderr
    return done.stderr.strip().splitlines()[-1]


def newest_weights(run: Path) -> Path:
    return max(run.glob("snapshots/*.caffemodel"), key=lambda p: int(p.stem.rsplit("_", 1)[1]))


@pytest.fixture
def not_weights(trained_run: Path, caffe, tmp_path: Path) -> dict[str, Path]:
    """Files that are not this net's weights: empty, random, a prototxt, another net's, a wrong shape."""
    pb2 = caffe.proto.caffe_pb2
    files = {"empty": tmp_path / "empty.caffemodel", "random": tmp_path / "random.caffemodel",
             "prototxt": tmp_path / "deploy.caffemodel", "other": tmp_path / "other.caffemodel",
             "shape": tmp_path / "shape.caffemodel"}
    files["empty"].write_bytes(b"")
    files["random"].write_bytes(bytes(range(256)) * 40)
    shutil.copyfile(trained_run / "deploy.prototxt", files["prototxt"])
    other = pb2.NetParameter(name="other")
    layer = other.layer.add(name="fc_other", type="InnerProduct")
    layer.blobs.add().shape.dim.extend([10, 4])
    files["other"].write_bytes(other.SerializeToString())
    model = pb2.NetParameter()
    model.ParseFromString(newest_weights(trained_run).read_bytes())
    ip2 = next(lr for lr in model.layer if lr.name == "ip2")
    del ip2.blobs[0].shape.dim[:]
    ip2.blobs[0].shape.dim.extend([12, 500])
    files["shape"].write_bytes(model.SerializeToString())
    return files


WHY = {
    "empty": "is empty (0 bytes); give the .caffemodel a training run wrote",
    "random": "is not a Caffe model (a binary NetParameter, as Caffe's snapshots write); give the .caffemodel "
              "a training run wrote",
    "prototxt": "is a text file, a .prototxt by the look of it: that describes a net, not its weights; give the "
                ".caffemodel a training run wrote",
    "other": "holds weights for none of the net's layers with parameters (conv1, conv2, ip1, ip2; the file has "
             "fc_other); Caffe matches layers by name: give the weights of this net",
    "shape": "layer 'ip2' blob 0 has shape 12 x 500, the net's has 10 x 500; these weights are for another "
             "version of the net (or rename the layer to start it fresh)",
}


@pytest.mark.parametrize("kind", list(WHY))
def test_evaluate_refuses_what_are_not_the_nets_weights(kind, trained_run, not_weights):
    line = refused(caffetool("evaluate", str(trained_run), "--weights", str(not_weights[kind])))
    separator = ": " if kind == "shape" else " "
    assert line == f"Error: --weights {not_weights[kind]}{separator}{WHY[kind]}"
    assert not (trained_run / "eval").exists()


@pytest.mark.parametrize("kind", ["empty", "other"])
def test_classify_and_train_test_refuse_them_too(kind, trained_run, not_weights, tmp_path):
    image = tmp_path / "x.png"
    cv2.imwrite(str(image), np.full((28, 28), 128, np.uint8))
    for args in (["train.test", str(trained_run), "--weights", str(not_weights[kind])],
                 ["demo.classify", str(image), "--run", str(trained_run), "--weights", str(not_weights[kind])]):
        line = refused(caffetool(*args))
        assert line.startswith(f"Error: --weights {not_weights[kind]} ") and WHY[kind] in line, line


def test_fine_tuning_from_what_are_not_weights_leaves_no_run(trained_run, not_weights, fashion_data, tmp_path):
    runs = tmp_path / "runs"
    line = refused(caffetool("train", "--data-dir", str(fashion_data.path.parent), "--runs-dir", str(runs),
                             "--weights", str(not_weights["other"]), "--max-iter", "10", "--name", "ft"))
    assert line == f"Error: --weights {not_weights['other']} {WHY['other']}"
    assert not (runs / "ft").exists()


def test_fine_tuning_names_the_layers_that_start_fresh(trained_run, caffe, fashion_data, tmp_path):
    pb2 = caffe.proto.caffe_pb2
    model = pb2.NetParameter()
    model.ParseFromString(newest_weights(trained_run).read_bytes())
    kept = [lr for lr in model.layer if lr.name != "ip2"]
    del model.layer[:]
    model.layer.extend(kept)
    partial = tmp_path / "features.caffemodel"
    partial.write_bytes(model.SerializeToString())
    done = caffetool("train", "--data-dir", str(fashion_data.path.parent), "--runs-dir", str(tmp_path / "runs"),
                     "--weights", str(partial), "--max-iter", "10", "--test-iter", "2", "--name", "ft")
    assert done.returncode == 0, done.stderr[-1500:]
    assert "features.caffemodel has no weights for ip2: it starts from the net's fillers" in done.stdout


def run_copy(trained_run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "runs" / trained_run.name
    shutil.copytree(trained_run, copy, symlinks=True)
    return copy


def test_a_run_folder_without_its_manifest_is_named_as_such(trained_run, tmp_path):
    run = run_copy(trained_run, tmp_path)
    (run / "manifest.json").unlink()
    for args in (["evaluate", str(run)], ["train.report", str(run)], ["train.resume", str(run)]):
        line = refused(caffetool(*args))
        assert line == (f"Error: {run} has no manifest.json, so it is no caffetool run (or its record was deleted); "
                        "a run's folder is made by `caffetool train`, and `ls runs` lists the runs")


def test_a_damaged_manifest_is_refused_before_anything_is_written(trained_run, tmp_path):
    run = run_copy(trained_run, tmp_path)
    (run / "manifest.json").write_text('{"status": "finished", ')
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    line = refused(caffetool("evaluate", str(run), "--no-caffe-test"))
    assert line.startswith(f"Error: {run / 'manifest.json'} is unreadable (")
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before  # no eval/ folder, nothing else


def test_an_empty_labels_file_is_refused_by_evaluate_as_by_classify(trained_run, tmp_path):
    run = run_copy(trained_run, tmp_path)
    (run / "labels.txt").write_text("\n\n")
    why = (f"{run / 'labels.txt'} names no class; labels.txt holds one class name a line (or delete it: the classes "
           "are then shown as numbers)")
    assert refused(caffetool("evaluate", str(run), "--no-caffe-test")) == f"Error: {why}"
    image = tmp_path / "one.png"
    cv2.imwrite(str(image), np.zeros((28, 28), np.uint8))
    assert refused(caffetool("demo.classify", str(image), "--run", str(run))) == f"Error: {why}"


def test_a_top_k_of_more_classes_than_the_net_has_is_refused(trained_run, tmp_path):
    why = "Error: --top 11 is more than the 10 classes the net tells apart; give --top 10 or less"
    assert refused(caffetool("evaluate", str(trained_run), "--top", "11", "--no-caffe-test")) == why
    image = tmp_path / "one.png"
    cv2.imwrite(str(image), np.zeros((28, 28), np.uint8))
    assert refused(caffetool("demo.classify", str(image), "--run", str(trained_run), "--top", "11")) == why
    done = caffetool("demo.classify", str(image), "--run", str(trained_run), "--top", "10")
    assert done.returncode == 0 and done.stdout.count(", ") == 9, done.stderr
