"""caffetool's optional parts: which extra of the package brings what, the one-line refusal of a
task whose extra is not installed, and the command that adds it where caffetool is installed.

The core (what ``./bootstrap quickstart`` installs from the checkout) brings the main job: the
engine's build, data, nets, training with its progress and plots, evaluation, the demo and its API,
the ONNX export; the extras below add the rest, and ``all`` every one. A task checks its extra
before it does anything, by looking for the packages the extra brings (``importlib.util.find_spec``:
nothing is imported, so the check costs no start-up), so the user reads one line with the command
that adds it.

caffetool is not on a package index, so that command installs from where this caffetool came from,
as pip recorded it (PEP 610: the distribution's ``direct_url.json``): the checkout (editable or not)
or the wheel file, with this environment's Python (``sys.executable``), so that the pip is the one
whose environment runs caffetool.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import shlex
import sys
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from caffetool.errors import ConfigError


@dataclass(frozen=True)
class Extra:
    modules: tuple[str, ...]  # the top-level packages the extra brings, as imported
    brings: str  # as the refusal names it


EXTRAS = {
    "sweep": Extra(("ray", "optuna"), "Ray Tune and Optuna"),
    "mlflow": Extra(("mlflow",), "MLflow"),
    "pytorch": Extra(("torch",), "PyTorch"),
    "notebook": Extra(("ipykernel", "nbclient", "nbformat"), "Jupyter's kernel and notebook runner"),
}

# The command that adds an extra, by where this caffetool was installed from: {python} is this
# environment's, {source} the recorded checkout or wheel (quoted with the extra), {path} it unquoted.
INSTALL_FROM = {
    "editable": "{python} -m pip install -e {source}",
    "folder": "{python} -m pip install {source}",
    "wheel": "{python} -m pip install {source}",
    # the recorded checkout or wheel is no longer there
    "gone": "{python} -m pip install -e '.[{extra}]' in caffetool's checkout ({path}, which it was installed "
            "from, is gone)",
    # pip recorded none of these (an install from a VCS URL, a checkout on sys.path, a system package)
    "unknown": "{python} -m pip install -e '.[{extra}]' in caffetool's checkout",
}


def installed_from() -> tuple[str, Path | None]:
    """Where pip installed this caffetool from, as one of :data:`INSTALL_FROM`'s kinds and the path."""
    # The first caffetool on sys.path with a record: a stale caffetool.egg-info in the current folder
    # (a checkout's, from an older setuptools) is found first and has none.
    records = (d.read_text("direct_url.json") for d in importlib.metadata.distributions(name="caffetool"))
    text = next(filter(None, records), None)
    try:
        record = json.loads(text or "null")
    except json.JSONDecodeError:
        record = None
    if not isinstance(record, dict) or not str(record.get("url", "")).startswith("file:"):
        return "unknown", None
    path = Path(urllib.request.url2pathname(urllib.parse.urlsplit(record["url"]).path))
    if "dir_info" in record:
        kind = "editable" if record["dir_info"].get("editable") else "folder"
    elif "archive_info" in record and path.suffix == ".whl":
        kind = "wheel"
    else:
        return "unknown", None
    return (kind, path) if path.exists() else ("gone", path)


def install_command(extra: str, origin: tuple[str, Path | None] | None = None, python: str = sys.executable) -> str:
    """The command that adds ``extra`` to the caffetool installed here (or, for the documentation, to
    one installed from ``origin`` with ``python``)."""
    kind, path = origin or installed_from()
    return INSTALL_FROM[kind].format(python=shlex.quote(python), extra=extra, path=path,
                                     source=shlex.quote(f"{path}[{extra}]"))


def missing(extra: str) -> str | None:
    """The first package of ``extra`` that is not installed here, or None when all are."""
    return next((module for module in EXTRAS[extra].modules if importlib.util.find_spec(module) is None), None)


def need(extra: str, what: str, hint: str = "") -> None:
    """Refuse ``what`` (a task, as the user named it) in one line when ``extra`` is not installed."""
    if missing(extra) is not None:
        raise ConfigError(f"{what} needs {EXTRAS[extra].brings}, which {'is' if len(EXTRAS[extra].modules) == 1 else 'are'}"
                          f" not installed here: {install_command(extra)}{hint}")
