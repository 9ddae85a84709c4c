"""Dynamic batching: concurrent requests' images become one forward pass, as Triton's dynamic batcher
does (``max_batch_size``, ``max_queue_delay_microseconds``).

A request's rows wait in a queue; one worker takes the oldest, then keeps taking queued requests while
the batch stays within ``max_batch`` rows, waiting up to ``max_delay_s`` for more (0: what is queued
now, and no more). Requests whose client has gone (their future cancelled) are dropped before the
pass. The batch runs on the batcher's own thread (one per model: a net is never run by two threads);
each request gets its own rows back. Past ``max_queue``
queued rows a request is refused at once (:class:`QueueFull`, answered 503) rather than left to wait.

Counts for the metrics: requests (inferences) against forward passes (executions), and each batch's
size and each request's time in the queue, reported to an observer (:class:`Observer`) when given.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import numpy as np

from caffetool.errors import CaffetoolError, ConfigError

T = TypeVar("T")


async def off_loop(fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)`` on the event loop's default thread pool: a request's work that would hold the
    loop (decoding an image). asyncio's own pool, not anyio's ``to_thread``: with 16 requests at
    once a call costs 32 us there against 77 us (measured on this machine's 2 cores), and a LeNet
    request makes two such calls."""
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


class ClientLeft(CaffetoolError):
    """The client closed its connection before its answer was ready (nobody to answer)."""


async def unless_left(receive: Callable[[], Awaitable[dict]], work: Awaitable[T]) -> T:
    """``work``'s result; if the client leaves first (``receive``, the request's ASGI channel, says
    ``http.disconnect``), the request's task is cancelled where it waits, so the batcher drops a
    request still queued before its pass, and :class:`ClientLeft` is raised. For a request whose
    body has been read. ``work`` runs in the calling task: a task of its own would be resumed a turn
    of the loop later than its request, and under load that turn is what the slowest answers wait."""
    caller = asyncio.current_task()
    left = asyncio.Event()

    async def watch() -> None:
        await _disconnected(receive)
        left.set()
        caller.cancel()

    watcher = asyncio.ensure_future(watch())
    try:
        return await work
    except asyncio.CancelledError:
        if left.is_set():
            raise ClientLeft("the client left before its answer") from None
        raise
    finally:
        watcher.cancel()


async def _disconnected(receive: Callable[[], Awaitable[dict]]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class QueueFull(CaffetoolError):
    """More rows are waiting than the queue holds (answered 503: try again)."""


class RequestTooLarge(ConfigError):
    """One request with more rows than the whole queue holds: no retry can help (answered 400)."""


class Observer(Protocol):
    """What the batcher reports (:class:`caffetool.serving.telemetry.ModelObserver`)."""

    def passed(self, images: int, waits: list[float]) -> None: ...

    def dropped(self, requests: int) -> None: ...


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
           observer: Observer | None = None) -> Batcher:
        return cls(forward, settings.max_batch, settings.max_delay_s, settings.max_queue, observer)

    def __init__(self, forward: Callable[[np.ndarray], np.ndarray], max_batch: int, max_delay_s: float = 0.0,
                 max_queue: int = 1024,
                 observer: Observer | None = None) -> None:
        self.forward, self.max_batch, self.max_delay_s, self.max_queue = forward, max_batch, max_delay_s, max_queue
        self.observer = observer
        self.counts = Counts()
        self._queue: deque[_Waiting] = deque()
        self._queued_rows = 0
        self._wake: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="forward")  # a net runs on one thread

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
                    self._dropped(1)
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

    def _dropped(self, requests: int) -> None:
        self.counts.dropped += requests
        if self.observer is not None:
            self.observer.dropped(requests)

    async def _pass(self, batch: list[_Waiting]) -> None:
        live = [item for item in batch if not item.done.cancelled()]
        if len(live) < len(batch):
            self._dropped(len(batch) - len(live))
        if not live:
            return
        started = time.perf_counter()
        joined = np.concatenate([item.rows for item in live]) if len(live) > 1 else live[0].rows
        try:
            out = await asyncio.get_running_loop().run_in_executor(self._thread, self.forward, joined)
        except Exception as e:  # noqa: BLE001 - each waiting request gets the error the pass raised
            for item in live:
                if not item.done.done():
                    item.done.set_exception(e)
            return
        self.counts.executions += 1
        self.counts.requests += len(live)
        self.counts.inferences += len(joined)
        if self.observer is not None:
            self.observer.passed(len(joined), [started - item.queued_at for item in live])
        at = 0
        for item in live:
            if not item.done.done():
                item.done.set_result(out[at:at + len(item.rows)])
            at += len(item.rows)
