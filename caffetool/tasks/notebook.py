"""``caffetool notebook.*``: a Jupyter kernel on the engine's pycaffe, and notebooks run headless."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from invoke import Collection

from caffetool import extras, notebooks
from caffetool.choices import input_file, number, output_file
from caffetool.engine import locate
from caffetool.errors import ConfigError
from caffetool.tasks._common import task


@task(help={"name": "the kernel's name (default caffetool)",
            "user": "register it in your own Jupyter folder (~/.local/share/jupyter) instead of this environment's",
            "prefix": "register it under this prefix's share/jupyter instead"})
def kernel(c: Any, name: str = notebooks.KERNEL_NAME, user: bool = False, prefix: str | None = None) -> None:
    """Register a Jupyter kernel whose Python imports the engine's pycaffe (needs the notebook extra)."""
    extras.need("notebook", "caffetool notebook.kernel")
    notebooks.check_kernel_name(name)
    engine = locate(c.engine.prefix)
    where = notebooks.install_kernel(engine, name, user, Path(prefix).absolute() if prefix else None)
    print(f"Kernel '{name}' registered in {where}: pick it in Jupyter (for example `jupyter lab`, after "
          "`pip install jupyterlab`), or run a notebook with `caffetool notebook.run NOTEBOOK`")


@task(positional=["notebook"], help={
    "notebook": "the .ipynb to run top to bottom (read only: never the --out)",
    "out": "the executed copy (default: NOTEBOOK-executed.ipynb beside it)",
    "timeout": "seconds one cell may run before it is interrupted and the run ends (default 600)",
    "cwd": "the folder the notebook runs in (default: its own)",
    "force": "replace an existing executed copy at --out"})
def run(c: Any, notebook: str, out: str | None = None, timeout: str = "600", cwd: str | None = None,
        force: bool = False) -> None:
    """Run a notebook on the engine's pycaffe and write the executed copy (needs the notebook extra)."""
    extras.need("notebook", "caffetool notebook.run")
    path = input_file(notebook, "NOTEBOOK").absolute()
    target = output_file(out or path.with_name(f"{path.stem}-executed{path.suffix}"), "--out")
    seconds = number(timeout, "--timeout", minimum=1)
    folder = Path(cwd).absolute() if cwd else None
    if folder is not None and not folder.is_dir():
        raise ConfigError(f"--cwd {folder} is not a folder")
    engine = locate(c.engine.prefix, probe=False)
    start = time.monotonic()
    cells = notebooks.run(path, target, engine, seconds, folder, replace=force)
    print(f"{path.name}: {cells} code cells run without error in {time.monotonic() - start:.1f} s; "
          f"executed copy: {target}")


ns = Collection("notebook", kernel, run)
