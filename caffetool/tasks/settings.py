"""caffetool's Invoke settings: their defaults, what each may hold, and the files that set them, checked.

Precedence, lowest first: these defaults < ``invoke.yaml`` < ``INVOKE_*`` variables < flags. The
tasks resolve the upper three (``flag or c.engine.prefix``) and pass the result to the library,
which fills in ``None`` from :mod:`caffetool.config`.

Invoke merges ``invoke.yaml`` into these defaults itself, and shows a syntax error, or a section
that is not a mapping, as a Python traceback. :func:`check_config_files` reads the files first, as
Invoke will, so such a file is refused by name; :func:`check_settings` checks the merged values
(``INVOKE_*`` variables included) before a task uses them. A YAML file whose aliases expand past
:data:`MAX_YAML_NODES` values is refused before Invoke copies the expanded tree. The ``caffetool``
command checks ``/etc/invoke.yaml``, ``~/.invoke.yaml`` and the runtime file (``-f FILE``,
``INVOKE_RUNTIME_CONFIG``) before Invoke reads them. Limits: ``invoke.py`` files are Python and are
left to Invoke; ``invoke`` in the checkout reads the first two before any caffetool code runs, and
the runtime file after ``tasks.py`` has loaded, so a syntax error in one of those is Invoke's
traceback there.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from invoke.util import yaml

from caffetool.choices import Limit, bounded, choose
from caffetool.data.registry import DATASETS
from caffetool.errors import ConfigError

# Defaults for the Invoke collection (ns.configure). Values of None fall back to the
# functions above so that the library and the tasks agree without repeating paths.
TASK_DEFAULTS: dict[str, dict[str, object]] = {
    "engine": {"prefix": None, "source": None, "debian_mirror": None, "jobs": None},
    "data": {"dir": "data", "dataset": "fashion-mnist"},
    "model": {"dir": None},  # None: the declarations shipped as caffetool.models
    "runs": {"dir": "runs"},
    # None: the runs folder's sqlite:///<runs dir>/mlflow.db, experiment "caffetool" (caffetool.track.target)
    "tracking": {"uri": None, "experiment": None},
}

JOBS = Limit("a number of compile jobs", 1, 4096, kind=int)
THREADS = Limit("a number of CPU threads", 1, 4096, kind=int)
# What each setting holds when it is set: text (a folder, a URL) described in words, one of a tuple
# of names, or a number within a Limit. The same keys as TASK_DEFAULTS.
SETTINGS: dict[str, dict[str, str | tuple[str, ...] | Limit]] = {
    "engine": {"prefix": "a folder", "source": "a folder or URL", "debian_mirror": "a URL", "jobs": JOBS},
    "data": {"dir": "a folder", "dataset": tuple(DATASETS)},
    "model": {"dir": "a folder"},
    "runs": {"dir": "a folder"},
    "tracking": {"uri": "an MLflow tracking URI, or off", "experiment": "an MLflow experiment name"},
}
# caffetool's task groups that hold no settings: a section of that name is a mistake, not Invoke's
# or another project's (those are left alone).
NO_SETTINGS = ("train", "sweep", "demo", "evaluate", "memory", "docker", "track")
SUFFIXES = (".yaml", ".yml", ".json")  # Invoke's order; the first found is read
MAX_YAML_NODES = 100_000  # values a settings file may hold with its aliases expanded

# System packages the test suite uses beyond the engine's: the real Fashion-MNIST files, Debian's
# Chromium for the browser tests (driven by Playwright through executable_path), and debootstrap
# for the bare Debian root an engine bundle is proven in.
TEST_PACKAGES: tuple[str, ...] = ("dataset-fashion-mnist", "chromium", "debootstrap")


def check_settings(tree: Mapping[str, Any], origin: Callable[[str], str], own: bool = False) -> None:
    """Refuse a caffetool setting in ``tree`` that is not what :data:`SETTINGS` declares.

    ``origin(key)`` names where ``key`` ("data.dir") was set, for the message. Sections other than
    caffetool's (Invoke's own ``run:``, ``tasks:``) are left to Invoke; unknown keys inside
    caffetool's sections are refused, since a misspelt one would otherwise be ignored in silence.
    In a file that is the project's own (``own``: ``./invoke.yaml``, ``-f FILE``), a section named
    after one of caffetool's task groups that hold no settings (:data:`NO_SETTINGS`) is refused too;
    ``~/.invoke.yaml`` may serve other projects, whose sections are theirs.
    """
    for section, kinds in SETTINGS.items():
        if section not in tree:
            continue
        values = tree[section]
        if not isinstance(values, Mapping):
            raise ConfigError(f"{origin(section)}: {section}: must be a mapping of settings ({', '.join(kinds)}), "
                              f"got {values!r}")
        for key, value in values.items():
            name = f"{section}.{key}"
            if key not in kinds:
                raise ConfigError(f"{origin(name)}: {name}: unknown setting; {section} takes {', '.join(kinds)}")
            kind = kinds[key]
            if value is None:
                continue
            if isinstance(kind, Limit):
                bounded(value, f"{origin(name)}: {name}:", kind)
            elif isinstance(kind, tuple):
                try:
                    choose(value, kind, name)
                except ConfigError as e:
                    raise ConfigError(f"{origin(name)}: {e}") from None
            elif not isinstance(value, str):
                raise ConfigError(f"{origin(name)}: {name}: must be text ({kind}), got {value!r}")
            elif not value.strip():
                raise ConfigError(f"{origin(name)}: {name}: is empty; give {kind}, or unset it for the default")
    for section in NO_SETTINGS if own else ():
        if section in tree:
            raise ConfigError(f"{origin(section)}: {section}: caffetool has no {section} settings (its settings are "
                              f"{', '.join(SETTINGS)}; a {section} task takes flags); remove the section")


def check_config_files(project: Path) -> None:
    """The configuration files Invoke merges, in its order: ``/etc/invoke.yaml``, ``~/.invoke.yaml``
    and the project's ``invoke.yaml`` beside ``tasks.py`` (each also ``.yml`` or ``.json``): readable,
    a mapping, and caffetool's settings in them of the right kind. Missing files are fine."""
    for prefix, shown in ((Path("/etc/invoke"), None), (Path("~/.invoke").expanduser(), None), (project / "invoke", "")):
        check_config_file(prefix, shown)


def check_config_file(prefix: Path, shown: str | None = None) -> None:
    """The first of ``prefix`` + ``.yaml``/``.yml``/``.json`` that exists, as Invoke reads it.

    Errors name the file by its name when ``shown`` is "" (the project's, beside the user), else by
    its full path.
    """
    for suffix in SUFFIXES:
        path = prefix.with_name(prefix.name + suffix)
        try:
            text = path.read_text()
        except (FileNotFoundError, NotADirectoryError):  # under a home that is a file: none can exist
            continue
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}; fix or remove it") from None
        name = path.name if shown == "" else str(path)
        tree = _parse(text, path, name)
        if tree is not None and not isinstance(tree, Mapping):
            raise ConfigError(f"{name}: must be a mapping of settings (data: {{dir: ...}}), "
                              f"got {type(tree).__name__} {tree!r}")
        check_settings(tree or {}, lambda _: name, own=shown == "")
        return


def check_runtime_file(path: str, origin: str) -> None:
    """The runtime settings file (``-f FILE`` or ``INVOKE_RUNTIME_CONFIG``), checked before Invoke
    loads it: there, a name without a settings suffix or a syntax error is a traceback."""
    file = Path(path).expanduser()
    if file.suffix == ".py":
        return  # Python, left to Invoke
    if file.suffix not in SUFFIXES:
        raise ConfigError(f"{origin} {path}: a settings file is YAML or JSON, named *.yaml, *.yml or *.json "
                          "(or Python, *.py)")
    try:
        text = file.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{origin} {path}: cannot be read ({getattr(e, 'strerror', None) or e})") from None
    tree = _parse(text, file, str(file))
    if tree is not None and not isinstance(tree, Mapping):
        raise ConfigError(f"{file}: must be a mapping of settings (data: {{dir: ...}}), "
                          f"got {type(tree).__name__} {tree!r}")
    check_settings(tree or {}, lambda _: str(file), own=True)


def _parse(text: str, path: Path, name: str) -> Any:
    """YAML or JSON as Invoke reads it; a syntax error names the file, line and column, and a YAML
    file whose aliases expand past :data:`MAX_YAML_NODES` ("billion laughs") is refused unread."""
    try:
        if path.suffix != ".json":
            _check_expansion(yaml.compose(text, Loader=yaml.SafeLoader), name, path)
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{name}: line {e.lineno}, column {e.colno}: {e.msg}; fix {path}") from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        hint = " (YAML indents with spaces, not tabs)" if "\\t" in str(e.problem) else ""
        raise ConfigError(f"{name}: {where}{e.problem}{hint}; fix {path}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{name}: {e}; fix {path}") from None


def _check_expansion(root: Any, name: str, path: Path) -> None:
    """Count the nodes of a composed YAML document as its aliases expand (each shared node counted
    once per use, computed once): Invoke copies and merges the expanded tree, at exponential cost."""
    sizes: dict[int, int] = {}

    def size(node: Any) -> int:
        if id(node) not in sizes:
            sizes[id(node)] = 0  # a recursive alias counts once
            children = node.value if isinstance(node.value, list) else []
            total = 1
            for child in children:
                total += sum(size(n) for n in child) if isinstance(child, tuple) else size(child)
            sizes[id(node)] = total
        return sizes[id(node)]

    if root is not None and (count := size(root)) > MAX_YAML_NODES:
        raise ConfigError(f"{name}: its YAML aliases expand to {count:,} values, over the limit of {MAX_YAML_NODES:,} "
                          f"(caffetool's settings are a few); fix {path}")


def environment_origin(key: str) -> str:
    """Where a merged setting came from, as far as can be told: its ``INVOKE_*`` variable, if set."""
    variable = "INVOKE_" + key.replace(".", "_").upper()
    return variable if variable in os.environ else "invoke configuration"
