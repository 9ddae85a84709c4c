"""Solver presets, types and learning-rate policies declared as data, and the solver builder.

The default preset is the published LeNet recipe (examples/mnist/lenet_solver.prototxt). Each
solver type carries the defaults of Caffe's own example for it (lenet_solver_adam.prototxt and
friends); each lr policy names the fields Caffe needs for it. Invalid combinations are refused
here, before anything is written, with the option and the valid choices in the message.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from caffetool.choices import INT32_MAX, Limit, choose, number
from caffetool.errors import ConfigError

LENET_RECIPE: dict[str, object] = {
    "base_lr": 0.01, "momentum": 0.9, "weight_decay": 0.0005, "lr_policy": "inv", "gamma": 0.0001,
    "power": 0.75, "display": 100, "max_iter": 10000, "snapshot": 5000, "test_interval": 500,
}

# Per solver type: the settings Caffe's example for that type uses (overriding the recipe),
# and the momentum rule Caffe enforces (AdaGrad and RMSProp refuse momentum).
SOLVER_TYPES: dict[str, dict[str, object]] = {
    "SGD": {},
    "Nesterov": {},
    "AdaGrad": {"momentum": 0.0, "delta": 1e-8},
    "RMSProp": {"momentum": 0.0, "rms_decay": 0.98, "delta": 1e-8},
    "AdaDelta": {"base_lr": 1.0, "lr_policy": "fixed", "momentum": 0.95, "delta": 1e-6},
    "Adam": {"base_lr": 0.001, "lr_policy": "fixed", "momentum": 0.9, "momentum2": 0.999, "delta": 1e-8},
}
NO_MOMENTUM = {"AdaGrad", "RMSProp"}
NEEDS_MOMENTUM = {"AdaDelta", "Adam"}  # their update divides by or decays with it

LR_POLICIES: dict[str, tuple[str, ...]] = {
    "fixed": (),
    "step": ("gamma", "stepsize"),
    "multistep": ("gamma", "stepvalue"),
    "exp": ("gamma",),
    "inv": ("gamma", "power"),
    "poly": ("power",),
    "sigmoid": ("gamma", "stepsize"),
}
POLICY_FIELDS = {"gamma", "power", "stepsize", "stepvalue"}
MODES = ("cpu", "gpu")


def _count(what: str) -> Limit:
    """A whole number that Caffe's int32 fields hold, 1 or more."""
    return Limit(what, 1, INT32_MAX, kind=int)


# What Caffe can use for each number a user may set, declared as data. ``kind`` is also how the
# flag's text is read (a count never silently loses its fraction); ints stop at Caffe's int32 fields.
DECAY = Limit("a decay factor", 0, 1, high_open=True)
LIMITS: dict[str, Limit] = {
    "base_lr": Limit("a learning rate", 0, low_open=True),
    "gamma": Limit("an lr factor", 0, low_open=True),
    "power": Limit("an exponent", 0),
    "stepsize": _count("an iteration count"),
    "momentum": DECAY,
    "momentum2": DECAY,
    "delta": Limit("a stability term", 0, low_open=True),
    "rms_decay": DECAY,
    "weight_decay": Limit("a penalty", 0),
    "max_iter": _count("an iteration count"),
    "iter_size": _count("a number of batches"),
    "random_seed": Limit("a seed", 0, 2**63 - 1, kind=int),  # Caffe reads a negative seed as "unseeded"
    "test_iter": _count("a number of batches"),
    "test_interval": _count("an interval"),
    "snapshot": _count("an interval"),
    "display": _count("an interval"),
}
STEPVALUE = _count("an iteration")
# sigmoid's gamma is a slope: negative values make the rate fall, so any finite value is meaningful.
POLICY_LIMITS: dict[tuple[str, str], Limit] = {("sigmoid", "gamma"): Limit("a slope")}


def flag(key: str) -> str:
    """The command-line spelling of a setting: ``iter_size`` → ``--iter-size``."""
    return f"--{key.replace('_', '-')}"


@dataclass
class SolverOptions:
    """What a user may set; None means "the preset's value".

    Names are stored in Caffe's spelling whatever case they were given in (``adam`` → ``Adam``).
    ``cuda_graphs`` False turns off the engine's CUDA graph of a GPU iteration (:func:`write_cuda_graphs`).
    """

    type: str = "SGD"
    base_lr: float | None = None
    lr_policy: str | None = None
    gamma: float | None = None
    power: float | None = None
    stepsize: int | None = None
    stepvalue: list[int] = field(default_factory=list)
    momentum: float | None = None
    momentum2: float | None = None
    delta: float | None = None
    rms_decay: float | None = None
    weight_decay: float | None = None
    max_iter: int | None = None
    iter_size: int = 1
    random_seed: int | None = None
    test_iter: int | None = None
    test_interval: int | None = None
    snapshot: int | None = None
    display: int | None = None
    mode: str = "cpu"
    cuda_graphs: bool = True

    def __post_init__(self) -> None:
        self.type = choose(self.type, SOLVER_TYPES, "--type")
        if self.lr_policy is not None:
            self.lr_policy = choose(self.lr_policy, LR_POLICIES, "--lr-policy")
        self.mode = choose(self.mode, MODES, "--mode")

    @classmethod
    def from_flags(cls, type: str | None = "SGD", lr_policy: str | None = None,
                   stepvalue: list[object] | None = None, mode: str | None = "cpu",
                   cuda_graphs: bool = True, **numbers: object) -> SolverOptions:
        """Options from command-line flags (text, or None when absent), checked in full.

        Everything is refused here — a word that is no number, a value Caffe cannot use, a policy
        without its values — so a task fails before it creates a file or a run directory.
        """
        unknown = sorted(set(numbers) - set(LIMITS))
        if unknown:
            raise TypeError(f"not solver settings: {', '.join(unknown)}")
        given = {key: number(value, flag(key), LIMITS[key].kind) for key, value in numbers.items()}
        options = cls(type=type or "SGD", lr_policy=lr_policy or None, mode=mode or "cpu",
                      cuda_graphs=bool(cuda_graphs), stepvalue=[number(v, "--stepvalue", int) for v in stepvalue or []],
                      **{key: value for key, value in given.items() if value is not None})
        settle(options)
        return options


# The options that are no number of the recipe: names, the stepvalue list, and switches.
NOT_NUMBERS = ("type", "mode", "stepvalue", "lr_policy", "cuda_graphs")


def settle(options: SolverOptions) -> dict[str, object]:
    """The final settings: recipe < solver type's defaults < user's values; validated."""
    solver_type = choose(options.type, SOLVER_TYPES, "--type")
    settings = dict(LENET_RECIPE, **SOLVER_TYPES[solver_type])
    policy = choose(options.lr_policy or str(settings["lr_policy"]), LR_POLICIES, "--lr-policy")
    if policy != settings["lr_policy"]:
        # A new policy takes none of the old one's numbers: gamma 0.0001 means nothing to "step".
        settings = {k: v for k, v in settings.items() if k not in POLICY_FIELDS}
    settings["lr_policy"] = policy
    given = {k: v for k, v in vars(options).items() if v is not None and k not in NOT_NUMBERS}
    if options.stepvalue:
        given["stepvalue"] = list(options.stepvalue)
    settings.update(given)
    missing = [f for f in LR_POLICIES[policy] if f not in settings]
    if missing:
        flags = " and ".join(flag(f) for f in missing)
        raise ConfigError(f"--lr-policy {policy} needs {flags}")
    _check_values(solver_type, settings, options.mode)
    return settings


def _check_values(solver_type: str, s: dict, mode: str) -> None:
    _check_ranges(s)
    momentum = float(s.get("momentum", 0.0))
    if solver_type in NO_MOMENTUM and momentum != 0:
        raise ConfigError(f"--type {solver_type} cannot use momentum (got --momentum {momentum}); "
                          "set --momentum 0 or choose SGD, Nesterov, AdaDelta or Adam")
    if solver_type in NEEDS_MOMENTUM and momentum == 0:
        raise ConfigError(f"--type {solver_type} needs --momentum above 0 "
                          f"(Caffe's example uses {SOLVER_TYPES[solver_type]['momentum']})")
    if s["lr_policy"] == "multistep" and list(s["stepvalue"]) != sorted(set(s["stepvalue"])):
        raise ConfigError(f"--stepvalue must be increasing, got {s['stepvalue']}")
    choose(mode, MODES, "--mode")


def _check_ranges(s: dict) -> None:
    """Each number against what Caffe can use; Caffe itself would accept most and fail later."""
    for key, value in s.items():
        limit = POLICY_LIMITS.get((str(s["lr_policy"]), key)) or LIMITS.get(key)
        if limit is not None and not limit.admits(value):
            raise limit.refusal(flag(key), value)
    for step in s.get("stepvalue", ()):
        if not STEPVALUE.admits(step):
            raise STEPVALUE.refusal("--stepvalue", step)


def derive_test_iter(test_count: int, test_batch: int) -> int:
    """Enough test batches to see the whole test set once (Caffe's recipe: 10,000 / 100)."""
    return max(1, math.ceil(test_count / test_batch))


# Test batches may read a test set more than once (Caffe's data layers start over at its end), but a
# test of more than this many passes scores nothing new while it keeps the run at its test.
MAX_TEST_PASSES = 10


def check_test_iter(test_iter: int, test_batch: int, test_count: int, given: str,
                    error: type[Exception] = ConfigError) -> None:
    """Refuse a ``test_iter`` (``given``: where it was set, e.g. ``--test-iter 1000000``) that reads
    the ``test_count`` test records more than :data:`MAX_TEST_PASSES` times over."""
    if test_count > 0 and test_iter * test_batch > MAX_TEST_PASSES * test_count:
        whole = derive_test_iter(test_count, test_batch)
        raise error(f"{given}: {test_iter:,} test batches of {test_batch} read the {test_count:,} test records "
                    f"{test_iter * test_batch // test_count:,} times at every test, and the run would sit at its test; "
                    f"the whole test set is test_iter {whole}")


def build(caffe: Any, options: SolverOptions, net: str, snapshot_prefix: str, test_count: int,
          test_batch: int) -> Any:
    """A ``SolverParameter``; ``net`` and ``snapshot_prefix`` are written as given."""
    s = settle(options)
    pb = caffe.proto.caffe_pb2
    solver = pb.SolverParameter(net=net, snapshot_prefix=snapshot_prefix)
    if "test_iter" in s:
        check_test_iter(s["test_iter"], test_batch, test_count, f"--test-iter {s['test_iter']}")
    solver.test_iter.append(int(s.pop("test_iter", derive_test_iter(test_count, test_batch))))
    for key, value in s.items():
        if key == "stepvalue":
            solver.stepvalue.extend(int(v) for v in value)
        elif key == "iter_size" and value == 1:
            continue  # Caffe's default; omitted as Caffe's own files omit it
        else:
            setattr(solver, key, value)
    if options.type != "SGD":
        solver.type = options.type
    solver.solver_mode = pb.SolverParameter.GPU if options.mode == "gpu" else pb.SolverParameter.CPU
    write_cuda_graphs(solver, options)
    return solver


def write_cuda_graphs(solver: Any, options: SolverOptions) -> None:
    """``cuda_graphs: false`` in ``solver`` when ``options`` turn the graphs off (engine patch 0014's
    field). Left on, nothing is written: on is the engine's default, and a file without the field is
    one stock BVLC Caffe reads; a solver that already turns them off keeps that."""
    if not options.cuda_graphs:
        solver.cuda_graphs = False
