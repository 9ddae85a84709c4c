"""``--search grid|random|optuna`` and ``--seed``: checked against the space before Ray starts, the
same seed drawing the same trials through Ray Tune's own search algorithms, and Optuna's TPE
learning from the results it is told (no cluster: Tune's searchers are plain objects)."""

from __future__ import annotations

import pytest

from caffetool.errors import ConfigError
from caffetool.sweep import search, searchspace

METRIC = "test/accuracy"


def _space(*params: str) -> searchspace.Space:
    return searchspace.build(list(params), {})


@pytest.mark.parametrize(("params", "given", "samples", "expected"), [
    (["base_lr=0.01,0.1"], None, 1, "grid"),
    (["base_lr=log:1e-4..1e-1"], None, 1, "random"),
    (["base_lr=log:1e-4..1e-1", "type=SGD,Adam"], "OPTUNA", 8, "optuna"),
    (["base_lr=0.01,0.1"], "grid", 3, "grid"),
])
def test_the_search_defaults_from_the_space_and_reads_any_case(params, given, samples, expected) -> None:
    assert search.settle(given, None, samples, _space(*params)) == (expected, None)


@pytest.mark.parametrize(("params", "given", "samples", "seed", "message"), [
    (["base_lr=log:1e-4..1e-1"], "grid", 1, None, "--search grid tries each value given, but --param "
     "base_lr=log:0.0001..0.1 is a range; list its values (NAME=V1,V2,...) or use --search random or optuna"),
    (["base_lr=log:1e-4..1e-1"], "bayes", 1, None, "unknown --search 'bayes'; choose one of: grid, random, optuna"),
    (["base_lr=log:1e-4..1e-1"], "optuna", 1, None, "--search optuna learns from earlier trials: give it a budget "
     "of --samples 2 or more"),
    (["base_lr=log:1e-4..1e-1"], "random", 1, "-1", "--seed"),
    (["base_lr=log:1e-4..1e-1"], "random", 1, "x", "--seed"),
])
def test_bad_searches_and_seeds_are_refused(params, given, samples, seed, message) -> None:
    with pytest.raises(ConfigError) as e:
        search.settle(given, seed, samples, _space(*params))
    assert str(e.value).startswith(message)


def _trainable(config: dict) -> None:
    """Never run: an experiment needs something to run for its trials to be drawn."""


def _suggest(alg, space: dict, count: int) -> list[dict]:
    alg.set_search_properties(METRIC, "max", space)
    return [alg.suggest(f"t{i}") for i in range(count)]


def test_a_seeded_random_search_draws_the_same_trials_again(tmp_path) -> None:
    from ray.tune.experiment import Experiment

    space = _space("base_lr=log:1e-4..1e-1", "momentum=uniform:0.5..0.95")

    def draws(seed: int) -> list[dict]:
        alg = search.algorithm("random", seed, 4, METRIC, "max")
        alg.add_configurations(Experiment("draws", run=_trainable, config=search.param_space("random", space),
                                          num_samples=4, storage_path=str(tmp_path)))
        return [alg.next_trial().config for _ in range(4)]

    first, again, other = draws(7), draws(7), draws(8)
    assert first == again and first != other
    assert all(1e-4 <= t["base_lr"] <= 1e-1 and 0.5 <= t["momentum"] <= 0.95 for t in first)


def test_optuna_chooses_among_grid_values_and_repeats_itself_with_a_seed() -> None:
    space = _space("base_lr=log:1e-4..1e-1", "type=SGD,Adam")
    tune_space = search.param_space("optuna", space)
    assert "grid_search" not in repr(tune_space)  # a choice for the model, not a cross product
    first = _suggest(search.algorithm("optuna", 3, 8, METRIC, "max"), tune_space, 3)
    again = _suggest(search.algorithm("optuna", 3, 8, METRIC, "max"), tune_space, 3)
    assert first == again and {t["type"] for t in first} <= {"SGD", "Adam"}
    assert all(1e-4 <= t["base_lr"] <= 1e-1 for t in first)


def test_past_its_random_start_tpe_picks_near_what_scored_best() -> None:
    """Results in which accuracy peaks at base_lr 0.01: the model's picks crowd around it."""
    space = search.param_space("optuna", _space("base_lr=log:1e-5..1e-0"))
    budget = 30
    alg = search.algorithm("optuna", 11, budget, METRIC, "max")
    alg.set_search_properties(METRIC, "max", space)
    import math

    picks = []
    for i in range(budget):
        config = alg.suggest(f"t{i}")
        picks.append(config["base_lr"])
        score = 1.0 - abs(math.log10(config["base_lr"]) + 2.0) / 5.0
        alg.on_trial_complete(f"t{i}", {METRIC: score, "iterations": 100})
    tpe = picks[search.startup_trials(budget):]
    near = sum(abs(math.log10(x) + 2.0) < 0.5 for x in tpe) / len(tpe)
    assert near > 0.5, tpe  # drawn at random over the five decades, a fifth would be


def test_the_random_start_is_a_third_of_a_small_budget_and_optunas_default_past_it() -> None:
    assert [search.startup_trials(n) for n in (2, 8, 12, 30, 100)] == [2, 2, 4, 10, 10]
    assert [search.made_by("optuna", 8, i) for i in range(3)] == ["optuna random start"] * 2 + ["optuna TPE"]
    assert search.made_by("random", 8, 5) == "random"
    assert search.describe("optuna", 7, 8) == "Optuna TPE (2 random first, seed 7)"
