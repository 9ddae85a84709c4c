"""Running a tool as a child process and turning its failure into a caffetool error.

:func:`run_checked` is for commands that run to completion with their output captured (``caffe
test``, ``pip``, ``ldd``, the validation child); a failure becomes the caller's error class with
one message shape: ``<what> failed (exit 1): <why>``. :func:`last_lines` is the one way to say
*why*: the glog ``F`` line when Caffe aborted on a check (the cause, however much followed it),
otherwise the last few lines of output. Long-running children watched line by line (``caffe
train``, ``make``) are not run here; they use :func:`last_lines` and :func:`exit_status` for their
messages. :func:`parent_death_signal` is the one way a child ends with its parent (Linux's
``PR_SET_PDEATHSIG``): Caffe under ``train``, the demo's server workers.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from caffetool import glog
from caffetool.errors import CaffetoolError, RunError

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def parent_death_signal(signum: int) -> Callable[[], None]:
    """A call that has the kernel send ``signum`` to the calling process when its parent dies.

    ``prctl`` is looked up now and only called later, so the call is safe in a ``preexec_fn``
    (between fork and exec nothing may be loaded). A parent that died before the call sends
    nothing: the caller compares ``os.getppid()`` with the parent it expected afterwards.
    """
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    return lambda: prctl(PR_SET_PDEATHSIG, int(signum))


def last_lines(text: str, n: int = 4) -> str:
    """What a failed tool's output says about its failure, in at most ``n`` lines.

    Caffe's ``F`` line is preferred to the output's tail, which after an abort is glog's stack
    trace and says nothing a user can act on.
    """
    if (line := glog.fatal(text)) is not None:
        return line.located()
    tail = [line.rstrip() for line in text.strip().splitlines() if line.strip()][-n:]
    return "\n".join(tail) if tail else "(no output)"


def exit_status(code: int) -> str:
    """``exit 1``, or ``killed by SIGBUS`` for a child a signal ended (negative ``returncode``)."""
    if code >= 0:
        return f"exit {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


def failure(what: str, code: int, output: str, n: int = 4) -> str:
    """``<what> failed (exit 1): <why>``, the why on lines of its own when it has several."""
    why = last_lines(output, n)
    separator = "\n" if "\n" in why else " "
    return f"{what} failed ({exit_status(code)}):{separator}{why}"


def run_checked(cmd: Sequence[str | os.PathLike[str]], *, what: str, error: type[CaffetoolError] = RunError,
                env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
                timeout: float | None = None, lines: int = 4) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` to completion with its output captured as text; raise ``error`` if it fails.

    ``what`` names the command in the message (``"caffe test"``). A command that cannot start
    (missing, not executable) or outlives ``timeout`` seconds raises ``error`` too, so a caller
    needs no ``try`` of its own. The failure's reason comes from stderr, or stdout when stderr is
    empty (pip and apt write their errors to either).
    """
    argv = [os.fspath(part) for part in cmd]
    try:
        done = subprocess.run(argv, cwd=cwd, env=None if env is None else dict(env), capture_output=True,
                              text=True, errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired:
        raise error(f"{what} did not finish within {timeout:g} s") from None
    except OSError as e:
        raise error(f"{what} could not start: {argv[0]}: {e.strerror}") from None
    if done.returncode != 0:
        raise error(failure(what, done.returncode, done.stderr if done.stderr.strip() else done.stdout, lines))
    return done
