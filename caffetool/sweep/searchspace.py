"""What a sweep varies and what it optimizes: ``--param`` and ``--metric``, checked before Ray starts.

``--param NAME=V1,V2,...`` is a grid (every value is tried); ``--param NAME=log:LO..HI``,
``uniform:LO..HI`` and ``int:LO..HI`` are sampled (``--samples N`` draws per grid point, as Ray
Tune's ``num_samples`` does). NAME is any training setting a run takes as a flag: the solver's
numbers (:data:`caffetool.nets.solvers.LIMITS`), ``type``, ``lr_policy``, ``batch_size`` and
``test_batch_size``. Every value, and both ends of every range, is read and checked exactly as the
train flags are (:meth:`SolverOptions.from_flags`, :func:`caffetool.choices.count`), and so is
every combination of grid values with the fixed flags at each end of the ranges, so that a sweep
that would have trials Caffe cannot run (``type=Adam`` with ``momentum=0``) is refused whole,
before anything starts. ``--metric`` names a net output as the log parser sees it: ``test/NAME``
(test net #0), ``testK/NAME`` (test net #K) or ``train/NAME`` (a train net output, or
``smoothed_loss``, the loss of Caffe's iteration line).

Limits: the checks cover the ends of each range and the grid; a value between two ends that a
solver rule refuses would need a rule that is not monotonic, which no solver setting has.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from caffetool.choices import INT32_MAX, Limit, choose, number
from caffetool.errors import ConfigError
from caffetool.nets import solvers

BATCH = Limit("a batch size", 1, INT32_MAX, kind=int)
# The settings a sweep may vary, and how each is read: a Limit for numbers, a tuple for names.
SWEEPABLE: dict[str, Limit | tuple[str, ...]] = {
    "type": tuple(solvers.SOLVER_TYPES),
    "lr_policy": tuple(solvers.LR_POLICIES),
    **solvers.LIMITS,
    "batch_size": BATCH,
    "test_batch_size": BATCH,
}
TRAIN_ONLY = ("batch_size", "test_batch_size")  # a TrainRequest's, not the solver's
RANGES = ("log", "uniform", "int")
PARAM = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_-]*)\s*=\s*(.+?)\s*$")
RANGE = re.compile(r"^(log|uniform|int):\s*(\S+?)\s*\.\.\s*(\S+)$")
METRIC = re.compile(r"^(train|test)(\d*)/(\S+)$")
MAX_COMBINATIONS = 4096  # grid points checked one by one; beyond this a sweep is not meant to run here


@dataclass(frozen=True)
class Param:
    """One ``--param``: a grid of ``values``, or a range ``low..high`` drawn as ``kind`` says."""

    name: str
    kind: str  # "grid", or one of RANGES
    values: tuple[Any, ...] = ()
    low: float = 0.0
    high: float = 0.0

    def domain(self, crossed: bool = True) -> Any:
        """The Ray Tune search-space object for this parameter; a grid is crossed (every value with
        every other trial) or, for a model-based search, one more choice for the model to make."""
        from ray import tune  # noqa: PLC0415 - Ray costs seconds to import; parsing must not

        whole = _limit(self.name).kind is int if isinstance(SWEEPABLE[self.name], Limit) else False
        if self.kind == "grid":
            return tune.grid_search(list(self.values)) if crossed else tune.choice(list(self.values))
        if self.kind == "int" or (whole and self.kind == "uniform"):
            return tune.randint(int(self.low), int(self.high) + 1)  # Tune's upper end is exclusive
        if self.kind == "log":
            return tune.lograndint(int(self.low), int(self.high) + 1) if whole else tune.loguniform(self.low, self.high)
        return tune.uniform(self.low, self.high)

    def ends(self) -> tuple[Any, ...]:
        """The values the checks try: every grid value, or both ends of the range."""
        return self.values if self.kind == "grid" else (self.low, self.high)


@dataclass(frozen=True)
class Metric:
    """A net output a sweep optimizes: ``net`` -1 for the train net, else the test net's place."""

    name: str  # as given, and as reported to Tune: "test/accuracy"
    net: int
    output: str


@dataclass(frozen=True)
class Space:
    params: tuple[Param, ...]
    fixed: dict[str, Any]  # the train flags given as flags (text), the same for every trial

    @property
    def sampled(self) -> bool:
        return any(p.kind != "grid" for p in self.params)

    def tune(self, crossed: bool = True) -> dict[str, Any]:
        """The search space as Ray Tune's ``param_space`` (grids crossed, or choices: :meth:`Param.domain`)."""
        return {p.name: p.domain(crossed) for p in self.params}

    def grid_size(self) -> int:
        return math.prod(len(p.values) for p in self.params if p.kind == "grid")


def parse_param(text: str) -> Param:
    """One ``--param NAME=SPEC``, read and checked alone."""
    try:
        return _parse_param(text)
    except ConfigError as e:
        if str(e).startswith("--param"):
            raise
        raise ConfigError(f"--param {text.strip()}: {e}") from None


def _parse_param(text: str) -> Param:
    match = PARAM.match(text or "")
    if not match:
        raise ConfigError(f"--param {text!r}: write NAME=V1,V2,... or NAME=log:LO..HI, uniform:LO..HI, int:LO..HI")
    name, spec = match.group(1).replace("-", "_").lower(), match.group(2)
    if name not in SWEEPABLE:
        raise ConfigError(f"--param {name}: not a setting a sweep can vary; choose one of: {', '.join(SWEEPABLE)}")
    kinds = SWEEPABLE[name]
    ranged = RANGE.match(spec)
    if ranged is None and re.match(r"^[A-Za-z]+:", spec) and not isinstance(kinds, tuple):
        raise ConfigError(f"--param {name}={spec}: unknown range {spec.split(':')[0]!r}; use "
                          f"{', '.join(k + ':LO..HI' for k in RANGES)}")
    if ranged is None:
        values = [v.strip() for v in spec.split(",")]
        if any(not v for v in values):
            raise ConfigError(f"--param {name}={spec}: an empty value; separate values with single commas")
        read = [_value(name, v) for v in values]
        if len(set(read)) != len(read):
            raise ConfigError(f"--param {name}={spec}: a value is given twice")
        return Param(name, "grid", tuple(read))
    kind, low_text, high_text = ranged.groups()
    if isinstance(kinds, tuple):
        raise ConfigError(f"--param {name} takes names ({', '.join(kinds)}), not a range")
    limit = _limit(name)
    if kind == "int" and limit.kind is not int:
        raise ConfigError(f"--param {name}=int:... : {name} is not a whole number; use uniform: or log:")
    low, high = _value(name, low_text), _value(name, high_text)
    if not low < high:
        raise ConfigError(f"--param {name}={spec}: the range's low end must be below its high end")
    if kind == "log" and low <= 0:
        raise ConfigError(f"--param {name}={spec}: a log range must start above 0")
    return Param(name, kind, low=low, high=high)


def _limit(name: str) -> Limit:
    kinds = SWEEPABLE[name]
    assert isinstance(kinds, Limit)
    return kinds


def _value(name: str, text: str) -> Any:
    """One value of ``name``, read and checked as its train flag reads it."""
    flag = solvers.flag(name)
    kinds = SWEEPABLE[name]
    if isinstance(kinds, tuple):
        return choose(text, kinds, flag)
    value = number(text, flag, kinds.kind)
    if name in TRAIN_ONLY or (limit := solvers.POLICY_LIMITS.get(("sigmoid", name))) is None:
        limit = kinds
    if not limit.admits(value):
        raise limit.refusal(flag, value)
    return value


def parse_metric(text: str) -> Metric:
    match = METRIC.match((text or "").strip())
    if not match:
        raise ConfigError(f"--metric {text!r}: write test/OUTPUT (test net #0), testK/OUTPUT or train/OUTPUT, "
                          "e.g. test/accuracy or train/loss")
    where, index, output = match.groups()
    if where == "train" and index:
        raise ConfigError(f"--metric {text!r}: there is one train net; write train/{output}")
    return Metric(text.strip(), -1 if where == "train" else int(index or 0), output)


def build(params: list[str], fixed: dict[str, Any]) -> Space:
    """The search space of ``params`` over the ``fixed`` train flags, every trial it allows checked."""
    if not params:
        raise ConfigError("give at least one --param NAME=V1,V2,... (or NAME=log:LO..HI) to sweep over")
    parsed = [parse_param(p) for p in params]
    names = [p.name for p in parsed]
    if twice := sorted({n for n in names if names.count(n) > 1}):
        raise ConfigError(f"--param {twice[0]} is given more than once; give its values in one --param")
    given = {k for k, v in fixed.items() if v not in (None, "", [])}
    if both := sorted(given & set(names)):
        raise ConfigError(f"{solvers.flag(both[0])} is both a fixed flag and a --param; give it one way")
    space = Space(tuple(parsed), dict(fixed))
    for trial in corners(space):
        check_trial(fixed, trial)
    return space


def corners(space: Space) -> Iterator[dict[str, Any]]:
    """Every combination of grid values and range ends: the trials the checks stand for."""
    choices = [[(p.name, v) for v in p.ends()] for p in space.params]
    if math.prod(len(c) for c in choices) > MAX_COMBINATIONS:
        raise ConfigError(f"the sweep has more than {MAX_COMBINATIONS} grid points; give fewer values")
    for combination in itertools.product(*choices):
        yield dict(combination)


def check_trial(fixed: dict[str, Any], params: dict[str, Any]) -> solvers.SolverOptions:
    """The solver options of one trial (fixed flags with its parameters), checked as `train` checks them."""
    try:
        return options(fixed, params)
    except ConfigError as e:
        shown = ", ".join(f"{k}={v}" for k, v in params.items())
        raise ConfigError(f"the trial with {shown} would be refused: {e}") from None


def options(fixed: dict[str, Any], params: dict[str, Any]) -> solvers.SolverOptions:
    """``SolverOptions`` of one trial: the fixed flags' text with the trial's values over them."""
    flags = {k: v for k, v in fixed.items() if k not in TRAIN_ONLY}
    flags.update({k: _text(v) for k, v in params.items() if k not in TRAIN_ONLY})
    return solvers.SolverOptions.from_flags(**flags)


def batches(fixed: dict[str, Any], params: dict[str, Any]) -> tuple[int | None, int | None]:
    """The trial's (batch size, test batch size); None: the model's own."""
    merged = {**fixed, **params}
    return tuple(None if merged.get(k) in (None, "") else int(number(merged[k], solvers.flag(k), int))
                 for k in TRAIN_ONLY)  # type: ignore[return-value]


def _text(value: Any) -> Any:
    """A trial's value as a flag's text (what ``from_flags`` reads); names stay names."""
    return repr(value) if isinstance(value, float) else value if isinstance(value, str) else str(value)
