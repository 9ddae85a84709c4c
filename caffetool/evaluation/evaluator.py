"""``caffetool evaluate``: a run's deploy net over every record of its test (or train) database, checked
against ``caffe test`` on the same weights, written to ``RUN/eval/<weights stem>/``.

The records go through :mod:`records` (Caffe's TEST transform) and :mod:`forward` in batches of the
data layer's own ``batch_size`` unless told otherwise. ``caffe test`` is run on the run's first test
net with a batch size dividing the record count, so its batches cover every record exactly once
(Caffe's Data layer wraps around at the end of the database) and its accuracy is over the same
images; its log goes to the run's ``caffe_test.log``.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from caffetool.backends import dispatch
from caffetool.backends.devices import CPU, PycaffeDevice
from caffetool.choices import choose
from caffetool.data import db
from caffetool.engine import EngineInfo, import_caffe
from caffetool.errors import DataError, RunError
from caffetool.evaluation import forward, metrics, writeup
from caffetool.inference import records
from caffetool.nets import state, testnets
from caffetool.runs import labelfile, snapshots
from caffetool.runs.folder import RunFolder
from caffetool.train import final_test


@dataclass
class Evaluation:
    folder: Path
    summary: dict[str, Any]
    matrix: np.ndarray

    def lines(self) -> list[str]:
        s = self.summary
        what = (f"records of the {s['split']} split ({s['source']}) with {Path(s['weights']).name}, "
                f"{s['backend']} backend")
        return writeup.lines(s, self.matrix, self.folder, what)

    def disagreement(self) -> str | None:
        """Why this evaluation is not to be trusted: its top-1 differs from ``caffe test``'s on the
        same records and weights (the two read the same database through the same engine, so any
        difference is a wrong model, preprocessing or backend). None where they agree or
        ``caffe test`` did not run."""
        measured = self.summary.get("caffe_test") or {}
        if measured.get("accuracy") is None or measured.get("equal", True):
            return None
        return (f"top-1 {self.summary['top1']:.4f} differs from caffe test's {measured['accuracy']:g} on the same "
                f"records and weights: the {self.summary['backend']} backend does not compute what Caffe computes "
                f"(the report is in {self.folder})")


def evaluate(engine: EngineInfo, run_dir: Path, weights: Path | None = None, split: str = "test", top: int | None = None,
             backend: str = "caffe", batch_size: int | None = None, caffe_test: bool = True,
             progress: bool = True, say: Callable[[str], None] = print,
             device: PycaffeDevice = CPU) -> Evaluation:
    """Evaluate the run's ``weights`` (default: its newest complete ones) and record it in the run;
    on ``device``, where ``caffe test`` runs too, so the two are compared on the same arithmetic."""
    split = choose(split, records.SPLITS, "--split")
    backend = dispatch.chosen(backend, device).name
    pb2 = import_caffe(engine).proto.caffe_pb2
    weights = weights or snapshots.newest_weights(run_dir, pb2)
    if weights is None:
        raise RunError(f"{run_dir} has no .caffemodel yet; train it first (or give --weights FILE)")
    src = records.source(run_dir, split, pb2)
    accuracy = accuracy_blobs(src.test_net.net) if src.test_net else {}
    net = forward.load(engine, RunFolder(run_dir).deploy, weights, backend, score=accuracy.get(1, (None,))[0], device=device)
    names = labelfile.read_if_there(RunFolder(run_dir).labels)
    total = db.count(src.path)
    size = batch_size or src.batch_size
    start = time.monotonic()
    tally, keys = _forward_all(net, src, pb2, size, total, names, top, progress, RunFolder(run_dir).deploy)
    seconds = round(time.monotonic() - start, 3)
    results = tally.done()
    if not results.count:
        raise DataError(f"{src.path} holds no records to evaluate")
    names = names or [str(i) for i in range(results.classes)]
    measured = None
    if caffe_test and split == "test":
        say(f"caffe test on the same {results.count} records for comparison")
        measured = measure(engine, run_dir, src, weights, results, accuracy, device.flag)
    summary = writeup.summary(
        results, names, weights=str(weights), split=split, source=str(src.path), backend=backend, device=device.label,
        batch_size=size, seconds=seconds, caffe_test=measured, at=dt.datetime.now().isoformat(timespec="seconds"))
    folder = RunFolder(run_dir).evaluations / folder_name(weights, split, backend)
    mistakes = _mistakes(results, names, src, pb2)
    rows = [["index", "key", "true", "predicted", "probability", f"top{results.k}"]]
    rows += [[i, keys[i], names[results.labels[i]], names[results.top[i, 0]], f"{results.prob[i, 0]:.6g}",
              ";".join(names[c] for c in results.top[i])] for i in range(results.count)]
    writeup.write(writeup.Report(summary, results.confusion(), rows, mistakes,
                               f"{run_dir.name}/{weights.stem}"), folder)
    writeup.record(run_dir, summary, folder)
    return Evaluation(folder, summary, results.confusion())


def _forward_all(net: forward.DeployNet, src: records.Source, pb2: ModuleType,
                 size: int, total: int, names: list[str] | None, top: int, progress: bool,
                 deploy: Path) -> tuple[metrics.Tally, list[str]]:
    from tqdm import tqdm  # noqa: PLC0415 - only when drawing a bar

    tally: metrics.Tally | None = None
    keys: list[str] = []
    with tqdm(total=total, unit="img", desc=f"evaluate {src.split}", leave=False,
              disable=None if progress else True) as bar:
        for batch in records.batches(src, pb2, size, net.shape):
            scores, probs = net(batch.blob)
            if tally is None:
                forward.check_classifier(probs, len(names) if names is not None else None, deploy)
                tally = metrics.Tally(probs.shape[1], labelfile.top_k(top, probs.shape[1]))
            tally.add(batch.labels, scores, probs)
            keys += batch.keys
            bar.update(len(batch.keys))
    return tally or metrics.Tally(len(names or []) or 1, 1), keys


def _mistakes(results: metrics.Results, names: list[str], src: records.Source, pb2: ModuleType) -> list[tuple[np.ndarray, str]]:
    chosen = results.confident_mistakes(writeup.MISTAKES)
    images = records.images_at(src, pb2, chosen)
    return [(images[i], f"{names[results.labels[i]]} /\n{names[results.predicted[i]]} {results.prob[i, 0]:.2f}")
            for i in chosen if i in images]


def accuracy_blobs(net: Any) -> dict[int, tuple[str, str]]:
    """The Accuracy layers of a test net by ``top_k``: (the blob each reads, the output it writes)."""
    found: dict[int, tuple[str, str]] = {}
    for layer in net.layer:
        if layer.type == "Accuracy" and state.included(layer, state.TEST, net.state.level, frozenset(net.state.stage)):
            found.setdefault(layer.accuracy_param.top_k, (layer.bottom[0], layer.top[0]))
    return found


def measure(engine: EngineInfo, run_dir: Path, src: records.Source, weights: Path, results: metrics.Results,
            accuracy: dict[int, tuple[str, str]], gpu_flag: list[str] | None = None) -> dict[str, Any]:
    """``caffe test``'s accuracy on the first test net, over each record once; ``equal`` says whether it
    prints the same figure as ours (Caffe prints 6 significant digits, C++'s default)."""
    pb2 = import_caffe(engine).proto.caffe_pb2
    count = results.count
    batch = covering_batch(count, src.batch_size)
    net = pb2.NetParameter()
    net.CopyFrom(src.test_net.net)
    for layer in net.layer:
        if layer.name == src.layer.name and layer.type == "Data":
            layer.data_param.batch_size = batch
    t = testnets.TestNet(src.test_net.index, net, count // batch, src.test_net.source)
    out: dict[str, Any] = {"iterations": count // batch, "batch_size": batch}
    try:
        done = final_test.caffe_test_net(engine, run_dir, t, weights.absolute(), gpu_flag or [], count // batch)
    except RunError as e:
        return out | {"accuracy": None, "not_measured": str(e)}
    final_test.keep_log(run_dir, f"evaluate: caffe test of test net #{t.index} on {weights.name}", done.log)
    top1 = done.outputs.get(accuracy[1][1]) if 1 in accuracy else None
    out |= {"accuracy": top1, "outputs": done.outputs}
    if top1 is None:
        return out | {"not_measured": "the test net has no top-1 Accuracy layer"}
    out["equal"] = float(f"{results.accuracy(results.right1):g}") == top1
    if results.k in accuracy and results.k != 1:
        topk = done.outputs.get(accuracy[results.k][1])
        out |= {"topk": topk, "topk_equal": topk is not None and float(f"{results.accuracy(results.rightk):g}") == topk}
    return out


def folder_name(weights: Path, split: str, backend: str) -> str:
    """``<weights stem>``, with ``-train`` and ``-opencv`` for the other split and backend, so that an
    evaluation replaces only the earlier one of the same weights, split and backend."""
    return weights.stem + ("" if split == "test" else f"-{split}") + ("" if backend == "caffe" else f"-{backend}")


def covering_batch(count: int, batch: int) -> int:
    """The largest batch size up to ``batch`` that divides ``count``: whole batches, no record twice."""
    return next(b for b in range(min(batch, count), 0, -1) if count % b == 0)
