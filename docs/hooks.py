"""MkDocs hooks: the reference pages written from the code at build time, so they cannot drift from it.

A page holds a marker (``<!-- generated: NAME -->``) where :data:`GENERATED` writes its text: every
task with every option (from the Invoke collection ``caffetool.tasks.ns``, as ``caffetool TASK
--help`` shows them), the settings (``caffetool.tasks.settings.SETTINGS`` with their defaults), the
extras (``caffetool.extras.EXTRAS``), a run's folder (``caffetool.runs.folder``), the demo server's HTTP
routes (``caffetool.demo.webapp.ROUTES``, the table the server is built from) and the status each
error is answered with (``STATUS``), every Caffe layer type with what the memory estimate and the
exports do with it (``caffetool.layers.catalogue.CATALOGUE``), and
benchmarks/RESULTS.md, which lives beside the scripts that produce it.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def tasks_page() -> str:
    from caffetool.tasks import ns

    out = []
    for name in sorted(ns.task_names):
        task, _ = ns.task_with_config(name)
        shown = min(ns.task_names[name], key=len, default=name)  # a group's default task by the group's name
        doc = inspect.cleandoc(task.__doc__ or "").replace("\n", " ")
        out += [f"## `caffetool {shown}`", "", doc, ""]
        arguments = [a for a in task.get_arguments() if a.name != "solver_flags"]
        if not arguments:
            out += ["No options.", ""]
            continue
        out += ["| option | default | what it is |", "| --- | --- | --- |"]
        for a in arguments:
            flag = a.name.replace("_", "-")
            flag = flag.upper() if a.positional else f"--{flag}"
            default = "" if a.default in (None, False, [], "") else f"`{a.default}`"
            out.append(f"| `{flag}` | {default} | {_cell(a.help or '')} |")
        out.append("")
    return "\n".join(out)


def settings_page() -> str:
    from caffetool.tasks.settings import SETTINGS, TASK_DEFAULTS

    out = ["| setting | holds | default |", "| --- | --- | --- |"]
    for section, keys in SETTINGS.items():
        for key, holds in keys.items():
            kind = " or ".join(f"`{v}`" for v in holds) if isinstance(holds, tuple) else _cell(holds)
            default = TASK_DEFAULTS.get(section, {}).get(key)
            out.append(f"| `{section}.{key}` | {kind} | {'' if default is None else f'`{default}`'} |")
    return "\n".join(out)


def extras_page() -> str:
    from caffetool.extras import EXTRAS, install_command

    checkout = ("editable", Path("."))  # the command as typed in the checkout, whatever this machine holds
    out = ["| extra | adds | install (in the checkout) |", "| --- | --- | --- |"]
    for name, extra in EXTRAS.items():
        out.append(f"| `{name}` | {extra.brings} | `{install_command(name, checkout, '.venv/bin/python')}` |")
    return "\n".join(out)


def run_folder_page() -> str:
    from caffetool.runs.folder import CONTENTS, NAMES

    out = ["| in `runs/NAME/` | what it holds |", "| --- | --- |"]
    for key, name in NAMES.items():
        out.append(f"| `{name}{'/' if '.' not in name else ''}` | {_cell(CONTENTS[key])} |")
    return "\n".join(out)


def routes_page() -> str:
    from caffetool.demo.webapp import ROUTES

    out = ["| method | path | answers |", "| --- | --- | --- |"]
    for endpoint in ROUTES:
        out.append(f"| {' '.join(endpoint.methods)} | `{endpoint.path}` | {_cell(endpoint.answers)} |")
    return "\n".join(out)


def statuses_page() -> str:
    from caffetool.demo.webapp import STATUS

    out = ["| status | error | when |", "| --- | --- | --- |"]
    for kind, status in STATUS:
        first = inspect.cleandoc(kind.__doc__ or "").split("\n\n")[0]
        out.append(f"| {status} | `{kind.__name__}` | {_cell(_from_rst(first))} |")
    return "\n".join(out)


def layers_page() -> str:
    from caffetool.layers.catalogue import CATALOGUE
    from caffetool.layers.entry import CAPABILITIES, Omitted, Refused, Sourced

    def cell(declared: object) -> str:
        if isinstance(declared, Refused):
            return f"no: {_cell(declared.why)}"
        if isinstance(declared, Omitted):
            return f"yes ({_cell(declared.why)})"
        return "yes (from the data it reads)" if isinstance(declared, Sourced) else "yes"

    out = ["| type | family | memory and shapes | ONNX | PyTorch |", "| --- | --- | --- | --- | --- |"]
    for name, kind in sorted(CATALOGUE.items()):
        family = kind.__module__.rsplit(".", 1)[-1]
        out.append(f"| `{name}` | `{family}` | " + " | ".join(cell(getattr(kind, c)) for c in CAPABILITIES) + " |")
    return "\n".join(out)


def _from_rst(text: str) -> str:
    """A docstring's reStructuredText roles and literals as Markdown code."""
    return re.sub(r":\w+:`[~.]*([^`]+)`", r"`\1`", text).replace("``", "`")


def results_page() -> str:
    text = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    return text.split("\n", 1)[1] if text.startswith("# ") else text


GENERATED = {"tasks": tasks_page, "settings": settings_page, "extras": extras_page, "run-folder": run_folder_page,
             "routes": routes_page, "http-errors": statuses_page, "results": results_page,
             "layers": layers_page}


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ANN001 - MkDocs' hook signature
    for name, make in GENERATED.items():
        marker = f"<!-- generated: {name} -->"
        if marker in markdown:
            markdown = markdown.replace(marker, make())
    return markdown
