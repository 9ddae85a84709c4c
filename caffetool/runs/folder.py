"""A run's folder: every file and folder caffetool keeps in it, named here and nowhere else.

``caffetool train`` claims ``runs/<name>/`` (:mod:`caffetool.runs.rundir`) and fills it; every other
command (``evaluate``, ``export``, the demo, tracking, sweeps) reads or adds to it. Each entry is a
property of :class:`RunFolder`, so a command asks the folder for ``.labels`` rather than spelling
``labels.txt``; the names themselves are data (:data:`NAMES`), in the order a listing shows them.
An evaluation and an export are folders of their own inside the run (``eval/<weights>/``,
``export/``), with their own files named by their own modules.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

NAMES = {
    "manifest": "manifest.json",  # the run's record (caffetool.runs.runrecord)
    "lock": ".manifest.lock",  # held while the manifest is read, changed and written back
    "solver": "solver.prototxt",
    "train_val": "train_val.prototxt",  # a --model run's net
    "deploy": "deploy.prototxt",
    "train_net": "train_net.prototxt",  # a --solver run's nets, as the solver names them
    "labels": "labels.txt",
    "log": "caffe.log",  # Caffe's output as it trained
    "test_log": "caffe_test.log",  # `caffe test`'s output: the final figures, evaluate
    "metrics_csv": "metrics.csv",
    "metrics_json": "metrics.json",
    "snapshots": "snapshots",
    "tensorboard": "tensorboard",
    "plots": "plots",
    "evaluations": "eval",
    "export": "export",
}
TEST_NET = "test_net_{index}.prototxt"  # a --solver run's test nets
EVALUATION_SUMMARY = "summary.json"  # in each eval/<weights>/: its figures (caffetool.evaluation.writeup)
# What each entry holds, as the documentation's reference page shows it (docs/hooks.py)
CONTENTS = {
    "manifest": "the run's record: settings, data set with checksums, engine build, devices, outcome, final "
                "figures, evaluations, where it is tracked",
    "lock": "held while the manifest is read, changed and written back",
    "solver": "the solver Caffe trained with",
    "train_val": "the net a `--model` run trained and tested",
    "deploy": "the net for inference: the demo, `evaluate`, `export`",
    "train_net": "a `--solver` run's train net, as its solver names it (its test nets: `test_net_N.prototxt`)",
    "labels": "the class names, one per line",
    "log": "Caffe's own output as it trained",
    "test_log": "`caffe test`'s output on the final weights",
    "metrics_csv": "every logged iteration and test: loss, learning rate, outputs, seconds",
    "metrics_json": "the same, as JSON",
    "snapshots": "`.caffemodel` and `.solverstate` files, as Caffe snapshots them",
    "tensorboard": "TensorBoard event files, written as it trains",
    "plots": "loss, accuracy and learning-rate curves (PNG)",
    "evaluations": "one folder per evaluated weights: confusion matrix, per-class figures, mistakes",
    "export": "the run's verified ONNX (and PyTorch) exports with their records",
}


@dataclass(frozen=True)
class RunFolder:
    """The files of the run at ``path`` (which need not exist yet)."""

    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def manifest(self) -> Path:
        return self.path / NAMES["manifest"]

    @property
    def lock(self) -> Path:
        return self.path / NAMES["lock"]

    @property
    def solver(self) -> Path:
        return self.path / NAMES["solver"]

    @property
    def train_val(self) -> Path:
        return self.path / NAMES["train_val"]

    @property
    def deploy(self) -> Path:
        return self.path / NAMES["deploy"]

    @property
    def train_net(self) -> Path:
        return self.path / NAMES["train_net"]

    def test_net(self, index: int) -> Path:
        return self.path / TEST_NET.format(index=index)

    @property
    def trained_nets(self) -> tuple[Path, ...]:
        """The nets a run trained, in the order their TEST transform is looked for: a --model run's
        ``train_val``, else a --solver run's first test net, else its train net."""
        return self.train_val, self.test_net(0), self.train_net

    @property
    def labels(self) -> Path:
        return self.path / NAMES["labels"]

    @property
    def log(self) -> Path:
        return self.path / NAMES["log"]

    @property
    def test_log(self) -> Path:
        return self.path / NAMES["test_log"]

    @property
    def metrics_csv(self) -> Path:
        return self.path / NAMES["metrics_csv"]

    @property
    def metrics_json(self) -> Path:
        return self.path / NAMES["metrics_json"]

    @property
    def snapshots(self) -> Path:
        return self.path / NAMES["snapshots"]

    @property
    def tensorboard(self) -> Path:
        return self.path / NAMES["tensorboard"]

    @property
    def plots(self) -> Path:
        return self.path / NAMES["plots"]

    @property
    def evaluations(self) -> Path:
        return self.path / NAMES["evaluations"]

    @property
    def export(self) -> Path:
        return self.path / NAMES["export"]

    def evaluation_summaries(self) -> list[Path]:
        """The summary of every evaluation of the run (``eval/*/summary.json``), in no order."""
        return list(self.evaluations.glob(f"*/{EVALUATION_SUMMARY}"))

