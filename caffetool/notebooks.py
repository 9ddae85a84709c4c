"""Jupyter notebooks on the engine's pycaffe: a kernel of this environment, and notebooks run headless.

BVLC's tutorials are notebooks, and a notebook's kernel is a Python that must import the engine's
pycaffe with libcaffe's logging quiet and its BLAS on this CPU's kernels, as caffetool's own imports
do (:func:`caffetool.engine.locate.import_caffe`). :func:`install_kernel` registers a kernel spec
("caffetool") whose Python is this environment's and whose environment says just that, with
ipykernel's own installer, for JupyterLab or any Jupyter to offer. :func:`run` executes a notebook
top to bottom with nbclient (Jupyter's own executor, what ``jupyter nbconvert --execute`` uses) on
such a kernel, and writes the executed copy, outputs and all; a cell that fails stops the run and is
named with its error.

These need the ``notebook`` extra (ipykernel, nbclient, nbformat, and h5py, which BVLC's
``brewing-logreg`` notebook imports): ``pip install 'caffetool[notebook]'``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from caffetool import fsio
from caffetool.engine import cpu
from caffetool.engine.locate import QUIET_GLOG, EngineInfo
from caffetool.errors import ConfigError, RunError

KERNEL_NAME = "caffetool"
EXTRA = "pip install 'caffetool[notebook]'"


def kernel_env(engine: EngineInfo) -> dict[str, str]:
    """What a kernel's Python needs to import the engine's pycaffe as caffetool does."""
    paths = [str(engine.python_path), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)), **QUIET_GLOG, **cpu.blas_environment(os.environ)}


def install_kernel(engine: EngineInfo, name: str = KERNEL_NAME, user: bool = False, prefix: Path | None = None) -> Path:
    """Register the kernel spec ``name`` (into this environment, ``user``'s Jupyter folder, or
    ``prefix``) and return its folder."""
    kernelspec = _needs("ipykernel.kernelspec")
    display = f"Python {sys.version_info.major}.{sys.version_info.minor} (caffetool, Caffe {engine.version or ''})"
    where = kernelspec.install(user=user, kernel_name=name, display_name=display.replace(" )", ")"),
                               prefix=str(prefix) if prefix else (None if user else sys.prefix), env=kernel_env(engine))
    return Path(where)


def run(notebook: Path, out: Path, engine: EngineInfo, timeout: float, cwd: Path | None = None) -> int:
    """Execute ``notebook`` in a fresh kernel of this environment, in ``cwd`` (its folder by default),
    and write the executed copy to ``out``; return the number of code cells run. Raises RunError
    naming the cell that failed (the executed copy up to it is written too)."""
    nbformat = _needs("nbformat")
    nbclient = _needs("nbclient")
    jupyter_client = _needs("jupyter_client")
    try:
        book = nbformat.read(str(notebook), as_version=4)
    except (OSError, ValueError) as e:
        raise ConfigError(f"{notebook}: not a Jupyter notebook ({e})") from None
    failure: str | None = None
    # The kernel's sockets are Unix sockets in a private folder (IPC): over TCP, even on loopback,
    # other users of the machine could read the notebook's traffic, and ipykernel says so.
    with _environment(kernel_env(engine)), tempfile.TemporaryDirectory(prefix="caffetool-kernel-") as sockets:
        manager = jupyter_client.KernelManager(kernel_name="python3", transport="ipc", ip=str(Path(sockets) / "kernel"))
        client = nbclient.NotebookClient(book, km=manager, timeout=timeout,
                                         resources={"metadata": {"path": str(cwd or notebook.parent)}})
        try:
            client.execute()
        except nbclient.exceptions.CellExecutionError as e:
            failure = _cell_failure(book, e)
        except nbclient.exceptions.CellTimeoutError:
            failure = f"a cell ran past --timeout {timeout:g} s"
        except nbclient.exceptions.DeadKernelError as e:
            failure = f"the kernel died ({str(e).strip().splitlines()[-1] if str(e).strip() else 'no reason given'})"
        finally:
            if manager.has_kernel:  # a kernel manager given to nbclient is the caller's to shut down
                manager.shutdown_kernel()
    fsio.write_atomic(out, nbformat.writes(book), ConfigError)
    if failure is not None:
        raise RunError(f"{notebook}: {failure}; the executed copy so far is {out}")
    return sum(1 for cell in book.cells if cell.cell_type == "code")


def _cell_failure(book: Any, error: Exception) -> str:
    """``cell N: ErrName: message`` for the first code cell whose output is an error."""
    code = [c for c in book.cells if c.cell_type == "code"]
    for number, cell in enumerate(code, 1):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                return f"code cell {number} raised {output.get('ename')}: {output.get('evalue')}"
    return str(error).strip().splitlines()[-1] if str(error).strip() else "a cell failed"


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """``values`` in this process's environment while a kernel is started from it, then as before."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _needs(module: str) -> Any:
    import importlib  # noqa: PLC0415

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(f"notebooks need the notebook extra, which is not installed: {EXTRA}") from None
