"""Dynamic batching: concurrent requests' images become one forward pass, as Triton's dynamic batcher
does (``max_batch_size``, ``max_queue_delay_microseconds``).

A request's rows wait in a queue; one worker takes the oldest, then keeps taking queued requests while
the batch stays within ``max_batch`` rows, waiting up to ``max_delay_s`` for more (0: what is queued
now, and no more). Requests whose client has gone (their future cancelled) are dropped before the
pass. The batch runs in a worker thread; each request gets its own rows back. Past ``max_queue``
queued rows a request is refused at once (:class:`QueueFull`, answered 503) rather than left to wait.

Counts for the metrics: requests (inferences) against forward passes (executions), and each batch's
size and each request's time in the queue, reported to ``observe`` when given.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import numpy as np

from caffetool.errors import CaffetoolError, ConfigError


class QueueFull(CaffetoolError):
    """More rows are waiting than the queue holds (answered 503: try again)."""


class RequestTooLarge(ConfigError):
    """One request with more rows than the whole queue holds: no retry can help (answered 400)."""


@dataclass(frozen=True)
class Batching:
    """The server's batching settings (``demo.serve --max-batch --max-queue-delay-us --max-queue``)."""

    max_batch: int = 1  # 1: each request alone (no batching)
    max_delay_s: float = 0.0
    max_queue: int = 256  # rows


@dataclass
class _Waiting:
    rows: np.ndarray
    done: asyncio.Future
    queued_at: float = field(default_factory=time.perf_counter)


@dataclass
class Counts:
    inferences: int = 0  # rows answered
    requests: int = 0
    executions: int = 0  # forward passes
    dropped: int = 0  # requests whose client had gone


class Batcher:
    """One queue in front of one forward function; see the module's docstring."""

    @classmethod
    def of(cls, forward: Callable[[np.ndarray], np.ndarray], settings: Batching,
           observe: Callable[[int, list[float]], None] | None = None) -> Batcher:
        return cls(forward, settings.max_batch, settings.max_delay_s, settings.max_queue, observe)

    def __init__(self, forward: Callable[[np.ndarray], np.ndarray], max_batch: int, max_delay_s: float = 0.0,
                 max_queue: int = 1024,
                 observe: Callable[[int, list[float]], None] | None = None) -> None:
        self.forward, self.max_batch, self.max_delay_s, self.max_queue = forward, max_batch, max_delay_s, max_queue
        self.observe = observe
        self.counts = Counts()
        self._queue: deque[_Waiting] = deque()
        self._queued_rows = 0
        self._wake: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None

    async def submit(self, rows: np.ndarray) -> np.ndarray:
        """The forward pass's output for ``rows`` (n, ...), computed with whatever else is queued."""
        if len(rows) > self.max_queue:
            raise RequestTooLarge(f"{len(rows)} images in one request, more than the queue holds ({self.max_queue}, "
                                  "--max-queue): send them in smaller requests")
        if self._queued_rows + len(rows) > self.max_queue:
            raise QueueFull(f"{self._queued_rows} images are waiting, the queue holds {self.max_queue}; retry later")
        loop = asyncio.get_running_loop()
        if self._worker is None or self._worker.done():
            self._wake = asyncio.Event()
            self._worker = loop.create_task(self._run())
        waiting = _Waiting(rows, loop.create_future())
        self._queue.append(waiting)
        self._queued_rows += len(rows)
        self._wake.set()
        return await waiting.done

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                batch = await self._take()
                if batch:
                    await self._pass(batch)

    async def _take(self) -> list[_Waiting]:
        """The oldest request and those after it that fit in ``max_batch`` rows, waiting up to the delay."""
        batch: list[_Waiting] = []
        rows = 0
        deadline = time.perf_counter() + self.max_delay_s
        while True:
            while self._queue and (not batch or rows + len(self._queue[0].rows) <= self.max_batch):
                item = self._queue.popleft()
                self._queued_rows -= len(item.rows)
                if item.done.cancelled():
                    self.counts.dropped += 1
                    continue
                batch.append(item)
                rows += len(item.rows)
            left = deadline - time.perf_counter()
            if rows >= self.max_batch or left <= 0 or (self._queue and batch):
                return batch
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), left)
            except asyncio.TimeoutError:
                pass

    async def _pass(self, batch: list[_Waiting]) -> None:
        live = [item for item in batch if not item.done.cancelled()]
        self.counts.dropped += len(batch) - len(live)
        if not live:
            return
        started = time.perf_counter()
        joined = np.concatenate([item.rows for item in live]) if len(live) > 1 else live[0].rows
        try:
            out = await anyio.to_thread.run_sync(self.forward, joined)
        except Exception as e:  # noqa: BLE001 - each waiting request gets the error the pass raised
            for item in live:
                if not item.done.done():
                    item.done.set_exception(e)
            return
        self.counts.executions += 1
        self.counts.requests += len(live)
        self.counts.inferences += len(joined)
        if self.observe is not None:
            self.observe(len(joined), [started - item.queued_at for item in live])
        at = 0
        for item in live:
            if not item.done.done():
                item.done.set_result(out[at:at + len(item.rows)])
            at += len(item.rows)
