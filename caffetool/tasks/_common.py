"""What every task shares: the single place where caffetool errors become ``Error: ...``.

A task body raises caffetool errors and never prints one; :func:`reported` turns them into Invoke's
``Exit`` (one ``Error: <message>`` line on stderr, exit code 1; 130 when interrupted; 141, silently,
when the output's reader has gone). The same
function reports the project's ``invoke.yaml`` problems while ``tasks.py`` loads, before Invoke
would show them as a traceback.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from contextlib import contextmanager
from typing import Any

from invoke import Context, Exit, Task
from invoke import task as invoke_task

from caffetool.choices import writable_folder
from caffetool.errors import CaffetoolError, ConfigError
from caffetool.tasks import settings


@contextmanager
def reported() -> Iterator[None]:
    """Run the block; a CaffetoolError leaves it as ``Error: <message>`` with exit code 1."""
    try:
        yield
    except CaffetoolError as e:
        raise Exit(f"Error: {e}", code=1) from None
    except KeyboardInterrupt:
        raise Exit("Error: interrupted; nothing half-done was kept", code=130) from None
    except BrokenPipeError:
        # The reader of the output went away (`caffetool ... | head`): stop quietly, as shell tools do,
        # and keep Python's exit-time flush from failing again on the closed pipe.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise Exit(code=128 + signal.SIGPIPE) from None


# Letters no option takes by itself: ``-h`` is help, and ``-`` is what Invoke picks for an option
# whose letters are all taken (shown as ``--=STRING``, and set by ``--=2``).
RESERVED_SHORT_FLAGS = frozenset({"h", "-"})


class CaffetoolTask(Task):
    """Invoke's ``Task``, with automatic short flags that are letters other than ``h``."""

    def arg_opts(self, name: str, default: str, taken_names: set[str]) -> dict[str, Any]:
        return super().arg_opts(name, default, taken_names | RESERVED_SHORT_FLAGS)


def task(*args: Any, **kwargs: Any) -> Any:
    """``invoke.task`` whose body runs under :func:`reported`, after the settings are checked.

    SIGTERM is turned into KeyboardInterrupt while a task runs, so the library's cleanup
    (``finally`` blocks removing staging folders) also runs when a task is killed.
    """

    def decorate(body: Callable[..., Any]) -> Any:
        positional = kwargs.get("positional") or []

        @functools.wraps(body)
        def run(c: Context, *a: Any, **kw: Any) -> Any:
            previous = signal.signal(signal.SIGTERM, _interrupt)
            try:
                with reported():
                    _no_help_as_a_value({name: kw.get(name) for name in positional})
                    check_settings(c)
                    return body(c, *a, **kw)
            finally:
                signal.signal(signal.SIGTERM, previous)

        return invoke_task(run, klass=CaffetoolTask, **kwargs)

    if args and callable(args[0]) and not kwargs:
        return decorate(args[0])
    return decorate


def _no_help_as_a_value(given: dict[str, Any]) -> None:
    """Invoke gives ``TASK --help`` to a task whose positional argument is still missing as that
    argument's value (``caffetool`` itself shows the help: :func:`caffetool.cli.help_first`)."""
    for name, value in given.items():
        if value == "--help":
            raise ConfigError(f"--help came where {name.upper()} goes; for the task's options run "
                              "`caffetool --help TASK` (or `invoke --help TASK`)")


def check_settings(c: Context) -> None:
    """caffetool's settings as merged by Invoke (``INVOKE_*`` variables included), checked by kind."""
    merged = {section: _plain(c.config[section]) for section in settings.SETTINGS if section in c.config}
    settings.check_settings(merged, settings.environment_origin)


def _plain(value: Any) -> Any:
    """Invoke's DataProxy as a dict, so that a section can be told from a scalar."""
    return dict(value.items()) if hasattr(value, "items") and not isinstance(value, Mapping) else value


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def pick(flag: Any, configured: Any) -> Any:
    """A flag wins over the configured value (invoke.yaml / INVOKE_* / defaults)."""
    return flag if flag not in (None, "") else configured


def chosen_folder(flag_value: Any, configured: Any, flag: str, setting: str) -> Path:
    """The writable folder a flag gives, else the setting's: a refusal names whichever set it."""
    if flag_value not in (None, ""):
        return writable_folder(flag_value, flag, setting)
    return writable_folder(configured, setting=setting)
