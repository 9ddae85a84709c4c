"""The ``caffetool`` command: Invoke's own ``Program`` over the task collection, usable from any folder.

``invoke`` finds its tasks through a ``tasks.py`` in the current directory or above, so it only
works inside the checkout. ``caffetool`` carries the collection (:data:`caffetool.tasks.ns`) with
it, and reads the same settings, lowest first: caffetool's defaults < ``/etc/invoke.yaml`` <
``~/.invoke.yaml`` < an ``invoke.yaml`` (or ``.yml``/``.json``) in the current directory < ``INVOKE_*``
variables < flags. The current directory plays the part the checkout plays for ``invoke``: its
``invoke.yaml`` is the project's settings file, and relative paths (in flags and in settings such as
``data.dir: data``) mean paths under it. Limits: only the current directory is searched for that
file, not its parents; a runtime file (``caffetool -f FILE``) is read as Invoke reads it.
"""

from __future__ import annotations

import copy
import gc
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from invoke import Config, Program
from invoke.exceptions import ParseError

from caffetool import __version__
from caffetool.tasks import check_project_settings, check_runtime_settings, ns


class CaffetoolConfig(Config):
    """Invoke's ``Config``, which also runs where the home folder is not a folder."""

    def load_user(self, merge: bool = True) -> None:
        """``~/.invoke.yaml``, where there can be one: a home that is a file (a service's
        ``HOME=/dev/null``) holds none, and Invoke would stop on "Not a directory" reading under it."""
        if Path("~").expanduser().is_dir():
            super().load_user(merge)


class CaffetoolProgram(Program):
    """Invoke's ``Program`` whose project settings file is the one in the current directory."""

    def create_config(self) -> None:
        """Checks ``/etc/invoke.yaml``, ``~/.invoke.yaml`` and ``./invoke.yaml`` before Invoke reads
        them (it reads the first two as it starts), so that a broken one is one ``Error:`` line
        (exit 1) rather than Invoke's traceback, then loads ``./invoke.yaml``."""
        here = Path.cwd()
        check_project_settings(here)
        super().create_config()
        self.config.set_project_location(here)
        self.config.load_project()

    def update_config(self, merge: bool = True) -> None:
        """The runtime file (``-f FILE``, else ``INVOKE_RUNTIME_CONFIG``) checked before Invoke loads it."""
        given = self.args.config.value
        path = given if given is not None else os.environ.get("INVOKE_RUNTIME_CONFIG") or None
        if path is not None:
            check_runtime_settings(path, "-f" if given is not None else "INVOKE_RUNTIME_CONFIG")
        super().update_config(merge)

    def run(self, argv: list[str] | None = None, exit: bool = True) -> None:  # noqa: A002 - Invoke's name
        super().run(several_positional(optional_positional(help_first(sys.argv if argv is None else argv))), exit)

    def parse_core(self, argv: list[str] | None) -> None:
        """Invoke's own flags; a wrong one is reported as every caffetool error is."""
        with _as_error():
            super().parse_core(argv)

    def parse_tasks(self) -> None:
        """The task names and their flags; a wrong one is reported as every caffetool error is."""
        with _as_error():
            super().parse_tasks()


def help_first(argv: list[str]) -> list[str]:
    """``caffetool TASK ... --help`` as ``caffetool --help TASK``: Invoke would give ``--help`` to a
    task whose positional argument is missing (``evaluate``, ``demo.classify``) as that argument."""
    names = {name for main, aliases in ns.task_names.items() for name in (main, *aliases)}
    for i, token in enumerate(argv[1:], 1):
        if token in names:
            return [*argv[:i], "--help", token] if "--help" in argv[i + 1:] else argv
    return argv


# Tasks whose first argument may be given bare or left out: Invoke's positional arguments are all
# required, so ``caffetool export RUN`` is read as ``export --run RUN`` and ``export --deploy ...`` stays.
OPTIONAL_POSITIONAL = {"export": "--run"}


def optional_positional(argv: list[str]) -> list[str]:
    """``TASK VALUE`` as ``TASK FLAG VALUE`` for the tasks of :data:`OPTIONAL_POSITIONAL`: the first bare
    word after the task name that is not a flag's value."""
    for i, token in enumerate(argv[1:], 1):
        if token not in OPTIONAL_POSITIONAL:
            continue
        valued = _valued_flags(token)
        j = i + 1
        while j < len(argv):
            word = argv[j]
            if _is_task(word):
                return argv
            if not word.startswith("-"):
                return [*argv[:j], OPTIONAL_POSITIONAL[token], *argv[j:]]
            j += 2 if word in valued else 1
        return argv
    return argv


# Tasks whose positional argument takes several words (``caffetool track.import RUN RUN``): Invoke's
# takes one, so the words are joined with commas, as the task reads them.
SEVERAL_POSITIONAL = ("track.import", "demo.detect")


def several_positional(argv: list[str]) -> list[str]:
    """``TASK A B --flag V C`` as ``TASK A,B,C --flag V`` for the tasks of :data:`SEVERAL_POSITIONAL`;
    the words end at the next task name."""
    for i, token in enumerate(argv[1:], 1):
        if token not in SEVERAL_POSITIONAL:
            continue
        valued, words, flags, j = _valued_flags(token), [], [], i + 1
        while j < len(argv) and not _is_task(argv[j]):
            word = argv[j]
            if word.startswith("-"):
                flags += argv[j:j + 2] if word in valued else [word]
                j += 2 if word in valued else 1
            else:
                words.append(word)
                j += 1
        return argv if len(words) < 2 else [*argv[:i + 1], ",".join(words), *flags, *argv[j:]]
    return argv


def _valued_flags(task: str) -> set[str]:
    """The flags of ``task`` that take a value (``--runs-dir DIR``), long and short. Read from a copy of
    the task: Invoke's ``get_arguments`` takes each flag's help out of the task as it makes the flag,
    and ``--help TASK`` would show none."""
    copied = copy.copy(ns[task])
    copied.help = dict(copied.help)
    arguments = [arg for arg in copied.get_arguments() if arg.kind is not bool]
    return {f"--{name.replace('_', '-')}" if len(name) > 1 else f"-{name}" for arg in arguments for name in arg.names}


def _is_task(word: str) -> bool:
    return word in ns.task_names or any(word in aliases for aliases in ns.task_names.values())


@contextmanager
def _as_error() -> Iterator[None]:
    """Invoke's parse errors ("No idea what '--bogus' is!") as one ``Error: ...`` line, exit 1."""
    try:
        yield
    except ParseError as e:
        raise ParseError(f"Error: {e}", e.context) from None


program = CaffetoolProgram(name="caffetool", binary="caffetool", namespace=ns, version=__version__,
                           config_class=CaffetoolConfig)


def main() -> None:
    """Console entry point (``[project.scripts]``)."""
    try:
        program.run(sys.argv)
    except BrokenPipeError:
        # The reader went away (`caffetool --list | head`): stop quietly, as shell tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(128 + signal.SIGPIPE)
    finally:
        # Everything left goes with the process: the collections of Python's exit would otherwise
        # walk it all again (a second, after a tracked training has loaded MLflow's 2,000 modules).
        gc.freeze()
