"""The solver flags (``--base-lr``, ``--lr-policy``, ... ``--no-cuda-graphs``), declared once
for ``train``, ``sweep`` and ``model.generate``.

Invoke reads a task's flags from its signature, so each flag would otherwise be spelled out in
every task that takes it. :func:`takes_solver_flags` adds them to a task's signature from
:data:`SOLVER_HELP` and hands them to the task's body as one dict, ``solver_flags``, ready for
``SolverOptions.from_flags``; ``--stepvalue`` repeats, so the task names it in ``iterable``.
``cuda_graphs`` is a switch (Invoke makes ``--no-cuda-graphs`` of a bool that defaults to True).
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
    "cuda_graphs": "CUDA graphs on a GPU (default on): --no-cuda-graphs runs every call of an iteration as it "
                   "comes, as stock Caffe does (no effect on the CPU)",
}
# Defaults where a flag has one (else None: Caffe's recipe or the solver type's own default).
DEFAULTS: dict[str, Any] = {"mode": "cpu", "cuda_graphs": True}
ANNOTATIONS: dict[str, Any] = {"stepvalue": "list[str] | None", "cuda_graphs": bool}
# Flags placed at the end of a task's signature: Invoke gives short flags in signature order, so a
# flag added among the others would take the short flag of one after it.
LAST = ("cuda_graphs",)


def solver_help(without: tuple[str, ...] = ()) -> dict[str, str]:
    return {k: v for k, v in SOLVER_HELP.items() if k not in without}


def given(flags: dict[str, Any]) -> dict[str, Any]:
    """The solver flags of ``flags`` that the command line set: neither absent nor at their default."""
    return {k: v for k, v in flags.items() if v not in (None, "", []) and not (k in DEFAULTS and v == DEFAULTS[k])}


def takes_solver_flags(without: tuple[str, ...] = (), after: str = "test_batch_size",
                       ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a task body (with a keyword-only ``solver_flags`` parameter) every solver flag but
    ``without``, placed after its parameter ``after`` (those in :data:`LAST` at the end): Invoke gives
    short flags in signature order, so the place keeps each task's short flags what they have always been."""

    def decorate(body: Callable[..., Any]) -> Callable[..., Any]:
        names = [name for name in SOLVER_HELP if name not in without]
        own = [p for p in inspect.signature(body).parameters.values() if p.name != "solver_flags"]
        flags = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=DEFAULTS.get(name),
                                   annotation=ANNOTATIONS.get(name, "str | None")) for name in names]
        middle = [p for p in flags if p.name not in LAST]
        last = [p for p in flags if p.name in LAST]
        place = next(i for i, p in enumerate(own) if p.name == after) + 1

        @functools.wraps(body)
        def run(*args: Any, **kwargs: Any) -> Any:
            values = {name: kwargs.pop(name, DEFAULTS.get(name)) for name in names}
            return body(*args, **kwargs, solver_flags=values)

        run.__signature__ = inspect.Signature(own[:place] + middle + own[place:] + last)  # type: ignore[attr-defined]
        return run

    return decorate
