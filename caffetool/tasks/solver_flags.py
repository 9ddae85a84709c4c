"""The solver flags (``--base-lr``, ``--lr-policy``, ... 19 of them), declared once for ``train``,
``sweep`` and ``model.generate``.

Invoke reads a task's flags from its signature, so each flag would otherwise be spelled out in
every task that takes it. :func:`takes_solver_flags` adds them to a task's signature from
:data:`SOLVER_HELP` and hands them to the task's body as one dict, ``solver_flags``, ready for
``SolverOptions.from_flags``; ``--stepvalue`` repeats, so the task names it in ``iterable``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from caffetool.nets import solvers

SOLVER_HELP = {
    "type": f"solver type (any case): {', '.join(solvers.SOLVER_TYPES)}",
    "base_lr": "base learning rate", "lr_policy": f"lr policy: {', '.join(solvers.LR_POLICIES)}",
    "gamma": "lr policy gamma", "power": "lr policy power", "stepsize": "iterations per lr step",
    "stepvalue": "iteration of an lr drop (multistep; repeatable)", "momentum": "momentum (beta1 for Adam)",
    "momentum2": "Adam's beta2", "delta": "numerical stability term", "rms_decay": "RMSProp decay",
    "weight_decay": "L2 weight decay", "max_iter": "training iterations",
    "iter_size": "gradient accumulation: batches per update (default 1)",
    "random_seed": "seed for reproducible runs", "test_iter": "test batches per test (default: whole test set)",
    "test_interval": "iterations between tests", "snapshot": "iterations between snapshots",
    "display": "iterations between log lines", "mode": "cpu or gpu",
}
# Defaults where a flag has one (else None: Caffe's recipe or the solver type's own default).
DEFAULTS: dict[str, Any] = {"mode": "cpu"}
ANNOTATIONS: dict[str, Any] = {"stepvalue": "list[str] | None"}


def solver_help(without: tuple[str, ...] = ()) -> dict[str, str]:
    return {k: v for k, v in SOLVER_HELP.items() if k not in without}


def takes_solver_flags(without: tuple[str, ...] = (), after: str = "test_batch_size",
                       ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a task body (with a keyword-only ``solver_flags`` parameter) every solver flag but
    ``without``, placed after its parameter ``after``: Invoke gives short flags in signature order,
    so the place keeps each task's short flags what they have always been."""

    def decorate(body: Callable[..., Any]) -> Callable[..., Any]:
        names = [name for name in SOLVER_HELP if name not in without]
        own = [p for p in inspect.signature(body).parameters.values() if p.name != "solver_flags"]
        flags = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=DEFAULTS.get(name),
                                   annotation=ANNOTATIONS.get(name, "str | None")) for name in names]
        place = next(i for i, p in enumerate(own) if p.name == after) + 1

        @functools.wraps(body)
        def run(*args: Any, **kwargs: Any) -> Any:
            given = {name: kwargs.pop(name, DEFAULTS.get(name)) for name in names}
            return body(*args, **kwargs, solver_flags=given)

        run.__signature__ = inspect.Signature(own[:place] + flags + own[place:])  # type: ignore[attr-defined]
        return run

    return decorate
