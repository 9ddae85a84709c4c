"""The one choice validator and the one number reader: canonical names whatever the case, and
refusals that name the flag, what was typed and what would have been accepted."""

from __future__ import annotations

import pytest

from caffetool.choices import (
    INT32_MAX,
    PORT,
    SECONDS,
    Limit,
    bounded,
    choose,
    count,
    input_file,
    number,
    output_file,
    shell_words,
    writable_folder,
)
from caffetool.errors import ConfigError
from caffetool.memory import estimator
from caffetool.nets import solvers


@pytest.mark.parametrize("typed,canonical", [("adam", "Adam"), ("ADAM", "Adam"), ("Adam", "Adam"),
                                             ("nesterov", "Nesterov"), ("rmsprop", "RMSProp"), (" sgd ", "SGD")])
def test_choose_ignores_case_and_returns_the_canonical_spelling(typed, canonical):
    assert choose(typed, solvers.SOLVER_TYPES, "--type") == canonical


def test_choose_names_the_flag_and_lists_the_options():
    with pytest.raises(ConfigError) as err:
        choose("adm", solvers.SOLVER_TYPES, "--type")
    assert str(err.value) == "unknown --type 'adm'; choose one of: SGD, Nesterov, AdaGrad, RMSProp, AdaDelta, Adam"


def test_solver_options_store_caffes_spelling():
    options = solvers.SolverOptions(type="adam", lr_policy="STEP", mode="GPU", gamma=0.1, stepsize=10)
    assert (options.type, options.lr_policy, options.mode) == ("Adam", "step", "gpu")
    assert solvers.settle(options)["lr_policy"] == "step"


def test_memory_options_store_canonical_names():
    options = estimator.Options(phase="TEST", mode="Gpu", solver="adagrad", dtype="FP16")
    assert (options.phase, options.mode, options.solver, options.dtype) == ("test", "gpu", "AdaGrad", "fp16")
    with pytest.raises(ConfigError, match=r"^unknown --dtype 'fp8'; choose one of: fp32, fp16$"):
        estimator.Options(dtype="fp8")


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


def test_choose_can_name_another_way_out():
    with pytest.raises(ConfigError) as err:
        choose("Voodoo2", ["K40", "M40"], "--gpu", also="or give --gpu-memory 12GiB")
    assert str(err.value) == "unknown --gpu 'Voodoo2'; choose one of: K40, M40 (or give --gpu-memory 12GiB)"


@pytest.mark.parametrize("value,expected", [("8080", 8080), (1, 1), ("65535", 65535)])
def test_bounded_reads_and_checks_a_range(value, expected):
    assert bounded(value, "--port", PORT) == expected
    assert bounded(None, "--port", PORT) is None


@pytest.mark.parametrize("value,message", [
    ("0", "--port must be a TCP port from 1 to 65535, got 0"),
    ("65536", "--port must be a TCP port from 1 to 65535, got 65536"),
    ("80.5", "--port '80.5' is not a whole number"),
    (str(10**400), f"--port '{10**400}' is not a finite number"),
])
def test_bounded_refuses_with_the_range_in_words(value, message):
    with pytest.raises(ConfigError) as err:
        bounded(value, "--port", PORT)
    assert str(err.value) == message


def test_limits_describe_their_range():
    assert SECONDS.describe() == "above 0"
    assert Limit("a penalty", 0).describe() == "of 0 or more"
    assert Limit("a decay", 0, 1, high_open=True).describe() == "from 0 to just below 1"
    assert Limit("a slope").describe() == "any finite number"
    assert Limit("a number of CPUs", 0, 1024, low_open=True).describe() == "above 0 and at most 1024"  # not "from 0"
    assert Limit("a share", 0, 1, low_open=True, high_open=True).describe() == "above 0 and below 1"


def test_shell_words_refuse_unbalanced_quotes():
    assert shell_words("--gpu all --name 'a b'", "--args") == ["--gpu", "all", "--name", "a b"]
    with pytest.raises(ConfigError, match=r"^--args '-k \"x': no closing quotation$"):
        shell_words('-k "x', "--args")


def test_a_folder_to_write_may_not_exist_yet(tmp_path):
    assert writable_folder(tmp_path / "a" / "b", "--out") == tmp_path / "a" / "b"
    assert not (tmp_path / "a").exists()  # checked, not made


def test_a_file_is_no_folder_and_a_folder_no_file(tmp_path):
    plain = tmp_path / "plain"
    plain.write_text("x")
    with pytest.raises(ConfigError, match=rf"^--out {plain}/sub: {plain} is a file, not a folder; "
                                          r"give a folder you can write to with --out$"):
        writable_folder(plain / "sub", "--out")
    with pytest.raises(ConfigError, match=rf"^data.dir {plain} is a file, not a folder; set data.dir in invoke.yaml "
                                          r"\(or INVOKE_DATA_DIR\) to a folder you can write to$"):
        writable_folder(plain, setting="data.dir")
    with pytest.raises(ConfigError, match=rf"^--plot {tmp_path} is a folder; give a file name$"):
        output_file(tmp_path, "--plot")
    assert output_file(tmp_path / "x.png", "--plot") == tmp_path / "x.png"
    with pytest.raises(ConfigError, match=rf"^--images {tmp_path} is a folder; give a file$"):
        input_file(tmp_path, "--images")
    with pytest.raises(ConfigError, match=rf"^--images {tmp_path / 'none'} does not exist$"):
        input_file(tmp_path / "none", "--images")
    assert input_file(plain, "--images") == plain
