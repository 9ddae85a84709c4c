"""caffetool's Invoke settings: their defaults, what each may hold, and the files that set them, checked.

Precedence, lowest first: these defaults < ``invoke.yaml`` < ``INVOKE_*`` variables < flags. The
tasks resolve the upper three (``flag or c.engine.prefix``) and pass the result to the library,
which fills in ``None`` from :mod:`caffetool.config`.

Invoke merges ``invoke.yaml`` into these defaults itself, and shows a syntax error, or a section
that is not a mapping, as a Python traceback. :func:`check_config_files` reads the files first, as
Invoke will, so such a file is refused by name; :func:`check_settings` checks the merged values
(``INVOKE_*`` variables included) before a task uses them. Limits: ``invoke.py`` files are Python
and are left to Invoke. Invoke parses ``~/.invoke.yaml`` and ``/etc/invoke.yaml`` before any
caffetool code runs, and a runtime file (``invoke -f FILE``) after ``tasks.py`` has loaded: a syntax
error in one of those is still Invoke's traceback (a wrong kind of value in the first two is
caught here).
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
}
SUFFIXES = (".yaml", ".yml", ".json")  # Invoke's order; the first found is read

# System packages the test suite uses beyond the engine's: the real Fashion-MNIST files, Debian's
# Chromium for the browser tests (driven by Playwright through executable_path), and debootstrap
# for the bare Debian root an engine bundle is proven in.
TEST_PACKAGES: tuple[str, ...] = ("dataset-fashion-mnist", "chromium", "debootstrap")


def check_settings(tree: Mapping[str, Any], origin: Callable[[str], str]) -> None:
    """Refuse a caffetool setting in ``tree`` that is not what :data:`SETTINGS` declares.

    ``origin(key)`` names where ``key`` ("data.dir") was set, for the message. Sections other than
    caffetool's (Invoke's own ``run:``, ``tasks:``) are left to Invoke; unknown keys inside
    caffetool's sections are refused, since a misspelt one would otherwise be ignored in silence.
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
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}; fix or remove it") from None
        name = path.name if shown == "" else str(path)
        tree = _parse(text, path, name)
        if tree is not None and not isinstance(tree, Mapping):
            raise ConfigError(f"{name}: must be a mapping of settings (data: {{dir: ...}}), "
                              f"got {type(tree).__name__} {tree!r}")
        check_settings(tree or {}, lambda _: name)
        return


def _parse(text: str, path: Path, name: str) -> Any:
    """YAML or JSON as Invoke reads it; a syntax error names the file, line and column."""
    try:
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


def environment_origin(key: str) -> str:
    """Where a merged setting came from, as far as can be told: its ``INVOKE_*`` variable, if set."""
    variable = "INVOKE_" + key.replace(".", "_").upper()
    return variable if variable in os.environ else "invoke configuration"
