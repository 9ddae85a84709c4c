"""What every task shares: the single place where caffetool errors become ``Error: ...``."""

from __future__ import annotations

import functools
import signal
from collections.abc import Callable
from typing import Any

from invoke import Exit
from invoke import task as invoke_task

from caffetool.errors import CaffetoolError


def task(*args: Any, **kwargs: Any) -> Any:
    """``invoke.task`` whose body reports a CaffetoolError as ``Error: <message>``, exit 1.

    SIGTERM is turned into KeyboardInterrupt while a task runs, so the library's cleanup
    (``finally`` blocks removing staging folders) also runs when a task is killed.
    """

    def decorate(body: Callable[..., Any]) -> Any:
        @functools.wraps(body)
        def run(*a: Any, **kw: Any) -> Any:
            previous = signal.signal(signal.SIGTERM, _interrupt)
            try:
                return body(*a, **kw)
            except CaffetoolError as e:
                raise Exit(f"Error: {e}", code=1) from None
            except KeyboardInterrupt:
                raise Exit("Error: interrupted; nothing half-done was kept", code=130) from None
            finally:
                signal.signal(signal.SIGTERM, previous)

        return invoke_task(run, **kwargs)

    if args and callable(args[0]) and not kwargs:
        return decorate(args[0])
    return decorate


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def pick(flag: Any, configured: Any) -> Any:
    """A flag wins over the configured value (invoke.yaml / INVOKE_* / defaults)."""
    return flag if flag not in (None, "") else configured
