"""caffetool.evaluation: a trained LeNet over the whole Fashion-MNIST test set, checked against the real
``caffe test``; a ``--solver`` run from BVLC's files; the user's own labelled images through the demo."""

from __future__ import annotations

import csv
import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from caffetool.data import datum, db
from caffetool.data.registry import FASHION_MNIST
from caffetool.errors import DataError, NetError, RunError
from caffetool.evaluation import confusion_figures, evaluator, metrics, scoring, writeup
from caffetool.fsio import staging_folders
from caffetool.inference import modelfiles, records
from caffetool.nets import prototxt
from caffetool.nets.solvers import SolverOptions
from caffetool.serving import classifier
from caffetool.train import caffe_commands, session
from tests.caffe_root import lay_out
from tests.conftest import PROJECT

CAFFETOOL = str(PROJECT / ".venv/bin/caffetool")


@pytest.fixture(scope="module")
def run_copy(trained_run, tmp_path_factory) -> Path:
    """A copy of the suite's trained run, so its evaluations change no other test's run."""
    return Path(shutil.copytree(trained_run, tmp_path_factory.mktemp("eval") / trained_run.name))


@pytest.fixture(scope="module")
def evaluated(engine, run_copy):
    said: list[str] = []
    return evaluator.evaluate(engine, run_copy, progress=False, say=said.append), said


def rows_of(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_top1_equals_caffe_test_over_the_whole_test_set(engine, run_copy, evaluated, fashion_data):
    result, said = evaluated
    s = result.summary
    assert said == ["caffe test on the same 10000 records for comparison"]
    assert s["count"] == fashion_data.count("test") == 10000 == result.matrix.sum()
    assert s["top1"] == np.trace(result.matrix) / 10000
    # caffe test run here on the run's own train_val net: 100 batches of 100 cover each record once
    weights = Path(s["weights"])
    assert weights == run_copy / "snapshots/lenet_iter_600.caffemodel"
    theirs = caffe_commands.caffe_test(engine, run_copy, weights, 100, [])
    assert theirs.outputs["accuracy"] == float(f"{s['top1']:g}")  # Caffe prints %g's 6 digits
    assert s["caffe_test"]["accuracy"] == theirs.outputs["accuracy"] and s["caffe_test"]["equal"] is True
    assert (s["caffe_test"]["iterations"], s["caffe_test"]["batch_size"]) == (100, 100)
    assert s["top1"] <= s["topk"] <= 1 and s["k"] == 5 and s["backend"] == "caffe" and s["split"] == "test"
    log = (run_copy / "caffe_test.log").read_text()
    assert "evaluate: caffe test of test net #0 on lenet_iter_600.caffemodel" in log


def test_the_files_are_complete_and_agree(run_copy, evaluated):
    result, _ = evaluated
    folder = run_copy / "eval/lenet_iter_600"
    assert result.folder == folder and sorted(p.name for p in folder.iterdir()) == sorted(writeup.FILES)
    names = (run_copy / "labels.txt").read_text().split("\n")[:10]
    confusion = rows_of(folder / "confusion.csv")
    assert confusion[0] == ["true \\ predicted", *names] and [r[0] for r in confusion[1:]] == names
    counts = np.array([[int(v) for v in r[1:]] for r in confusion[1:]])
    assert (counts == result.matrix).all() and counts.sum(axis=1).tolist() == [1000] * 10
    per_class = rows_of(folder / "per_class.csv")
    assert per_class[0] == ["class", "precision", "recall", "f1", "support"]
    for (name, precision, recall, f1, support), t in zip(per_class[1:], range(10)):
        assert name == names[t] and int(support) == 1000
        assert float(recall) == pytest.approx(counts[t, t] / 1000)
        assert float(precision) == pytest.approx(counts[t, t] / counts[:, t].sum())
    predictions = rows_of(folder / "predictions.csv")
    assert predictions[0] == ["index", "key", "true", "predicted", "probability", "top5"]
    assert len(predictions) == 10001 and predictions[1][:2] == ["0", "00000000"]
    assert sum(r[2] == r[3] for r in predictions[1:]) == np.trace(counts)
    assert all(r[5].split(";")[0] == r[3] and len(r[5].split(";")) == 5 for r in predictions[1:])
    summary = json.loads((folder / "summary.json").read_text())
    assert summary == json.loads(json.dumps(result.summary)) and summary["classes"] == names
    for png in ("confusion.png", "mistakes.png"):
        image = cv2.imread(str(folder / png))
        assert image is not None and image.shape[0] > 300 and image.shape[1] > 600
    manifest = json.loads((run_copy / "manifest.json").read_text())
    [entry] = [e for e in manifest["evaluations"] if e["dir"] == str(folder)]
    assert entry["top1"] == summary["top1"] and "per_class" not in entry
    text = "\n".join(result.lines())
    assert f"top-1:      {summary['top1']:.4f}  (caffe test: {summary['caffe_test']['accuracy']:g} over 100 x 100, " \
           "the same)" in text
    assert text.count(" as ") == 5 and f"written:    {folder}" in text


def test_a_second_evaluation_replaces_the_folder_whole(engine, run_copy, evaluated, monkeypatch):
    folder = run_copy / "eval/lenet_iter_600"
    before = (folder / "summary.json").read_text()

    def broken(*args, **kwargs):
        raise RunError("cannot draw")

    monkeypatch.setattr(confusion_figures, "contact_sheet_png", broken)
    with pytest.raises(RunError, match="cannot draw"):
        evaluator.evaluate(engine, run_copy, caffe_test=False, progress=False)
    assert (folder / "summary.json").read_text() == before and not staging_folders(folder)
    monkeypatch.undo()
    again = evaluator.evaluate(engine, run_copy, top=3, caffe_test=False, progress=False)
    summary = json.loads((folder / "summary.json").read_text())
    assert again.folder == folder and summary["k"] == 3 and summary["caffe_test"] is None
    assert summary["top1"] == json.loads(before)["top1"] and not staging_folders(folder)
    manifest = json.loads((run_copy / "manifest.json").read_text())
    assert [e["k"] for e in manifest["evaluations"] if e["dir"] == str(folder)] == [3]
    assert writeup.newest(run_copy) == folder


def test_opencv_4_runs_caffes_files_with_its_own_importer_and_agrees_with_caffe(run_copy, evaluated, tmp_path):
    """Where OpenCV 4 is installed instead of 5 (here: OpenCV 4's wheel from PyPI, first on the path of
    the command), ``--backend opencv`` reads the deploy net and weights with ``readNetFromCaffe``
    (no export is made) and its top-1 over the 10,000 test images is Caffe's within 0.002."""
    opencv4 = tmp_path / "opencv4"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(opencv4),
                           "opencv-python-headless>=4.8,<5"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    copy = Path(shutil.copytree(run_copy, tmp_path / run_copy.name))
    shutil.rmtree(copy / "export", ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(opencv4), os.environ.get("PYTHONPATH")]))}
    version = subprocess.run([sys.executable, "-c", "import cv2; print(cv2.__version__)"], env=env,
                             capture_output=True, text=True, check=True).stdout.strip()
    assert version.startswith("4."), version
    done = subprocess.run([CAFFETOOL, "evaluate", str(copy), "--backend", "opencv", "--no-caffe-test"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    summary = json.loads((copy / "eval" / "lenet_iter_600-opencv" / "summary.json").read_text())
    assert abs(summary["top1"] - evaluated[0].summary["top1"]) <= 0.002
    assert not (copy / "export").exists()  # OpenCV 4 read Caffe's own files


def test_top_k_is_bounded_by_the_classes_and_the_command_refuses_zero(engine, run_copy, evaluated):
    done = subprocess.run([CAFFETOOL, "evaluate", str(run_copy), "--top", "0"], capture_output=True, text=True)
    assert done.returncode == 1 and done.stderr.strip() == "Error: --top must be at least 1, got 0"
    done = subprocess.run([CAFFETOOL, "evaluate", str(run_copy), "--top", "50", "--backend", "opencv",
                           "--no-caffe-test"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and done.stderr == ("Error: --top 50 is more than the 10 classes the net tells "
                                                    "apart; give --top 10 or less\n")
    done = subprocess.run([CAFFETOOL, "evaluate", str(run_copy), "--top", "10", "--backend", "opencv",
                           "--no-caffe-test"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    folder = run_copy / "eval/lenet_iter_600-opencv"
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["k"] == 10 and summary["topk"] == 1.0 and summary["backend"] == "opencv"
    assert abs(summary["top1"] - evaluated[0].summary["top1"]) <= 0.002  # OpenCV's float arithmetic differs
    lines = done.stdout.splitlines()
    assert lines[0].startswith("evaluated:  10000 records of the test split") and "opencv backend" in lines[0]
    assert lines[1] == f"top-1:      {summary['top1']:.4f}" and lines[2] == "top-10:     1.0000"
    assert lines[-1] == f"written:    {folder}"


def test_gpu_flags_are_refused_on_a_cpu_engine_before_any_work(engine, run_copy):
    """evaluate, demo.serve and demo.classify take --gpu; this engine is CPU-only, so a GPU is refused
    with the fix, and so is a GPU for OpenCV's backend or several GPUs for one pycaffe net."""
    before = sorted(p.name for p in run_copy.rglob("*"))
    for argv in (["evaluate", str(run_copy), "--gpu", "0"], ["demo.serve", "--run", str(run_copy), "--gpu", "0"],
                 ["demo.classify", str(run_copy / "deploy.prototxt"), "--run", str(run_copy), "--gpu", "0"]):
        done = subprocess.run([CAFFETOOL, *argv], capture_output=True, text=True, timeout=120)
        assert done.returncode == 1, argv
        assert done.stderr.startswith(f"Error: --gpu 0 asks for a GPU, but the engine at {engine.prefix} was built "
                                      "CPU-only; rebuild it with `caffetool engine.install --cuda --force`"), done.stderr
    done = subprocess.run([CAFFETOOL, "evaluate", str(run_copy), "--gpu", "all"], capture_output=True, text=True)
    assert done.returncode == 1 and "pycaffe runs a net on one device" in done.stderr
    assert sorted(p.name for p in run_copy.rglob("*")) == before


def test_an_evaluation_that_disagrees_with_caffe_test_fails(engine, run_copy, tmp_path):
    """A deploy net changed since training (average pooling where the run trained with max): pycaffe's
    top-1 no longer equals ``caffe test``'s on the train/test net, and ``evaluate`` says so and fails,
    the report written for the user to look at."""
    other = Path(shutil.copytree(run_copy, tmp_path / "changed", ignore=shutil.ignore_patterns("eval", "tensorboard")))
    deploy = other / "deploy.prototxt"
    assert "pool: MAX" in deploy.read_text()
    deploy.write_text(deploy.read_text().replace("pool: MAX", "pool: AVE"))
    done = subprocess.run([CAFFETOOL, "evaluate", str(other)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 1 and "DIFFERENT" in done.stdout, done.stdout + done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("Error: top-1 ") and "differs from caffe test's" in line and "Traceback" not in done.stderr
    assert (other / "eval").is_dir()


def test_a_net_that_is_no_classifier_is_refused(engine, run_copy, tmp_path):
    other = Path(shutil.copytree(run_copy, tmp_path / "other", ignore=shutil.ignore_patterns("eval", "tensorboard")))
    (other / "labels.txt").write_text("a\nb\nc\n")
    with pytest.raises(NetError, match=r"deploy.prototxt outputs 10 values per image for 3 classes in labels.txt"):
        evaluator.evaluate(engine, other, caffe_test=False, progress=False)
    (other / "deploy.prototxt").unlink()
    with pytest.raises(RunError, match=r"has no deploy.prototxt: its net is no classifier"):
        evaluator.evaluate(engine, other, caffe_test=False, progress=False)
    assert not (other / "eval").exists()


def test_a_solver_run_from_bvlc_files_evaluates_too(engine, caffe, fashion_data, tmp_path, monkeypatch):
    root = lay_out(tmp_path / "caffe", engine, fashion_data)
    monkeypatch.chdir(root)
    request = session.TrainRequest(solver="examples/mnist/lenet_solver.prototxt", runs_dir=tmp_path / "runs",
                                   name="mine", gpu="cpu", options=SolverOptions(max_iter=40, test_iter=2))
    trained = session.train(engine, request, say=lambda _: None, progress=False)
    assert trained.outcome.status == "finished"
    result = evaluator.evaluate(engine, trained.run_dir, progress=False, say=lambda _: None)
    s = result.summary
    assert s["count"] == 10000 and s["classes"] == [str(i) for i in range(10)]  # no --labels: by index
    assert Path(s["source"]).resolve() == (root / "examples/mnist/mnist_test_lmdb").resolve()
    assert s["caffe_test"]["equal"] is True and s["caffe_test"]["accuracy"] == float(f"{s['top1']:g}")
    # --split train reads the TRAIN-phase Data layer's database (evaluating its 60,000 records is left out here)
    train = records.source(trained.run_dir, "train", caffe.proto.caffe_pb2)
    assert train.path.resolve() == (root / "examples/mnist/mnist_train_lmdb").resolve()
    assert (train.batch_size, train.test_net, train.transform.scale) == (64, None, 0.00390625)
    assert evaluator.folder_name(Path("x/lenet_iter_40.caffemodel"), "train", "opencv") == "lenet_iter_40-train-opencv"


def test_metrics_follow_caffes_accuracy_rule_on_ties():
    scores = np.array([[1.0, 1.0, 0.0], [0.0, 2.0, 1.0], [3.0, 1.0, 2.0]], np.float32)
    labels = np.array([1, 2, 0])
    assert metrics.correct_at(scores, labels, 1).tolist() == [False, False, True]  # a tie counts against
    assert metrics.correct_at(scores, labels, 2).tolist() == [True, True, True]
    matrix = metrics.confusion(labels, metrics.top_classes(scores, 1)[:, 0], 3)
    assert matrix.tolist() == [[1, 0, 0], [1, 0, 0], [0, 1, 0]]
    rows = metrics.per_class(matrix, ["a", "b", "c"])
    assert rows[0] == {"class": "a", "precision": 0.5, "recall": 1.0, "f1": pytest.approx(2 / 3), "support": 1}
    assert rows[1]["precision"] == 0.0 and rows[2] == {"class": "c", "precision": 0.0, "recall": 0.0, "f1": 0.0,
                                                       "support": 1}
    assert metrics.most_confused(matrix, 5) == [(1, 0, 1), (2, 1, 1)]


@pytest.fixture(scope="module")
def class_folders(tmp_path_factory):
    """The first 60 Fashion-MNIST test images as PNG files, in sub-folders named by class index."""
    folder = tmp_path_factory.mktemp("labelled")
    source = FASHION_MNIST.local_dirs[0]
    images = np.frombuffer(gzip.open(source / "t10k-images-idx3-ubyte.gz").read()[16:], np.uint8).reshape(-1, 28, 28)
    labels = gzip.open(source / "t10k-labels-idx1-ubyte.gz").read()[8:]
    for i in range(60):
        (folder / str(labels[i])).mkdir(exist_ok=True)
        cv2.imwrite(str(folder / str(labels[i]) / f"{i:03d}.png"), images[i])
    return folder, list(labels[:60])


def test_classify_labelled_folder_scores_the_images(run_copy, evaluated, class_folders, tmp_path):
    folder, labels = class_folders
    (folder / "3" / "broken.png").write_bytes(b"no image")
    out = tmp_path / "scores"
    done = subprocess.run([CAFFETOOL, "demo.classify", str(folder), "--labelled", "--run", str(run_copy),
                           "--out", str(out), "--top", "3"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and done.stderr.strip() == "Error: 1 file(s) could not be classified"
    assert f"{folder / '3' / 'broken.png'}: the body is not an image" in done.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["count"] == 60 and summary["failed"] == 1 and summary["k"] == 3
    predictions = rows_of(out / "predictions.csv")
    assert predictions[0] == ["path", "true", "predicted", "probability", "top3"] and len(predictions) == 61
    assert summary["top1"] == sum(r[1] == r[2] for r in predictions[1:]) / 60
    confusion = rows_of(out / "confusion.csv")
    assert sum(int(v) for r in confusion[1:] for v in r[1:]) == 60
    assert cv2.imread(str(out / "confusion.png")) is not None and cv2.imread(str(out / "mistakes.png")) is not None
    assert f"top-1:      {summary['top1']:.4f}" in done.stdout and f"written:    {out}" in done.stdout
    # the demo's preprocessing of these PNGs predicts what evaluate predicted for the same records
    database = rows_of(evaluated[0].folder / "predictions.csv")
    names = summary["classes"]
    for row in predictions[1:]:
        index = int(Path(row[0]).stem)
        assert row[1] == names[labels[index]] == database[index + 1][2] and row[2] == database[index + 1][3]


def test_a_list_file_labels_images_as_convert_imageset_reads_it(engine, run_copy, class_folders, tmp_path):
    folder, labels = class_folders
    listing = tmp_path / "list.txt"
    listing.write_text("".join(f"{folder}/{label}/{i:03d}.png {label}\n" for i, label in enumerate(labels[:20])))
    model = classifier.load(engine, modelfiles.from_run(run_copy))
    items = scoring.from_list(listing, 10)
    assert [i.label for i in items] == labels[:20]
    outcome = scoring.evaluate(model, items, 5, tmp_path / "out", str(listing))
    assert outcome.summary["count"] == 20 and outcome.matrix.sum() == 20 and not outcome.failures
    assert outcome.summary["top1"] == np.trace(outcome.matrix) / 20
    default = scoring.default_folder(run_copy)
    assert default.parent == run_copy / "eval" and default.name.startswith("classify-")
    listing.write_text(f"{folder}/0/000.png 12\n")
    with pytest.raises(DataError, match=r"list.txt:1: label 12 is not a class of the model \(0 to 9\)"):
        scoring.from_list(listing, 10)
    (tmp_path / "odd" / "Jacket").mkdir(parents=True)
    with pytest.raises(DataError, match=r"sub-folder\(s\) 'Jacket' name no class of the model"):
        scoring.from_folder(tmp_path / "odd", model.labels)


def colour_database(folder: Path, images: np.ndarray, encoded: bool) -> Path:
    """An LMDB of colour records made from grey images (each channel a different tint), PNG-encoded or raw."""
    path = folder / ("encoded_lmdb" if encoded else "raw_lmdb")
    writer = db.Writer(path, "lmdb")
    values = []
    for i, grey in enumerate(images):
        bgr = np.stack([grey, 255 - grey, grey // 2 + i % 7], axis=2)
        values.append(datum.encode(cv2.imencode(".png", bgr)[1].tobytes(), i % 10, True) if encoded
                      else datum.encode(bgr.transpose(2, 0, 1).tobytes(), i % 10, False, (3, 28, 28)))
    writer.put_chunk(db.keys(0, len(values)), values)
    writer.close()
    return path


@pytest.mark.parametrize("encoded, transform_param, shape", [
    (True, 'crop_size: 24 mean_file: "mean.binaryproto" scale: 0.017', (3, 24, 24)),
    (False, "crop_size: 21 mean_value: 104 mean_value: 117 mean_value: 123", (3, 21, 21)),
    (True, "force_gray: true mean_value: 33.5 scale: 0.00390625", (1, 28, 28)),
])
def test_records_are_transformed_bit_for_bit_as_caffes_data_layer(caffe, tmp_path, encoded, transform_param, shape):
    source = FASHION_MNIST.local_dirs[0]
    grey = np.frombuffer(gzip.open(source / "t10k-images-idx3-ubyte.gz").read()[16:16 + 50 * 784], np.uint8)
    path = colour_database(tmp_path, grey.reshape(50, 28, 28), encoded)
    pb2 = caffe.proto.caffe_pb2
    mean = pb2.BlobProto(num=1, channels=3, height=28, width=28)
    mean.data.extend(np.random.default_rng(0).uniform(0, 255, 3 * 28 * 28).astype(np.float32).tolist())
    (tmp_path / "mean.binaryproto").write_bytes(mean.SerializeToString())
    net_file = tmp_path / "data.prototxt"
    net_file.write_text(f'layer {{ name: "d" type: "Data" top: "data" top: "label" include {{ phase: TEST }} '
                        f'transform_param {{ {transform_param.replace("mean.binaryproto", str(tmp_path / "mean.binaryproto"))} }} '
                        f'data_param {{ source: "{path}" batch_size: 20 backend: LMDB }} }}')
    layer = prototxt.read(net_file, pb2.NetParameter()).layer[0]
    src = records.Source("test", path, layer, 20, None, tmp_path)
    ours = list(records.batches(src, pb2, 20, shape))
    assert [len(b.keys) for b in ours] == [20, 20, 10] and ours[2].keys[-1] == "00000049"
    net = caffe.Net(str(net_file), caffe.TEST)
    for batch in ours[:2]:  # Caffe's Data layer wraps around after the last record: compare whole batches
        net.forward()
        assert net.blobs["data"].data.shape == (20, *shape)
        assert np.array_equal(net.blobs["data"].data, batch.blob)
        assert np.array_equal(net.blobs["label"].data, batch.labels)
