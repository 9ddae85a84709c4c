"""How a sweep chooses its trials: ``--search grid``, ``random`` or ``optuna``, and ``--seed``.

* ``grid``: every combination of the ``--param`` values, each once (``--samples`` repeats the grid);
  ranges are refused, since a grid has no way to draw from them.
* ``random``: grid values crossed, ranges drawn (``--samples`` draws per grid point), as Ray Tune's
  ``BasicVariantGenerator`` does; the default when any ``--param`` is a range.
* ``optuna``: Optuna's TPE sampler through Ray Tune's ``OptunaSearch`` (Bergstra et al., "Algorithms
  for Hyper-Parameter Optimization", NeurIPS 2011): ``--samples`` is the budget, the whole number of
  trials; grid values become one more choice for the model rather than being crossed. The first
  trials are drawn at random to give the model something to fit (:func:`startup_trials`), and each
  later one is the model's pick given every result so far; trials a scheduler (ASHA) stopped count
  with their last figure.

``--seed N`` seeds the draws (``BasicVariantGenerator``'s ``random_state``, the TPE sampler's
``seed``): the same sweep draws the same trials again. A TPE pick past the random start also
depends on the results it has seen, so it repeats only when they do: one trial at a time
(``--max-concurrent 1``) and trainings that repeat their figures. ``--seed`` is the search's alone:
Caffe's own ``random_seed`` (``--random-seed``) stays a training setting.
"""

from __future__ import annotations

from typing import Any

from caffetool.choices import Limit, bounded, choose
from caffetool.errors import ConfigError
from caffetool.sweep import searchspace

SEARCHES = ("grid", "random", "optuna")
SEED = Limit("a seed", 0, 2**32 - 1, kind=int)
OPTUNA_STARTUP = 10  # Optuna's own default n_startup_trials, for budgets large enough to afford it
STARTUP_SHARE = 3  # otherwise a third of the budget (at least 2) is drawn before TPE decides


def settle(search: str | None, seed: Any, samples: int, space: searchspace.Space) -> tuple[str, int | None]:
    """``--search`` (its default from the space) and ``--seed``, checked against the space."""
    chosen = choose(search or ("random" if space.sampled else "grid"), SEARCHES, "--search")
    ranges = [p for p in space.params if p.kind != "grid"]
    if chosen == "grid" and ranges:
        p = ranges[0]
        raise ConfigError(f"--search grid tries each value given, but --param {p.name}={p.kind}:{p.low:g}..{p.high:g} "
                          "is a range; list its values (NAME=V1,V2,...) or use --search random or optuna")
    if chosen == "optuna" and samples < 2:
        raise ConfigError("--search optuna learns from earlier trials: give it a budget of --samples 2 or more")
    return chosen, (None if seed in (None, "") else int(bounded(seed, "--seed", SEED)))


def startup_trials(samples: int) -> int:
    """Trials Optuna draws at random before TPE picks: its default of 10, or a third of a smaller
    budget (at least 2), so that an 8-trial sweep has TPE choose most of its trials."""
    return min(OPTUNA_STARTUP, max(2, samples // STARTUP_SHARE))


def trials(search: str, samples: int, space: searchspace.Space) -> int:
    """How many trials the sweep has."""
    return samples if search == "optuna" else space.grid_size() * samples


def algorithm(search: str, seed: int | None, samples: int, metric: str, mode: str) -> Any:
    """Ray Tune's search algorithm for ``search`` (the grid's and random's is Tune's default one, seeded)."""
    if search == "optuna":
        import optuna  # noqa: PLC0415 - only an Optuna sweep pays for the import

        from caffetool.sweep.tpe import MetricRowsOnly  # noqa: PLC0415

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup_trials(samples))
        return MetricRowsOnly(metric=metric, mode=mode, sampler=sampler)
    from ray.tune.search import BasicVariantGenerator  # noqa: PLC0415

    return BasicVariantGenerator(random_state=seed)


def param_space(search: str, space: searchspace.Space) -> dict[str, Any]:
    """The space as Tune's ``param_space``: grids crossed, except for Optuna, which chooses among them."""
    return space.tune(crossed=search != "optuna")


def describe(search: str, seed: int | None, samples: int) -> str:
    """The search in a few words, for the sweep's first line and its results."""
    seeded = f", seed {seed}" if seed is not None else ""
    if search == "optuna":
        return f"Optuna TPE ({startup_trials(samples)} random first{seeded})"
    return f"{search}{seeded}"


def made_by(search: str, samples: int, index: int) -> str:
    """Which search made the trial numbered ``index`` (Tune numbers trials as it creates them)."""
    if search == "optuna":
        return "optuna random start" if index < startup_trials(samples) else "optuna TPE"
    return search
