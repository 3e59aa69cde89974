"""The gateway's store pipe to the csl is bounded: a stalled stream refuses stores at once
(a missed reuse) instead of queueing them without end."""

from __future__ import annotations

import asyncio

from services.common.values.reads import ReadSet
from services.csl.client import CslClient, PutPipe
from tests.csl.factories import name


async def test_stores_past_max_queued_are_refused_at_once_while_the_stream_is_stalled() -> None:
    async with CslClient("127.0.0.1:1") as client:  # never reached: the stream is stalled
        pipe = PutPipe(client, max_queued=2)
        stalled = asyncio.create_task(asyncio.sleep(3600))  # a stream stuck in write()
        pipe._task = stalled  # noqa: SLF001 - stands in for the stream task
        waiting = [asyncio.create_task(pipe.put(client.put_request(name(i), b"r",
                                                                   ReadSet.pure()), timeout_s=5))
                   for i in range(2)]
        await asyncio.sleep(0)
        start = asyncio.get_running_loop().time()
        assert await pipe.put(client.put_request(name(7), b"r", ReadSet.pure())) is False
        assert asyncio.get_running_loop().time() - start < 1.0  # refused, not queued
        assert pipe._queue.qsize() == 2  # noqa: SLF001 - the bounded queue is the subject
        stalled.cancel()
        for task in waiting:
            task.cancel()
        await asyncio.gather(stalled, *waiting, return_exceptions=True)
