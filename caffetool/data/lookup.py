"""The data set a ``--dataset`` names: a registered one, or a folder of your own images' databases.

A registered name (``mnist``, ``fashion-mnist``, any case) means the data set caffetool fetches into
the data directory. Anything else names a folder that ``data.images`` wrote: a path (absolute, or
relative to the current directory), or a name under the data directory (``data.images ~/photos``
writes ``<data dir>/photos``, so ``--dataset photos`` finds it). Both kinds hold the same layout
and manifest (:mod:`caffetool.data.layout`), so the rest of caffetool does not care which it got.
A registered name wins over a folder of the same name in the data directory; ``./mnist`` names the
folder.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from caffetool.data import fetch, layout, registry
from caffetool.errors import ConfigError


def find(name: str, data_dir: str | Path | None, fetch_missing: bool = False,
         say: Callable[[str], None] = print, progress: bool = True) -> layout.Dataset:
    """The data set ``name`` names, checked by :func:`layout.load_folder`; a registered one that is
    missing is fetched when ``fetch_missing``, otherwise refused with the command that fetches it."""
    if _registered(name):
        spec = registry.get(name)
        if fetch_missing:
            return fetch.fetch(spec, data_dir, say=say, progress=progress).dataset
        return layout.load(spec, data_dir)
    folder = _folder(name, data_dir)
    return layout.load_folder(folder, f"rebuild it with `caffetool data.images ROOT --out {folder} --force`")


def _registered(name: str) -> bool:
    """Whether ``name`` is a registered data set's name rather than a path."""
    return "/" not in name and name.lower() in registry.DATASETS


def _folder(name: str, data_dir: str | Path | None) -> Path:
    """The folder ``name`` means: a path that exists, else a folder of that name in the data directory."""
    given = Path(name).expanduser()
    candidates = [given] + ([] if given.is_absolute() or "/" in name else [Path(data_dir or "data") / name])
    for candidate in candidates:
        if candidate.is_dir():
            return candidate.absolute()
    looked = " or ".join(str(c.absolute()) for c in candidates)
    raise ConfigError(f"unknown --dataset {name!r}: not one of {', '.join(registry.DATASETS)}, and no folder "
                      f"{looked}; make one from your images with `caffetool data.images ROOT`")
