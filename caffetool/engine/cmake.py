"""Configure, compile and stage-install Caffe with CMake.

This is the single build recipe: ``caffetool engine.install`` on a host and the Docker images run
the same steps (through the same task), with only :class:`BuildOptions` differing. CMake writes
Ninja's build files where ninja is installed (a build package: it starts each target's objects as
soon as their headers exist, where make waits for the libraries they link), else Makefiles. Each
step writes its full output to the build log; the terminal shows a progress bar fed by ninja's
``[12/43]`` or make's ``[ 42%]`` markers.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tqdm import tqdm

from caffetool.engine.recipe import BuildOptions, cmake_flags
from caffetool.errors import BuildError
from caffetool.proc import exit_status, last_lines

PERCENT = re.compile(r"^\[\s*(\d+)%\]")  # make's
STEPS = re.compile(r"^\[(\d+)/(\d+)\]")  # ninja's


def configure(tree: Path, build: Path, options: BuildOptions, prefix: Path, log: Path,
              mkl_root: Path | None = None, launcher: list[str] | None = None) -> list[str]:
    """Run CMake; return the flags used. Refuses a CUDA build that CMake silently made CPU-only.
    ``launcher``: the flags that compile through ccache (:mod:`caffetool.engine.ccache`)."""
    flags = cmake_flags(options, sys.executable, prefix, mkl_root) + (launcher or [])
    build.mkdir(parents=True, exist_ok=True)
    output: list[str] = []
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    run_step(["cmake", *generator, str(tree), *flags], build, log, "CMake configuration", on_line=output.append)
    if options.cuda and not any(line.startswith("-- CUDA detected:") for line in output):
        # Caffe's Cuda.cmake falls back to a CPU build when it cannot find CUDA.
        raise BuildError(
            f"CMake did not find CUDA for a --cuda build (see {log}); put nvcc on PATH or set "
            "CUDA_TOOLKIT_ROOT_DIR through --cmake-arg"
        )
    return flags


def compile_and_stage(build: Path, jobs: int, destdir: Path, log: Path, progress: bool,
                      env: dict[str, str] | None = None) -> None:
    """Compile on ``jobs`` cores with a progress bar, then install into the staging root ``destdir``
    (``env``: the compilers' environment, default this process's)."""
    # disable=None: no bar unless stderr is a terminal (CI logs stay readable)
    bar = tqdm(total=100, unit="%", desc="building Caffe", disable=None if progress else True, leave=False)
    try:
        run_step(build_command(build, jobs), build, log, "compilation", on_line=lambda line: _advance(bar, line),
                 env=env)
    finally:
        bar.close()
    staged = {**(os.environ if env is None else env), "DESTDIR": str(destdir)}
    run_step(build_command(build, jobs, "install"), build, log, "the staged install", env=staged)


def build_command(build: Path, jobs: int, target: str | None = None) -> list[str]:
    """The command that builds ``target`` (default: everything) in ``build``, with the tool its build
    files are for: ninja where CMake wrote build.ninja, else make."""
    tool = ["ninja", f"-j{jobs}"] if (build / "build.ninja").is_file() else ["make", f"-j{jobs}"]
    return [*tool, *([target] if target else [])]


def _advance(bar: tqdm, line: str) -> None:
    if match := PERCENT.match(line):
        done = int(match.group(1))
    elif match := STEPS.match(line):
        done = 100 * int(match.group(1)) // max(1, int(match.group(2)))
    else:
        return
    if done > bar.n:
        bar.update(done - bar.n)


def run_step(argv: list[str], cwd: Path, log: Path, what: str, on_line: Callable[[str], None] | None = None,
             env: dict[str, str] | None = None) -> None:
    """Run one build step with its output appended to ``log``; raise :class:`BuildError` if it fails."""
    env = {**(os.environ if env is None else env), "LC_ALL": "C"}
    with open(log, "a") as out:
        out.write(f"$ (cd {cwd} && {' '.join(argv)})\n")
        out.flush()
        # A session of its own, so an interrupt can stop make *and* every compiler it started.
        process = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            errors="replace", start_new_session=True,
        )
        assert process.stdout is not None
        try:
            for line in process.stdout:
                out.write(line)
                if on_line:
                    on_line(line)
        finally:
            # An interrupt must not leave compilers writing into a folder being deleted.
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
            code = process.wait()
            _reap_group(process.pid)
    if code != 0:
        raise BuildError(f"{what} failed ({exit_status(code)}):\n{_error_lines(log)}\nFull log: {log}")


def _reap_group(pgid: int, grace: float = 10.0) -> None:
    """Wait until no process of the group is left (compilers finishing a file), then kill."""
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _error_lines(log: Path, limit: int = 8) -> str:
    """The log's last lines that mention an error (a compiler's, CMake's), else its last lines."""
    text = log.read_text(errors="replace")
    errors = [line for line in text.splitlines() if re.search(r"error|Error|CMake Error", line)]
    return last_lines("\n".join(errors) or text, limit)
