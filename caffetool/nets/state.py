"""Which layers a net holds in a given state: Caffe's ``include``/``exclude`` rules.

A train/test prototxt is one file for several nets: ``Net::FilterNet`` (net.cpp) keeps a layer when
one of its ``include`` rules meets the net's state (phase, level, stages), or, without ``include``
rules, when none of its ``exclude`` rules does. Everything that reads a user's net for one phase
(the memory estimate, a derived deploy net, batch sizes, the demo's transform) goes through here.
"""

from __future__ import annotations

from typing import Any

TRAIN, TEST = 0, 1  # caffe.proto's Phase


def included(layer: Any, phase: int, level: int = 0, stages: frozenset[str] = frozenset()) -> bool:
    """Whether ``layer`` (a LayerParameter) is in the net of ``phase`` at ``level`` with ``stages``."""
    if layer.include:
        return any(_meets(r, phase, level, stages) for r in layer.include)
    return not any(_meets(r, phase, level, stages) for r in layer.exclude)


def _meets(rule: Any, phase: int, level: int, stages: frozenset[str]) -> bool:
    """``Net::StateMeetsRule``: every condition the rule sets holds for the state."""
    return ((not rule.HasField("phase") or rule.phase == phase)
            and (not rule.HasField("min_level") or level >= rule.min_level)
            and (not rule.HasField("max_level") or level <= rule.max_level)
            and all(stage in stages for stage in rule.stage)
            and not any(stage in stages for stage in rule.not_stage))


def outputs(net: Any, phase: int) -> list[str]:
    """The blobs Caffe's ``Net::Init`` makes the outputs of ``net`` in ``phase`` (at the net's own
    level and stages): the inputs and tops that no later layer of that net reads, in order. These are
    what a log's "Train net output" and "Test net output" lines name."""
    stages = frozenset(net.state.stage)
    available = dict.fromkeys(net.input)
    for layer in net.layer:
        if not included(layer, phase, net.state.level, stages):
            continue
        for blob in layer.bottom:
            available.pop(blob, None)
        available.update(dict.fromkeys(layer.top))
    return list(available)
