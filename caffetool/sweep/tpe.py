"""Ray Tune's ``OptunaSearch`` told only the results that hold the sweep's metric, at Caffe's iteration.

A trial hands Tune a result without the metric while Caffe is between rows (see
:mod:`caffetool.sweep.trial`: ``step`` returns every few seconds so a stop can get through), and
``OptunaSearch`` reads the metric from every result it is given. Each figure is reported to
Optuna's trial at Caffe's iteration (``iterations``), not at Tune's count of ``step`` calls, so a
trial that ASHA stops is known to the study by its figures at the iterations they were measured
(Optuna keeps such a trial as pruned, and its TPE sampler weighs it by its last figure).
"""

from __future__ import annotations

from typing import Any

from ray.tune.search.optuna import OptunaSearch

from caffetool.sweep.trial import ITERATIONS


class MetricRowsOnly(OptunaSearch):
    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        if self.metric not in result or trial_id in self._completed_trials:
            return
        self._ot_trials[trial_id].report(result[self.metric], int(result.get(ITERATIONS, 0)))
