"""A run's metrics as scalars ``(step, tag, value)``: the names its TensorBoard events and its MLflow run share.

The step of every scalar is the iteration (the row's ``NumIters``). Tags:

* ``train/<output>`` for each train net output, ``train/smoothed_loss`` (the iteration line's
  loss), ``train/lr``, ``train/iter_per_s``;
* ``test<k>/<output>`` for each output of test net #k (the figure measured at the last iteration
  included, once it is in the metrics).

:class:`NewRows` hands out each row once, so a writer that is given the same, growing
:class:`~caffetool.runs.logparse.Metrics` again and again (after every line of Caffe's output) sends
only what is new; made from the metrics a resumed run starts with, it leaves out the rows of the
earlier sessions. Values a row does not have (``None``) are left out; non-finite ones are kept
(the writer decides).
"""

from __future__ import annotations

from caffetool.runs.logparse import Metrics

# Train row keys that are not scalars under their own name; NumIters is the step.
TRAIN_TAGS = {"NumIters": None, "Seconds": None, "LearningRate": "train/lr"}
TEST_SKIPPED = ("NumIters", "Seconds", "LearningRate")

Scalar = tuple[int, str, float]


class NewRows:
    """The rows of a run's metrics that have not been taken yet, as scalars."""

    def __init__(self, metrics: Metrics | None = None) -> None:
        """Rows already in ``metrics`` (an earlier session's) count as taken."""
        metrics = metrics or Metrics()
        self.train_taken = len(metrics.train)
        self.tests_taken = {(net, row["NumIters"]) for net, rows in metrics.test.items() for row in rows}
        self._tests_seen = sum(len(rows) for rows in metrics.test.values())

    def pending(self, m: Metrics) -> bool:
        """Whether ``m`` has rows not taken yet (cheap: called after every line of Caffe's output)."""
        return len(m.train) > self.train_taken or sum(len(rows) for rows in m.test.values()) != self._tests_seen

    def take(self, m: Metrics) -> list[Scalar]:
        """The scalars of the rows of ``m`` not taken before, train rows first."""
        out: list[Scalar] = []
        for row in m.train[self.train_taken:]:
            out += [(row["NumIters"], tag, row[k]) for k in row
                    if (tag := TRAIN_TAGS.get(k, f"train/{k}")) and row[k] is not None]
        self.train_taken = len(m.train)
        for net, rows in sorted(m.test.items()):
            for row in rows:
                if (net, row["NumIters"]) not in self.tests_taken:
                    self.tests_taken.add((net, row["NumIters"]))
                    out += [(row["NumIters"], f"test{net}/{k}", v) for k, v in row.items()
                            if k not in TEST_SKIPPED and v is not None]
        self._tests_seen = sum(len(rows) for rows in m.test.values())
        return out


def all_of(m: Metrics) -> list[Scalar]:
    """Every scalar of ``m``."""
    return NewRows().take(m)
