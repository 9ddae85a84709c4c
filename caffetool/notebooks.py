"""Jupyter notebooks on the engine's pycaffe: a kernel of this environment, and notebooks run headless.

BVLC's tutorials are notebooks, and a notebook's kernel is a Python that must import the engine's
pycaffe with libcaffe's logging quiet and its BLAS on this CPU's kernels, as caffetool's own imports
do (:func:`caffetool.engine.locate.import_caffe`). :func:`install_kernel` registers a kernel spec
("caffetool") whose Python is this environment's and whose environment says just that, with
ipykernel's own installer, for JupyterLab or any Jupyter to offer. :func:`run` executes a notebook
top to bottom with nbclient (Jupyter's own executor, what ``jupyter nbconvert --execute`` uses) on
such a kernel, and writes the executed copy, outputs and all; a cell that fails stops the run and is
named with its error.

A run always ends, and ends with its kernel: a cell past the timeout is interrupted and its kernel
stopped (killed, process group and all, when it does not stop within :data:`STOP_GRACE` seconds), a
kernel that dies ends the run at once, and an interrupt (Ctrl-C, or SIGTERM through the task layer)
stops the kernel before it returns. The notebook itself is only read, and an executed copy is written
(in one rename) only when it is the whole run or shows the cell that raised.

These need the ``notebook`` extra (ipykernel, nbclient, nbformat, and h5py, which BVLC's
``brewing-logreg`` notebook imports); without them a task names the command that adds them
(:func:`caffetool.extras.install_command`).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

from caffetool import extras, fsio, proc
from caffetool.engine import cpu
from caffetool.engine.locate import QUIET_GLOG, EngineInfo
from caffetool.errors import ConfigError, RunError

KERNEL_NAME = "caffetool"
# jupyter_client's rule for a kernel spec's name (its folder's name), starting with a letter or digit so
# that "." and ".." cannot name a folder above the kernels; "python3" is ipykernel's own kernel.
KERNEL_NAME_RULE = re.compile(r"[a-z0-9][a-z0-9._-]*", re.IGNORECASE)
RESERVED_KERNEL_NAMES = frozenset({"python3"})
# Seconds a kernel gets to stop by itself (after an interrupt, or asked to shut down) before it is killed.
STOP_GRACE = 3.0
# A Unix socket's path holds at most 107 bytes (sun_path); jupyter_client names the kernel's sockets
# FOLDER/kernel-PORT with small PORT numbers.
SOCKET_PATH_MAX = 107
SOCKET_NAME = "caffetool-kernel-XXXXXXXX/kernel-99999"


def kernel_env(engine: EngineInfo) -> dict[str, str]:
    """What a kernel's Python needs to import the engine's pycaffe as caffetool does."""
    paths = [str(engine.python_path), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)), **QUIET_GLOG, **cpu.blas_environment(os.environ)}


def install_kernel(engine: EngineInfo, name: str = KERNEL_NAME, user: bool = False, prefix: Path | None = None) -> Path:
    """Register the kernel spec ``name`` (into this environment, ``user``'s Jupyter folder, or
    ``prefix``) and return its folder. A name Jupyter cannot use, or ipykernel's own ``python3``
    (which ipykernel also installs under an empty name), is refused before anything is written."""
    check_kernel_name(name)
    kernelspec = _needs("ipykernel.kernelspec")
    display = f"Python {sys.version_info.major}.{sys.version_info.minor} (caffetool, Caffe {engine.version or ''})"
    where = prefix if prefix else (None if user else Path(sys.prefix))
    try:
        folder = kernelspec.install(user=user, kernel_name=name, display_name=display.replace(" )", ")"),
                                    prefix=str(where) if where else None, env=kernel_env(engine))
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot register kernel {name!r} in {where or 'your Jupyter folder'}: {e}") from None
    return Path(folder)


def check_kernel_name(name: str) -> None:
    """Refuse a kernel name Jupyter cannot use as a folder's name, and ipykernel's own ``python3``."""
    if not KERNEL_NAME_RULE.fullmatch(name):
        raise ConfigError(f"kernel name {name!r} cannot name a Jupyter kernel: use letters, digits, '.', '_' "
                          f"and '-', starting with a letter or digit (for example --name {KERNEL_NAME})")
    if name.lower() in RESERVED_KERNEL_NAMES:
        raise ConfigError(f"kernel name {name!r} is ipykernel's own kernel, which this would replace; choose "
                          f"another (for example --name {KERNEL_NAME})")


def check_output(notebook: Path, out: Path, replace: bool = False) -> None:
    """Refuse an ``out`` that is ``notebook`` itself under any spelling (a symlink, a hard link,
    ``..``), which writing would destroy, and an existing ``out`` unless ``replace``: an executed copy
    may be the only record of an earlier run."""
    if out.exists() and os.path.samefile(out, notebook):
        raise ConfigError(f"--out {out} is the notebook {notebook} itself, which a run only reads; give "
                          "another file (nothing was changed)")
    if (out.exists() or out.is_symlink()) and not replace:
        raise ConfigError(f"{out} exists; pass --force to replace it with this run's executed copy, or give "
                          "--out another file (nothing was changed)")


def read_notebook(path: Path) -> Any:
    """``path`` as an nbformat v4 notebook, or a ConfigError naming the file and what is wrong with it:
    not UTF-8, not JSON, nested too deep to read, or a field of another kind than Jupyter's schema says."""
    nbformat = _needs("nbformat")
    where = f"{path}: not a Jupyter notebook"
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as e:
        raise ConfigError(f"{path} cannot be read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{where} (byte {e.start} is not UTF-8)") from None
    except RecursionError:
        raise ConfigError(f"{where} (its JSON nests deeper than Python can read)") from None
    except ValueError as e:
        raise ConfigError(f"{where} (not JSON: {e})") from None
    if wrong := _wrong_shape(data):
        raise ConfigError(f"{where} ({wrong})")
    try:
        with warnings.catch_warnings():  # nbformat warns of cells without ids, which it adds itself
            warnings.simplefilter("ignore")
            book = nbformat.convert(nbformat.reader.reads(json.dumps(data)), 4)
            nbformat.validate(book)
    except RecursionError:
        raise ConfigError(f"{where} (its JSON nests deeper than Python can read)") from None
    except nbformat.ValidationError as e:
        raise ConfigError(f"{where} ({_field(e.absolute_path)}: {_short(e.message)})") from None
    except (ValueError, TypeError, AttributeError, KeyError, AssertionError) as e:
        raise ConfigError(f"{where} ({type(e).__name__}: {_short(str(e))})") from None
    return book


def _wrong_shape(data: Any) -> str | None:
    """What is of the wrong kind in the fields nbformat reads before it validates (it fails on them
    with a TypeError or worse); None where they have the kinds Jupyter's schema gives them."""
    if not isinstance(data, dict):
        return f"the top level is {_kind(data)}, not an object"
    if not isinstance(data.get("nbformat"), int) or isinstance(data.get("nbformat"), bool):
        return f"nbformat is {_kind(data.get('nbformat'))}, not a version number such as 4"
    expected = [("metadata", dict, "an object")]
    expected.append(("cells", list, "an array") if data["nbformat"] >= 4 else ("worksheets", list, "an array"))
    for key, kind, name in expected:
        if key in data and not isinstance(data[key], kind):
            return f"{key} is {_kind(data[key])}, not {name}"
    metadata = data.get("metadata") or {}
    for key in ("kernelspec", "language_info"):
        if key in metadata and not isinstance(metadata[key], dict):
            return f"metadata.{key} is {_kind(metadata[key])}, not an object"
    for number, cell in enumerate(data.get("cells") or []):
        if not isinstance(cell, dict):
            return f"cells[{number}] is {_kind(cell)}, not an object"
        for key, kind, name in (("metadata", dict, "an object"), ("outputs", list, "an array"),
                                ("cell_type", str, "a string")):
            if key in cell and not isinstance(cell[key], kind):
                return f"cells[{number}].{key} is {_kind(cell[key])}, not {name}"
        source = cell.get("source", "")
        if not isinstance(source, str) and not (isinstance(source, list) and all(isinstance(s, str) for s in source)):
            return f"cells[{number}].source is {_kind(source)}, not a string or an array of strings"
    return None


def _kind(value: Any) -> str:
    """A JSON value's kind, as a user reading the file would name it."""
    kinds = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return kinds.get(type(value), "a number")


def _field(path: Any) -> str:
    """``cells[0].source`` for jsonschema's path ``['cells', 0, 'source']``."""
    text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
    return text or "the notebook"


def _short(text: str, limit: int = 160) -> str:
    first = text.strip().splitlines()[0] if text.strip() else "invalid"
    return first if len(first) <= limit else first[:limit - 1] + "…"


def run(notebook: Path, out: Path, engine: EngineInfo, timeout: float, cwd: Path | None = None,
        replace: bool = False) -> int:
    """Execute ``notebook`` in a fresh kernel of this environment, in ``cwd`` (its folder by default),
    and write the executed copy to ``out``; return the number of code cells run.

    Raises ConfigError before anything runs for an ``out`` :func:`check_output` refuses or a file
    :func:`read_notebook` cannot read, and RunError naming the cell for a cell that raised (the
    executed copy up to it is written), ran past ``timeout`` or whose kernel died (nothing is
    written then). KeyboardInterrupt leaves with the kernel stopped and nothing written.
    """
    check_output(notebook, out, replace)
    book = read_notebook(notebook)
    nbformat = _needs("nbformat")
    execution = _Execution(book, timeout, cwd or notebook.parent, {**os.environ, **kernel_env(engine)})
    execution.run()
    if execution.failure is None or execution.keep:
        fsio.write_atomic(out, nbformat.writes(book), ConfigError)
    if execution.failure is not None:
        written = f"; the executed copy so far is {out}" if execution.keep else f"; nothing was written to {out}"
        raise RunError(f"{notebook}: {execution.failure}{written}")
    return sum(1 for cell in book.cells if cell.cell_type == "code")


class _Execution:
    """One notebook executed by nbclient on a kernel of its own, in a thread of its own.

    nbclient waits on the kernel in an asyncio loop; in a thread of its own, that loop never stands
    between this process's main thread and a signal (Ctrl-C, SIGTERM), and nbclient adds no signal
    handlers of its own there. The main thread waits for it and, when interrupted, has it stop the kernel.
    """

    def __init__(self, book: Any, timeout: float, cwd: Path, env: dict[str, str]) -> None:
        self.book, self.timeout, self.cwd, self.env = book, timeout, cwd, env
        self.failure: str | None = None  # what ended the run early, naming the cell
        self.keep = True  # whether the executed copy so far is worth writing
        self.cell: int | None = None  # index of the cell running
        self._error: BaseException | None = None
        self._interrupted = self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._pgid: int | None = None
        self._manager: Any = None
        self._loop = asyncio.new_event_loop()
        self._done = threading.Event()

    def run(self) -> None:
        """Execute the notebook; on KeyboardInterrupt, stop the kernel first, then raise it."""
        sockets = _socket_folder()
        thread = threading.Thread(target=self._thread, args=(Path(sockets.name) / "kernel",),
                                  name="caffetool-notebook", daemon=True)
        try:
            thread.start()
            while not self._done.wait(0.2):  # an Event: Thread.join may take an interrupt for the thread's end
                pass
        except KeyboardInterrupt:
            self._interrupted = True
            with contextlib.suppress(RuntimeError):  # the loop has closed: the run ended meanwhile
                self._loop.call_soon_threadsafe(self._cancel)
            self._wait_for_stop()
            raise
        finally:
            if self._done.is_set():
                thread.join()
            sockets.cleanup()
        if self._error is not None:
            raise self._error

    def _thread(self, sockets: Path) -> None:
        try:
            self._loop.run_until_complete(self._execute(sockets))
        except BaseException as e:  # noqa: BLE001 - handed to the main thread, which raises it
            self._error = e
        finally:
            self._loop.close()
            self._done.set()

    def _cancel(self) -> None:
        if self._task is not None and not self._stopping:
            self._task.cancel()

    def _wait_for_stop(self) -> None:
        """Give the kernel's stop its time (further interrupts wait too), then kill its process group."""
        deadline = time.monotonic() + STOP_GRACE + 10
        while not self._done.is_set() and time.monotonic() < deadline:
            with contextlib.suppress(KeyboardInterrupt):
                self._done.wait(0.2)
        pgid = self._pgid or getattr(getattr(self._manager, "provisioner", None), "pgid", None)
        if not self._done.is_set() and pgid:
            _kill_group(pgid)

    async def _execute(self, sockets: Path) -> None:
        self._task = asyncio.current_task()
        if self._interrupted:
            return
        nbclient = _needs("nbclient")
        jupyter_client = _needs("jupyter_client")
        # The kernel's sockets are Unix sockets in a private folder (IPC): over TCP, even on loopback,
        # other users of the machine could read the notebook's traffic, and ipykernel says so.
        manager = self._manager = jupyter_client.AsyncKernelManager(kernel_name="python3", transport="ipc",
                                                                    ip=str(sockets))
        client = nbclient.NotebookClient(self.book, km=manager, timeout=self.timeout,
                                         resources={"metadata": {"path": str(self.cwd)}},
                                         on_cell_execute=self._started)
        errors = nbclient.exceptions
        stop = "shutdown"
        # The kernel's own log (not its cells' output, which reaches the notebook) is kept for the
        # message when it dies; it is killed with this process if this process is killed.
        log = (sockets.parent / "kernel.log").open("wb")
        try:
            await client.async_execute(env=self.env, stdout=log, stderr=log,
                                       preexec_fn=proc.parent_death_signal(signal.SIGKILL))
        except errors.CellExecutionError as e:
            self.failure = _cell_failure(self.book, e)
        except errors.CellTimeoutError:
            self.failure, self.keep, stop = f"{self._cell()} ran past --timeout {self.timeout:g} s and was stopped", False, "interrupt"
        except (errors.DeadKernelError, asyncio.CancelledError):
            # nbclient reports its wait cancelled (by an interrupt here) as a dead kernel
            self.keep, stop = False, "kill"
            if not self._interrupted:
                self.failure = (f"the kernel died {self._when()} ({await self._exit_status(manager)})"
                                f"{_last_words(sockets.parent / 'kernel.log')}")
        except RuntimeError as e:  # nbclient's "Kernel died before replying", "didn't respond in 60 seconds"
            self.failure, self.keep, stop = f"the kernel did not start or answer: {_short(str(e))}", False, "kill"
        finally:
            self._stopping = True
            try:
                await self._stop(manager, client, stop)
            finally:
                log.close()
                # nbclient's own clean-up at exit, left registered when its kernel's start was cancelled
                atexit.unregister(client._cleanup_kernel)

    def _started(self, cell: Any, cell_index: int) -> None:
        self.cell = cell_index

    def _when(self) -> str:
        return f"while {self._cell()} ran" if self.cell is not None else "before its first cell"

    def _cell(self) -> str:
        """``code cell N (its first line)`` for the cell running, as a user finds it in Jupyter."""
        if self.cell is None:
            return "the kernel's first reply"
        number = sum(1 for c in self.book.cells[:self.cell + 1] if c.cell_type == "code")
        first = next((line.strip() for line in self.book.cells[self.cell].source.splitlines() if line.strip()), "")
        return f"code cell {number} ({_short(first, 60)})"

    async def _exit_status(self, manager: Any) -> str:
        code = None
        with contextlib.suppress(Exception):
            code = await manager.provisioner.poll()
        return "no exit status" if code is None else proc.exit_status(code)

    async def _stop(self, manager: Any, client: Any, how: str) -> None:
        """Stop the kernel: asked to shut down (interrupted first for ``interrupt``), killed when it has
        not stopped within STOP_GRACE s, or at once for ``kill``; then whatever is left of its process
        group (a notebook's own child processes) is killed too, so no process outlives the run."""
        self._pgid = getattr(manager.provisioner, "pgid", None) if manager.has_kernel else None
        try:
            if manager.has_kernel:
                if how == "interrupt":
                    with contextlib.suppress(Exception):
                        await manager.interrupt_kernel()
                manager.shutdown_wait_time = STOP_GRACE
                with contextlib.suppress(Exception):  # a kernel that cannot be asked is killed below
                    await manager.shutdown_kernel(now=how == "kill")
        finally:
            if client.kc is not None:
                client.kc.stop_channels()
            if self._pgid:
                _kill_group(self._pgid)


def _last_words(log: Path) -> str:
    """``: <what the kernel's log says last>`` (Caffe's F line first), or nothing for an empty log."""
    with contextlib.suppress(OSError):
        if text := log.read_text(errors="replace").strip():
            return ": " + proc.last_lines(text, 2).replace("\n", " / ")
    return ""


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _socket_folder() -> tempfile.TemporaryDirectory[str]:
    """A private folder for the kernel's sockets, in the temporary folder or, where its path is too long
    for a Unix socket (a long TMPDIR), in /tmp or /dev/shm."""
    candidates = dict.fromkeys([tempfile.gettempdir(), "/tmp", "/dev/shm"])
    for parent in candidates:
        if len(os.fsencode(os.path.join(parent, SOCKET_NAME))) > SOCKET_PATH_MAX:
            continue
        with contextlib.suppress(OSError):
            return tempfile.TemporaryDirectory(prefix="caffetool-kernel-", dir=parent)
    raise ConfigError(f"no folder for the kernel's sockets: TMPDIR {tempfile.gettempdir()} is too long for a Unix "
                      f"socket's path ({SOCKET_PATH_MAX} bytes) and /tmp cannot be written; set TMPDIR to a "
                      "shorter writable folder")


def _cell_failure(book: Any, error: Exception) -> str:
    """``code cell N raised ErrName: message`` for the first code cell whose output is an error."""
    code = [c for c in book.cells if c.cell_type == "code"]
    for number, cell in enumerate(code, 1):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                return f"code cell {number} raised {output.get('ename')}: {output.get('evalue')}"
    return str(error).strip().splitlines()[-1] if str(error).strip() else "a cell failed"


def _needs(module: str) -> Any:
    import importlib  # noqa: PLC0415

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(f"notebooks need the notebook extra, which is not installed: "
                          f"{extras.install_command('notebook')}") from None
