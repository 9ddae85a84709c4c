"""The dynamic batcher with a real forward function (numpy; the engine's passes are tested with the
server): concurrent requests become one pass, each gets its own rows, a full queue is refused, a
request whose client has gone is dropped before the pass."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from caffetool.serving.batcher import Batcher, QueueFull


def recorder():
    passes: list[int] = []
    lock = threading.Lock()

    def forward(rows: np.ndarray) -> np.ndarray:
        with lock:
            passes.append(len(rows))
        time.sleep(0.02)  # a pass long enough for the next requests to queue behind it
        return rows.reshape(len(rows), -1).sum(1, keepdims=True) * 2
    return forward, passes


def test_concurrent_requests_share_passes_and_get_their_own_rows():
    forward, passes = recorder()

    async def main():
        batcher = Batcher(forward, max_batch=8)
        inputs = [np.full((1, 3), i, np.float32) for i in range(16)]
        outs = await asyncio.gather(*(batcher.submit(x) for x in inputs))
        return batcher, outs
    batcher, outs = asyncio.run(main())
    assert [float(o[0, 0]) for o in outs] == [6.0 * i for i in range(16)]
    assert sum(passes) == 16 and max(passes) <= 8 and len(passes) < 16
    assert batcher.counts.inferences == 16 and batcher.counts.executions == len(passes)


def test_a_delay_gathers_requests_that_arrive_later():
    forward, passes = recorder()

    async def main():
        batcher = Batcher(forward, max_batch=4, max_delay_s=0.2)

        async def late(i):
            await asyncio.sleep(0.01 * i)
            return await batcher.submit(np.ones((1, 2), np.float32))
        await asyncio.gather(*(late(i) for i in range(4)))
    asyncio.run(main())
    assert passes == [4]


def test_a_full_queue_is_refused_and_a_gone_client_is_dropped():
    forward, passes = recorder()

    async def main():
        batcher = Batcher(forward, max_batch=1, max_queue=3)
        first = asyncio.ensure_future(batcher.submit(np.ones((1, 1), np.float32)))
        gone = asyncio.ensure_future(batcher.submit(np.ones((1, 1), np.float32)))
        third = asyncio.ensure_future(batcher.submit(np.ones((1, 1), np.float32)))
        await asyncio.sleep(0)
        with pytest.raises(QueueFull, match="the queue holds 3"):
            await batcher.submit(np.ones((1, 1), np.float32))
        gone.cancel()
        await asyncio.gather(first, third)
        return batcher
    batcher = asyncio.run(main())
    assert batcher.counts.dropped == 1 and passes == [1, 1]
