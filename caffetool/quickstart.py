"""The main job's steps that need a decision, kept out of the task layer.

MNIST is the data set Caffe's LeNet recipe was published on, so it comes first; where its mirrors
cannot be reached (offline machines, retired hosts) the job says so and uses Fashion-MNIST, which
Debian packages in the same IDX format, so the rest of the job is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from caffetool.data import fetch, layout, registry
from caffetool.errors import SourceError

PREFERRED = ("mnist", "fashion-mnist")
PROBE_TIMEOUT = 10.0


def prepare_data(data_dir: str | Path | None, say: Callable[[str], None] = print) -> layout.Dataset:
    """The first of PREFERRED that is present or can be fetched; says why it moved on."""
    failures = []
    for name in PREFERRED:
        spec = registry.get(name)
        try:
            return fetch.fetch(spec, data_dir, timeout=PROBE_TIMEOUT, say=say).dataset
        except SourceError as e:
            first = str(e).splitlines()[1].strip() if "\n" in str(e) else str(e)
            say(f"{spec.title}: no source reachable ({first}); trying the next data set")
            failures.append(str(e))
    raise SourceError("no data set could be obtained:\n" + "\n".join(failures))
