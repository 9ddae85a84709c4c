"""The one choice validator and the one number reader: canonical names whatever the case, and
refusals that name the flag, what was typed and what would have been accepted."""

from __future__ import annotations

import pytest

from caffetool.choices import INT32_MAX, choose, count, number
from caffetool.errors import ConfigError
from caffetool.memory import estimate as est
from caffetool.nets import solver


@pytest.mark.parametrize("typed,canonical", [("adam", "Adam"), ("ADAM", "Adam"), ("Adam", "Adam"),
                                             ("nesterov", "Nesterov"), ("rmsprop", "RMSProp"), (" sgd ", "SGD")])
def test_choose_ignores_case_and_returns_the_canonical_spelling(typed, canonical):
    assert choose(typed, solver.SOLVER_TYPES, "--solver") == canonical


def test_choose_names_the_flag_and_lists_the_options():
    with pytest.raises(ConfigError) as err:
        choose("adm", solver.SOLVER_TYPES, "--solver")
    assert str(err.value) == "unknown --solver 'adm'; choose one of: SGD, Nesterov, AdaGrad, RMSProp, AdaDelta, Adam"


def test_solver_options_store_caffes_spelling():
    options = solver.SolverOptions(type="adam", lr_policy="STEP", mode="GPU", gamma=0.1, stepsize=10)
    assert (options.type, options.lr_policy, options.mode) == ("Adam", "step", "gpu")
    assert solver.settle(options)["lr_policy"] == "step"


def test_memory_options_store_canonical_names():
    options = est.Options(phase="TEST", mode="Gpu", solver="adagrad", dtype="FP16")
    assert (options.phase, options.mode, options.solver, options.dtype) == ("test", "gpu", "AdaGrad", "fp16")
    with pytest.raises(ConfigError, match=r"^unknown --dtype 'fp8'; choose one of: fp32, fp16$"):
        est.Options(dtype="fp8")


@pytest.mark.parametrize("value,kind,expected", [("0.01", float, 0.01), ("1e-4", float, 1e-4), ("500", int, 500),
                                                 ("1e3", int, 1000), (7, int, 7), (None, int, None), ("", float, None)])
def test_number_reads_text_and_numbers(value, kind, expected):
    assert number(value, "--x", kind) == expected


@pytest.mark.parametrize("value,kind,message", [
    ("abc", float, "--base-lr 'abc' is not a number"),
    ("1.5", int, "--base-lr '1.5' is not a whole number"),
    (1.5, int, "--base-lr 1.5 is not a whole number"),
    ("nan", float, "--base-lr 'nan' is not a finite number"),
    ("-inf", float, "--base-lr '-inf' is not a finite number"),
    (True, float, "--base-lr True is not a number"),
])
def test_number_refuses_what_is_not_one(value, kind, message):
    with pytest.raises(ConfigError) as err:
        number(value, "--base-lr", kind)
    assert str(err.value) == message


def test_count_is_a_whole_number_caffe_can_hold():
    assert count("64", "--batch-size") == 64 and count(None, "--batch-size") is None
    assert count(str(INT32_MAX), "--batch-size") == INT32_MAX
    with pytest.raises(ConfigError, match=r"^--batch-size must be at least 1, got -5$"):
        count("-5", "--batch-size")
    with pytest.raises(ConfigError, match=r"^--batch-size must be at most 2147483647, got 2147483648$"):
        count(str(2**31), "--batch-size")
