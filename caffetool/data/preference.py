"""Which data set a job uses when none is named: the first of a preference list that can be had.

MNIST is the data set Caffe's LeNet recipe was published on, so it comes first; where its mirrors
cannot be reached (offline machines, retired hosts) the choice says so and moves on to
Fashion-MNIST, which Debian packages in the same IDX format, so the rest of a job is unchanged.
Limits: each data set's sources are given :data:`PROBE_TIMEOUT` seconds of silence, not the
``data.fetch`` default, so an unreachable mirror costs little.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from caffetool.data import fetch, layout, registry
from caffetool.errors import SourceError

PREFERRED: tuple[str, ...] = ("mnist", "fashion-mnist")
PROBE_TIMEOUT = 10.0


def first_available(data_dir: str | Path | None, say: Callable[[str], None] = print,
                    preferred: tuple[str, ...] = PREFERRED) -> layout.Dataset:
    """The first of ``preferred`` that is present or can be fetched; says why it moved on."""
    failures: list[SourceError] = []
    for name in preferred:
        spec = registry.get(name)
        try:
            return fetch.fetch(spec, data_dir, timeout=PROBE_TIMEOUT, say=say).dataset
        except SourceError as e:
            first = f"{e.attempts[0][0]}: {e.attempts[0][1]}" if e.attempts else str(e)
            say(f"{spec.title}: no source reachable ({first}); trying the next data set")
            failures.append(e)
    raise SourceError("no data set could be obtained:\n" + "\n".join(map(str, failures)),
                      attempts=[a for e in failures for a in e.attempts])
