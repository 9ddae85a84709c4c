"""``--param`` and ``--metric``: read and checked as the train flags are, refused whole before Ray starts."""

from __future__ import annotations

import pytest

from caffetool.errors import ConfigError
from caffetool.sweep import searchspace


def test_grids_and_ranges_are_read_as_their_flags_read_them() -> None:
    grid = searchspace.parse_param("base_lr=0.001,0.01")
    assert grid == searchspace.Param("base_lr", "grid", (0.001, 0.01))
    assert searchspace.parse_param("type=sgd,ADAM").values == ("SGD", "Adam")  # Caffe's spelling, as --type
    assert searchspace.parse_param("batch-size=32,64").values == (32, 64)
    log = searchspace.parse_param("base_lr=log:1e-4..1e-1")
    assert (log.kind, log.low, log.high) == ("log", 1e-4, 0.1)
    assert searchspace.parse_param("max_iter=int:100..300").ends() == (100, 300)


def test_search_space_draws_inside_the_ranges() -> None:
    from ray.tune.search.sample import Categorical, Float, Integer

    built = searchspace.build(["base_lr=log:0.001..0.1", "max_iter=int:100..300", "type=SGD,Nesterov"], {})
    tune_space = built.tune()
    assert isinstance(tune_space["base_lr"], Float)
    assert isinstance(tune_space["max_iter"], Integer)
    assert tune_space["type"] == {"grid_search": ["SGD", "Nesterov"]}
    draws = tune_space["max_iter"].sample(size=200)
    assert min(draws) >= 100 and max(draws) <= 300 and max(draws) > 250  # the high end is inclusive
    lrs = tune_space["base_lr"].sample(size=200)
    assert all(0.001 <= x <= 0.1 for x in lrs)
    assert not isinstance(tune_space["base_lr"], Categorical) and built.sampled


@pytest.mark.parametrize(("params", "fixed", "message"), [
    (["foo=1"], {}, "--param foo: not a setting a sweep can vary; choose one of: "
     + ", ".join(searchspace.SWEEPABLE)),
    (["base_lr=0,0.1"], {}, "--param base_lr=0,0.1: --base-lr must be a learning rate above 0, got 0.0"),
    (["base_lr=log:0.1..0.01"], {}, "--param base_lr=log:0.1..0.01: the range's low end must be below its high end"),
    (["weight_decay=log:0..0.1"], {}, "--param weight_decay=log:0..0.1: a log range must start above 0"),
    (["base_lr=exp:1..2"], {}, "--param base_lr=exp:1..2: unknown range 'exp'; use log:LO..HI, uniform:LO..HI, "
     "int:LO..HI"),
    (["base_lr=int:1..2"], {}, "--param base_lr=int:... : base_lr is not a whole number; use uniform: or log:"),
    (["max_iter=100,1.5"], {}, "--param max_iter=100,1.5: --max-iter '1.5' is not a whole number"),
    (["type=SGD,Bogus"], {}, "--param type=SGD,Bogus: unknown --type 'Bogus'; choose one of: SGD, Nesterov, "
     "AdaGrad, RMSProp, AdaDelta, Adam"),
    (["type=log:1..2"], {}, "--param type takes names (SGD, Nesterov, AdaGrad, RMSProp, AdaDelta, Adam), not a range"),
    (["momentum=0.5,1.0"], {}, "--param momentum=0.5,1.0: --momentum must be a decay factor from 0 to just below 1, "
     "got 1.0"),
    (["base_lr=0.1,0.1"], {}, "--param base_lr=0.1,0.1: a value is given twice"),
    (["base_lr=0.1", "base_lr=0.2"], {}, "--param base_lr is given more than once; give its values in one --param"),
    (["max_iter=100,200"], {"max_iter": "300"}, "--max-iter is both a fixed flag and a --param; give it one way"),
    (["type=SGD,Adam"], {"momentum": "0"}, "the trial with type=Adam would be refused: --type Adam needs --momentum "
     "above 0 (Caffe's example uses 0.9)"),
    (["lr_policy=fixed,step"], {}, "the trial with lr_policy=step would be refused: --lr-policy step needs --gamma "
     "and --stepsize"),
    (["gamma=uniform:-0.1..0.1"], {"lr_policy": "sigmoid", "stepsize": "10"}, None),
    (["gamma=uniform:-0.1..0.1"], {"lr_policy": "inv"}, "the trial with gamma=-0.1 would be refused: --gamma must "
     "be an lr factor above 0, got -0.1"),
    ([], {}, "give at least one --param NAME=V1,V2,... (or NAME=log:LO..HI) to sweep over"),
    (["nonsense"], {}, "--param 'nonsense': write NAME=V1,V2,... or NAME=log:LO..HI, uniform:LO..HI, int:LO..HI"),
])
def test_invalid_names_ranges_and_combinations_are_refused(params: list[str], fixed: dict, message: str | None) -> None:
    if message is None:
        searchspace.build(params, fixed)  # a negative slope is meaningful for sigmoid: accepted
        return
    with pytest.raises(ConfigError) as refused:
        searchspace.build(params, fixed)
    assert str(refused.value) == message


@pytest.mark.parametrize(("text", "net", "output"), [
    ("test/accuracy", 0, "accuracy"), ("test1/l2_error", 1, "l2_error"), ("train/loss", -1, "loss"),
    ("train/smoothed_loss", -1, "smoothed_loss"),
])
def test_metrics_name_a_net_and_an_output(text: str, net: int, output: str) -> None:
    assert searchspace.parse_metric(text) == searchspace.Metric(text, net, output)


@pytest.mark.parametrize(("text", "message"), [
    ("accuracy", "--metric 'accuracy': write test/OUTPUT (test net #0), testK/OUTPUT or train/OUTPUT, e.g. "
     "test/accuracy or train/loss"),
    ("train2/loss", "--metric 'train2/loss': there is one train net; write train/loss"),
])
def test_bad_metrics_are_refused(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        searchspace.parse_metric(text)
    assert str(refused.value) == message


def test_a_trial_gets_its_values_over_the_fixed_flags() -> None:
    fixed = {"max_iter": "300", "test_iter": "5", "batch_size": "32"}
    options = searchspace.options(fixed, {"base_lr": 0.05, "type": "Adam"})
    assert (options.base_lr, options.type, options.max_iter, options.test_iter) == (0.05, "Adam", 300, 5)
    assert searchspace.batches(fixed, {"test_batch_size": 50}) == (32, 50)
    assert searchspace.batches({}, {}) == (None, None)
