"""TensorBoard event files of a run, written live, so ``tensorboard --logdir runs`` shows every run.

Each session of a run (the training, each resume) writes one event file in the run's
``tensorboard/`` folder, with tensorboardX's ``EventsWriter`` (TensorBoard's own record format and
``Event`` messages). The step of every scalar is the iteration; the tags of the rows are
:mod:`caffetool.runs.scalars`' (which the run's MLflow metrics share), and the samples are

* ``system/cpu_percent``, ``system/rss_mb``, ``system/gpu<i>_util_percent``,
  ``system/gpu<i>_memory_mb``: the sampler's readings, at the iteration the run had reached.

Rows appear as the log shows them and reach the disk at most :data:`FLUSH_EVERY` seconds later
(and at the end). Writing is synchronous, without tensorboardX's writer thread, so a failed write
(a full disk) is raised here, as :class:`~caffetool.errors.RunError` naming the file, instead of
killing a thread; a resumed run's rows from before the resume are not written again.
"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from caffetool.errors import RunError
from caffetool.runs.logparse import Metrics
from caffetool.runs.scalars import NewRows

if TYPE_CHECKING:
    from tensorboardX.proto import event_pb2

FLUSH_EVERY = 5.0
PATTERN = "events.out.tfevents.*"


class RunEvents:
    """The event file of one session of a run; :meth:`update` writes the rows ``metrics`` gained."""

    def __init__(self, folder: Path, metrics: Metrics) -> None:
        from tensorboardX.event_file_writer import EventsWriter  # noqa: PLC0415 - 0.1 s to import, for trainings only

        self.folder = folder
        self.rows = NewRows(metrics)
        self.step = metrics.iteration
        self.last_flush = time.monotonic()
        self.problem: str | None = None  # a write of the sampler's thread that failed
        self._lock = threading.Lock()
        try:
            folder.mkdir(parents=True, exist_ok=True)
            # One file per session: a resume in the same second must not reopen (and truncate) the last one.
            self.writer = EventsWriter(str(folder / "events"), f".{len(list(folder.glob(PATTERN)))}")
        except OSError as e:
            raise RunError(f"cannot write the TensorBoard events in {folder}: {e.strerror}") from None

    def update(self, m: Metrics) -> None:
        """Writes the rows that ``m`` has and this file does not."""
        if self.problem:
            raise RunError(self.problem)
        self.step = m.iteration
        events = [self._event(step, tag, value) for step, tag, value in self.rows.take(m)]
        self._write(events, time.monotonic() - self.last_flush >= FLUSH_EVERY)

    def sample(self, values: dict[str, float]) -> None:
        """The sampler's readings, at the iteration the run has reached (called from its thread)."""
        try:
            self._write([self._event(self.step, f"system/{k}", v) for k, v in values.items()], False)
        except RunError as e:
            self.problem = self.problem or str(e)

    def close(self) -> None:
        """Everything written reaches the disk; the file is closed."""
        try:
            with self._lock:
                self.writer.close()
        except OSError as e:
            raise RunError(f"cannot write the TensorBoard events in {self.folder}: {e.strerror}") from None

    def discard(self) -> None:
        """Closes the file after a failure, as far as it still can be: what could not be written is lost."""
        with contextlib.suppress(OSError), self._lock:
            self.writer.close()

    def _write(self, events: list[event_pb2.Event], flush: bool) -> None:
        try:
            with self._lock:
                for event in events:
                    self.writer.write_event(event)
                if flush:
                    self.writer.flush()
                    self.last_flush = time.monotonic()
        except OSError as e:
            raise RunError(f"cannot write the TensorBoard events in {self.folder}: {e.strerror}") from None

    @staticmethod
    def _event(step: int, tag: str, value: float) -> event_pb2.Event:
        from tensorboardX.proto import event_pb2  # noqa: PLC0415 - imported with the writer
        from tensorboardX.summary import scalar  # noqa: PLC0415

        return event_pb2.Event(wall_time=time.time(), step=step, summary=scalar(tag, value))
