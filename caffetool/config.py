"""Where caffetool keeps things, decided in one place.

The task layer resolves a flag, ``invoke.yaml`` and ``INVOKE_*`` variables (``flag or
c.engine.prefix``; :mod:`caffetool.tasks.settings`) and passes the result here; ``None`` means "use
the default", which for the engine also honours Caffe's own ``CAFFE_ROOT`` convention.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP = "caffetool"


def data_home() -> Path:
    """Per-user data directory (``$XDG_DATA_HOME/caffetool`` on Linux)."""
    return Path(platformdirs.user_data_dir(APP))


def cache_home() -> Path:
    """Per-user cache: downloaded source tarballs, private apt lists, build logs."""
    return Path(platformdirs.user_cache_dir(APP))


def engine_prefix(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The engine's install prefix: explicit value, else ``$CAFFE_ROOT``, else the data home."""
    if explicit:
        return Path(explicit).expanduser().absolute()
    if os.environ.get("CAFFE_ROOT"):
        return Path(os.environ["CAFFE_ROOT"]).expanduser().absolute()
    return data_home() / "engine"
