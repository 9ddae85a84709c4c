"""Where caffetool keeps things, decided in one place.

Precedence, lowest first: these defaults < ``invoke.yaml`` < ``INVOKE_*`` variables < flags.
The task layer resolves the upper three (``flag or c.engine.prefix``) and passes the result
here; ``None`` means "use the default", which for the engine also honours Caffe's own
``CAFFE_ROOT`` convention.
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


# Defaults for the Invoke collection (ns.configure). Values of None fall back to the
# functions above so that the library and the tasks agree without repeating paths.
TASK_DEFAULTS: dict[str, dict[str, object]] = {
    "engine": {"prefix": None, "source": None, "debian_mirror": None, "jobs": None},
    "data": {"dir": "data", "dataset": "fashion-mnist"},
    "model": {"dir": None},  # None: the project's models/
    "runs": {"dir": "runs"},
}

# System packages the test suite uses beyond the engine's: the real Fashion-MNIST files, Debian's
# Chromium for the browser tests (driven by Playwright through executable_path), and debootstrap
# for the bare Debian root an engine bundle is proven in.
TEST_PACKAGES: tuple[str, ...] = ("dataset-fashion-mnist", "chromium", "debootstrap")
