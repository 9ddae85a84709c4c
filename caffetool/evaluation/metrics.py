"""The figures of a classifier's evaluation, from labels and scores: numpy only, no files, no Caffe.

Correctness follows BVLC Caffe ``src/caffe/layers/accuracy_layer.cpp``: a record is right at k when
fewer than k classes score at least as high as its true class (the true class counting itself), so
a tie counts against the net, as in ``caffe test``. The predicted class is the highest score (the
first on a tie); precision, recall and F1 per class come from the confusion matrix (0 where a class
is never predicted or never present).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from caffetool.errors import DataError


def correct_at(scores: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """Per record, whether its true class is within the top ``k`` by Caffe's AccuracyLayer rule."""
    true_scores = scores[np.arange(len(labels)), labels][:, None]
    return (scores >= true_scores).sum(axis=1) <= k


def top_classes(scores: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` best classes of each record, best first (a stable order on ties)."""
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


def confusion(true: np.ndarray, predicted: np.ndarray, classes: int) -> np.ndarray:
    """Counts, rows the true class and columns the predicted one."""
    return np.bincount(true * classes + predicted, minlength=classes * classes).reshape(classes, classes)


def per_class(matrix: np.ndarray, names: list[str]) -> list[dict]:
    """Precision, recall, F1 and support of each class."""
    hits = np.diag(matrix).astype(float)
    predicted, support = matrix.sum(axis=0), matrix.sum(axis=1)
    precision = np.divide(hits, predicted, out=np.zeros_like(hits), where=predicted > 0)
    recall = np.divide(hits, support, out=np.zeros_like(hits), where=support > 0)
    both = precision + recall
    f1 = np.divide(2 * precision * recall, both, out=np.zeros_like(hits), where=both > 0)
    return [{"class": name, "precision": float(p), "recall": float(r), "f1": float(f), "support": int(s)}
            for name, p, r, f, s in zip(names, precision, recall, f1, support)]


def most_confused(matrix: np.ndarray, n: int) -> list[tuple[int, int, int]]:
    """The ``n`` largest off-diagonal cells as (true, predicted, count), largest first, empty ones left out."""
    off = matrix.copy()
    np.fill_diagonal(off, 0)
    order = np.argsort(-off, axis=None, kind="stable")[:n]
    cells = [divmod(int(i), matrix.shape[1]) for i in order]
    return [(t, p, int(off[t, p])) for t, p in cells if off[t, p] > 0]


def worst_by_f1(rows: list[dict], n: int) -> list[dict]:
    """The ``n`` classes with the lowest F1 among those present (support above 0)."""
    return sorted((r for r in rows if r["support"]), key=lambda r: r["f1"])[:n]


@dataclass
class Tally:
    """Per-record results gathered batch by batch."""

    classes: int
    k: int
    labels: list[np.ndarray] = field(default_factory=list)
    top: list[np.ndarray] = field(default_factory=list)  # (n, k) best classes
    prob: list[np.ndarray] = field(default_factory=list)  # (n, k) their probabilities
    right1: list[np.ndarray] = field(default_factory=list)
    rightk: list[np.ndarray] = field(default_factory=list)

    def add(self, labels: np.ndarray, scores: np.ndarray, probs: np.ndarray) -> None:
        if len(labels) and (labels.min() < 0 or labels.max() >= self.classes):
            bad = labels[(labels < 0) | (labels >= self.classes)][0]
            raise DataError(f"a record is labelled {bad}; the net has classes 0 to {self.classes - 1}")
        best = top_classes(scores, self.k)
        self.labels.append(labels)
        self.top.append(best)
        self.prob.append(np.take_along_axis(probs, best, axis=1))
        self.right1.append(correct_at(scores, labels, 1))
        self.rightk.append(correct_at(scores, labels, self.k))

    def done(self) -> Results:
        joined = [np.concatenate(x) if x else np.zeros((0,) + shape, dtype)
                  for x, shape, dtype in ((self.labels, (), np.int64), (self.top, (self.k,), np.int64),
                                          (self.prob, (self.k,), np.float32), (self.right1, (), bool),
                                          (self.rightk, (), bool))]
        return Results(self.classes, self.k, *joined)


@dataclass
class Results:
    classes: int
    k: int
    labels: np.ndarray
    top: np.ndarray
    prob: np.ndarray
    right1: np.ndarray
    rightk: np.ndarray

    @property
    def count(self) -> int:
        return len(self.labels)

    @property
    def predicted(self) -> np.ndarray:
        return self.top[:, 0]

    def accuracy(self, right: np.ndarray) -> float:
        return float(right.mean()) if len(right) else 0.0

    def confusion(self) -> np.ndarray:
        return confusion(self.labels, self.predicted, self.classes)

    def confident_mistakes(self, n: int) -> list[int]:
        """Indices of the ``n`` wrongly predicted records the net was surest of, surest first."""
        wrong = np.flatnonzero(self.predicted != self.labels)
        return [int(i) for i in wrong[np.argsort(-self.prob[wrong, 0], kind="stable")][:n]]
