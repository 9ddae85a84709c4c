"""Solver presets, types and learning-rate policies declared as data, and the solver builder.

The default preset is the published LeNet recipe (examples/mnist/lenet_solver.prototxt). Each
solver type carries the defaults of Caffe's own example for it (lenet_solver_adam.prototxt and
friends); each lr policy names the fields Caffe needs for it. Invalid combinations are refused
here, before anything is written, with the option and the valid choices in the message.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

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


@dataclass
class SolverOptions:
    """What a user may set; None means "the preset's value"."""

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


def settle(options: SolverOptions) -> dict[str, object]:
    """The final settings: recipe < solver type's defaults < user's values; validated."""
    if options.type not in SOLVER_TYPES:
        raise ConfigError(f"unknown --solver {options.type!r}; choose one of: {', '.join(SOLVER_TYPES)}")
    settings = dict(LENET_RECIPE, **SOLVER_TYPES[options.type])
    policy = options.lr_policy or str(settings["lr_policy"])
    if policy not in LR_POLICIES:
        raise ConfigError(f"unknown --lr-policy {policy!r}; choose one of: {', '.join(LR_POLICIES)}")
    if policy != settings["lr_policy"]:
        # A new policy takes none of the old one's numbers: gamma 0.0001 means nothing to "step".
        settings = {k: v for k, v in settings.items() if k not in POLICY_FIELDS}
    settings["lr_policy"] = policy
    given = {k: v for k, v in vars(options).items()
             if v is not None and k not in ("type", "mode", "stepvalue") and k != "lr_policy"}
    if options.stepvalue:
        given["stepvalue"] = list(options.stepvalue)
    settings.update(given)
    missing = [f for f in LR_POLICIES[policy] if f not in settings]
    if missing:
        flags = " and ".join(f"--{f}" for f in missing)
        raise ConfigError(f"--lr-policy {policy} needs {flags}")
    _check_values(options.type, settings, options.mode)
    return settings


def _check_values(solver_type: str, s: dict, mode: str) -> None:
    positive = {"base_lr": "a learning rate", "max_iter": "an iteration count", "iter_size": "a count",
                "display": "an interval", "test_interval": "an interval", "snapshot": "an interval"}
    for key, what in positive.items():
        if key in s and not (isinstance(s[key], (int, float)) and s[key] > 0 and math.isfinite(s[key])):
            raise ConfigError(f"--{key.replace('_', '-')} must be {what} above 0, got {s[key]}")
    momentum = float(s.get("momentum", 0.0))
    if solver_type in NO_MOMENTUM and momentum != 0:
        raise ConfigError(f"--solver {solver_type} cannot use momentum (got --momentum {momentum}); "
                          "set --momentum 0 or choose SGD, Nesterov, AdaDelta or Adam")
    if solver_type in NEEDS_MOMENTUM and momentum == 0:
        raise ConfigError(f"--solver {solver_type} needs --momentum above 0 "
                          f"(Caffe's example uses {SOLVER_TYPES[solver_type]['momentum']})")
    if s["lr_policy"] == "multistep" and list(s["stepvalue"]) != sorted(set(s["stepvalue"])):
        raise ConfigError(f"--stepvalue must be increasing, got {s['stepvalue']}")
    if mode not in ("cpu", "gpu"):
        raise ConfigError(f"unknown --mode {mode!r}; choose one of: cpu, gpu")


def derive_test_iter(test_count: int, test_batch: int) -> int:
    """Enough test batches to see the whole test set once (Caffe's recipe: 10,000 / 100)."""
    return max(1, math.ceil(test_count / test_batch))


def build(caffe, options: SolverOptions, net: str, snapshot_prefix: str, test_count: int, test_batch: int):
    """A ``SolverParameter``; ``net`` and ``snapshot_prefix`` are written as given."""
    s = settle(options)
    pb = caffe.proto.caffe_pb2
    solver = pb.SolverParameter(net=net, snapshot_prefix=snapshot_prefix)
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
    return solver
