"""An existing PyTorch export run for ``export.check`` in a child process, within a time limit.

Checking a ``model.py`` means running it: Python has no other way to know what a module computes.
The file may be anything (edited by hand, or written to pass a check), so it runs in a child of its
own: a file that exits, loops or crashes ends or hangs that child, never the check, which says so
in one error naming the file and the limit. The limit holds for each step apart: loading the
module with its weights, and each batch.

The two talk through files in a private folder and one line at a time: the parent writes a batch's
inputs (``.npz``) and names its folder on the child's stdin; the child writes every layer's outputs
and what ``forward`` returned (``.npz``), then ``done`` on its stdout (``ready`` once loaded, or
``error`` and a JSON string). The child's own stdout is that channel alone: whatever the module
prints goes to stderr, which the parent keeps for its message. The parent reads the arrays back
with pickles refused, so nothing the file writes runs in the check.

    python -P -m caffetool.export.torchchild SPEC_JSON
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from caffetool.errors import ExportError
from caffetool.proc import exit_status, last_lines, parent_death_signal


class CheckedModule:
    """The child running one ``model.py``; call it with a batch's feeds as the verification's runner."""

    def __init__(self, path: Path, weights: Path, class_name: str, inputs: list[str], layers: list[str],
                 outputs: list[str], seconds: float, folder: Path) -> None:
        self.path, self.seconds, self.folder = path, seconds, folder
        self.inputs, self.layers, self.outputs = inputs, layers, outputs
        spec = {"model": str(path), "weights": str(weights), "class": class_name, "inputs": inputs,
                "layers": layers, "outputs": outputs}
        self.log = (folder / "stderr").open("wb")
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        self.child = subprocess.Popen(  # noqa: S603 - our own module, its argument a JSON string
            [sys.executable, "-P", "-m", "caffetool.export.torchchild", json.dumps(spec)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, cwd=folder, env=env,
            preexec_fn=parent_death_signal(signal.SIGKILL))
        self.pending = b""
        try:
            self._answer("loading it with its weights")
        except BaseException:
            self.close()  # a file that hangs or fails while loading: its child ends here, not with caffetool
            raise

    def __call__(self, feeds: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        batch = self.folder / "batch"
        batch.mkdir(exist_ok=True)
        np.savez(batch / "feeds.npz", *(feeds[name] for name in self.inputs))
        try:
            self.child.stdin.write(f"{batch}\n".encode())
            self.child.stdin.flush()
        except OSError:
            pass  # the child has gone: _answer says how
        self._answer("running a batch")
        values = self._arrays(batch / "outputs.npz")
        layers = dict(zip(self.layers, values))
        return layers, dict(zip(self.outputs, values[len(self.layers):]))

    def _answer(self, doing: str) -> None:
        """Wait for the child's next line, at most the limit: ``ready``/``done``, or its error raised."""
        deadline = time.monotonic() + self.seconds
        line = self._line(deadline)
        if line is None:
            with contextlib.suppress(subprocess.TimeoutExpired):  # its channel closed: it is ending, or hangs
                self.child.wait(max(deadline - time.monotonic(), 0.1))
        if line is None and self.child.poll() is None:
            raise ExportError(f"{self.path} did not finish {doing} within {self.seconds:g} s (export.check "
                              f"--timeout), so its check was stopped: the check runs the file, and this one "
                              "hangs or is far slower than the net (nothing was changed)")
        if line is None:
            said = self._stderr()
            raise ExportError(f"{self.path} ended the check's process while {doing} "
                              f"({exit_status(self.child.returncode)}); an export never exits by itself, so this "
                              "file is not one as caffetool writes it: export the model again"
                              + (f" ({last_lines(said, 1)})" if said.strip() else ""))
        if line.startswith("error "):
            try:
                message = json.loads(line[len("error "):])
            except ValueError:
                message = line
            raise ExportError(str(message))
        if line not in ("ready", "done"):
            raise ExportError(f"{self.path} wrote to the check's channel while {doing} ({line[:80]!r}): the check "
                              "cannot trust what it says; restore the file as the export wrote it")

    def _line(self, deadline: float) -> str | None:
        """The child's next line, or None if it ended or the deadline passed first."""
        with selectors.DefaultSelector() as watch:
            watch.register(self.child.stdout, selectors.EVENT_READ)
            while b"\n" not in self.pending:
                left = deadline - time.monotonic()
                if left <= 0 or not watch.select(left):
                    return None
                chunk = os.read(self.child.stdout.fileno(), 65536)
                if not chunk:
                    return None
                self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return line.decode(errors="replace").strip()

    def _arrays(self, path: Path) -> list[np.ndarray]:
        """The child's outputs, as numbers; pickles refused, so reading them runs nothing."""
        try:
            with np.load(path, allow_pickle=False) as stored:
                values = [stored[f"arr_{k}"] for k in range(len(stored.files))]
        except (OSError, ValueError, KeyError) as e:
            raise ExportError(f"{self.path} gave outputs the check cannot read ({e}): restore the file as the "
                              "export wrote it") from None
        if len(values) != len(self.layers) + len(self.outputs):
            raise ExportError(f"{self.path} gave {len(values)} outputs where the net has "
                              f"{len(self.layers) + len(self.outputs)}: restore the file as the export wrote it")
        for name, value in zip([*self.layers, *self.outputs], values):
            if value.ndim == 0 or not (np.issubdtype(value.dtype, np.number) or value.dtype == bool):
                raise ExportError(f"{self.path} gives {name!r} as {value.dtype} of shape {value.shape}, not a batch "
                                  "of numbers: restore the file as the export wrote it")
        return [v.astype(np.float32) if v.dtype != np.float32 else v for v in values]

    def _stderr(self) -> str:
        self.log.flush()
        return (self.folder / "stderr").read_text(errors="replace")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.child.stdin.close()
        if self.child.poll() is None:
            self.child.kill()
        self.child.wait()
        self.child.stdout.close()
        self.log.close()


@contextlib.contextmanager
def checked(path: Path, weights: Path, class_name: str, inputs: list[str], layers: list[str], outputs: list[str],
            seconds: float) -> Iterator[CheckedModule]:
    """``path`` with ``weights`` running in a child, for as long as the ``with`` lasts; the child is
    ended however the block ends."""
    with tempfile.TemporaryDirectory(prefix="caffetool-check-") as folder:
        module = CheckedModule(path.absolute(), weights.absolute(), class_name, inputs, layers, outputs, seconds,
                               Path(folder))
        try:
            yield module
        finally:
            module.close()


def _serve(spec: dict[str, Any], channel: IO[str]) -> None:
    """The child: load the module, say ``ready``, then run each batch named on stdin."""
    from caffetool.backends import torchmodule  # noqa: PLC0415 - torch, in the child only
    from caffetool.export import torchnet  # noqa: PLC0415

    filename = spec["model"]
    source, weights = Path(filename).read_text(), Path(spec["weights"]).read_bytes()
    module = torchmodule.instance(source, spec["class"], weights, filename)
    run = torchnet.module_runner(module, spec["inputs"], spec["layers"], spec["outputs"], filename)
    channel.write("ready\n")
    for line in sys.stdin:
        batch = Path(line.strip())
        with np.load(batch / "feeds.npz", allow_pickle=False) as stored:
            feeds = {name: stored[f"arr_{k}"] for k, name in enumerate(spec["inputs"])}
        layers, outputs = run(feeds)
        np.savez(batch / "outputs.npz", *(layers[n] for n in spec["layers"]), *(outputs[n] for n in spec["outputs"]))
        channel.write("done\n")


def main(argv: list[str]) -> int:
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # what the module prints goes to stderr; stdout is the channel's alone
    try:
        _serve(json.loads(argv[0]), channel)
    except Exception as e:  # noqa: BLE001 - every failure of the file becomes the parent's one error
        why = str(e) if isinstance(e, ExportError) else f"{spec_name(argv)} cannot be run: {type(e).__name__}: {e}"
        channel.write(f"error {json.dumps(why)}\n")
        return 1
    return 0


def spec_name(argv: list[str]) -> str:
    try:
        return str(json.loads(argv[0])["model"])
    except (ValueError, KeyError, IndexError, TypeError):
        return "the model"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
