"""run_checked and last_lines against real child processes and the real caffe binary."""

from __future__ import annotations

import sys

import pytest

from caffetool.engine.locate import caffe_env
from caffetool.errors import BuildError, RunError
from caffetool.proc import exit_status, last_lines, run_checked


def sh(script: str) -> list[str]:
    return ["/bin/sh", "-c", script]


def test_a_command_that_works_returns_its_output(tmp_path):
    done = run_checked(sh("pwd; echo note >&2"), what="pwd", cwd=tmp_path, env={"PATH": "/bin:/usr/bin"})
    assert (done.stdout, done.stderr) == (f"{tmp_path}\n", "note\n")


def test_a_failure_raises_the_callers_class_with_the_last_lines():
    with pytest.raises(BuildError) as err:
        run_checked(sh("echo progress; for i in 1 2 3 4 5 6; do echo line $i >&2; done; exit 3"),
                    what="the step", error=BuildError)
    assert str(err.value) == "the step failed (exit 3):\nline 3\nline 4\nline 5\nline 6"


def test_one_line_of_reason_stays_on_the_same_line():
    with pytest.raises(RunError, match=r"^the step failed \(exit 1\): no such thing$"):
        run_checked(sh("echo no such thing >&2; exit 1"), what="the step")


def test_stdout_is_the_reason_when_stderr_is_empty():
    with pytest.raises(RunError, match=r"^pip failed \(exit 2\): ERROR: nothing matches$"):
        run_checked(sh("echo ERROR: nothing matches; exit 2"), what="pip")


def test_a_child_killed_by_a_signal_names_the_signal():
    with pytest.raises(RunError, match=r"^caffe failed \(killed by SIGBUS\): \(no output\)$"):
        run_checked(sh("kill -BUS $$"), what="caffe")


def test_a_missing_program_is_an_error_not_a_traceback(tmp_path):
    with pytest.raises(RunError, match=rf"^the tool could not start: {tmp_path}/nope: No such file or directory$"):
        run_checked([tmp_path / "nope"], what="the tool")


def test_a_timeout_is_an_error():
    with pytest.raises(RunError, match=r"^sleep did not finish within 0.2 s$"):
        run_checked(["sleep", "5"], what="sleep", timeout=0.2)


def test_caffes_fatal_line_is_preferred_to_its_stack_trace(engine, tmp_path):
    with pytest.raises(RunError) as err:
        run_checked([engine.caffe, "train", "-solver=missing.prototxt"], what="caffe train", cwd=tmp_path,
                    env=caffe_env())
    assert str(err.value).startswith("caffe train failed (killed by SIGABRT): io.cpp:")
    assert str(err.value).endswith(": Check failed: fd != -1 (-1 vs. -1) File not found: missing.prototxt")


def test_last_lines_of_plain_output():
    assert last_lines("a\n\nb\n  c  \n\n", 2) == "b\n  c"
    assert last_lines("   \n") == "(no output)"
    assert last_lines("Traceback (most recent call last):\n  File x\nValueError: bad", 1) == "ValueError: bad"


@pytest.mark.parametrize("code, text", [(0, "exit 0"), (1, "exit 1"), (-9, "killed by SIGKILL"),
                                        (-7, "killed by SIGBUS"), (-200, "killed by signal 200")])
def test_exit_status(code, text):
    assert exit_status(code) == text


def test_the_interpreter_itself_runs():
    assert run_checked([sys.executable, "-c", "print(6 * 7)"], what="python").stdout == "42\n"
