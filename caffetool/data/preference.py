"""Which data set a job uses when none is named: the first of a preference list that can be had.

MNIST is the data set Caffe's LeNet recipe was published on, so it comes first; where its mirrors
cannot be reached (offline machines, retired hosts) the choice says so and moves on to
Fashion-MNIST, which Debian packages in the same IDX format, so the rest of a job is unchanged.
Limits: each data set's sources are given :data:`PROBE_TIMEOUT` seconds of silence, not the
``data.fetch`` default, so an unreachable mirror costs little.

:class:`Prefetch` makes that choice on a thread of its own, so a job that also installs the engine
(the quickstart) has its data by the time the compile ends instead of after it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from caffetool.data import fetch, layout, registry
from caffetool.errors import SourceError

PREFERRED: tuple[str, ...] = ("mnist", "fashion-mnist")
PROBE_TIMEOUT = 10.0


def first_available(data_dir: str | Path | None, say: Callable[[str], None] = print,
                    preferred: tuple[str, ...] = PREFERRED, progress: bool = True) -> layout.Dataset:
    """The first of ``preferred`` that is present or can be fetched; says why it moved on."""
    failures: list[SourceError] = []
    for name in preferred:
        spec = registry.get(name)
        try:
            return fetch.fetch(spec, data_dir, timeout=PROBE_TIMEOUT, progress=progress, say=say).dataset
        except SourceError as e:
            first = f"{e.attempts[0][0]}: {e.attempts[0][1]}" if e.attempts else str(e)
            say(f"{spec.title}: no source reachable ({first}); trying the next data set")
            failures.append(e)
    raise SourceError("no data set could be obtained:\n" + "\n".join(map(str, failures)),
                      attempts=[a for e in failures for a in e.attempts])


class Prefetch:
    """:func:`first_available` on a thread of its own, started at once.

    Its messages are kept and said by :meth:`dataset`, after whatever the caller printed meanwhile
    (an engine's compile progress), and it draws no progress bars. A fetch stages its files and
    renames them into place when complete, so an interrupted one leaves no half-made data set.
    """

    def __init__(self, data_dir: str | Path | None) -> None:
        self._said: list[str] = []
        self._outcome: layout.Dataset | BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(data_dir,), name="data-prefetch", daemon=True)
        self._thread.start()

    def _run(self, data_dir: str | Path | None) -> None:
        try:
            self._outcome = first_available(data_dir, say=self._said.append, progress=False)
        except BaseException as e:  # noqa: BLE001 - handed to the caller of dataset(), raised there
            self._outcome = e

    def dataset(self, say: Callable[[str], None] = print) -> layout.Dataset:
        """The data set, once the fetch is done; what it said, said now; its error raised here."""
        self._thread.join()
        for line in self._said:
            say(line)
        if isinstance(self._outcome, BaseException):
            raise self._outcome
        assert self._outcome is not None
        return self._outcome

    def settle(self) -> None:
        """Wait for the fetch to end: a job that fails meanwhile does not exit in the middle of one."""
        self._thread.join()
