"""Client of the engine agents' load streams for the admission service (an edge: gRPC).

One owned task per engine agent follows ``WatchLoad`` and feeds every view to the
``LoadTracker``; a lost stream is retried with backoff and its engine forgotten (a renewed stream
restarts its sequence). One more task probes the tracker every ``probe_s`` so the pressure
history stays current while the gates are closed.
"""

from __future__ import annotations

import asyncio
import logging
import time

import grpc

from services.admission.load_view import EngineLoad, LoadTracker
from services.common.pb import common_pb2
from services.common.runtime.records import published_s
from services.engine_agent.client import EngineAgentClient

log = logging.getLogger(__name__)


def engine_load(view: common_pb2.LoadView) -> EngineLoad:
    """A tracker report from the wire."""
    return EngineLoad(view.header.id, view.model, view.header.sequence, published_s(view.header),
                      view.running, view.waiting, view.max_running, view.kv_blocks_used,
                      view.kv_blocks_total, view.fill_running, view.fill_kv_blocks,
                      view.block_size or 16)


class LoadWatcher:
    """Follows every engine's load stream into one tracker; ``close`` stops and awaits all."""

    def __init__(self, tracker: LoadTracker, targets: list[str], interval_s: float = 0.1,
                 probe_s: float = 0.25) -> None:
        self.tracker, self.interval_s, self.probe_s = tracker, interval_s, probe_s
        self.clients = {t: EngineAgentClient(t) for t in targets}
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        """Start one follower per engine and the prober."""
        self._tasks = [asyncio.create_task(self._follow(t), name=f"load-{t}")
                       for t in self.clients]
        self._tasks.append(asyncio.create_task(self._probe(), name="load-probe"))

    async def _follow(self, target: str) -> None:
        client, engine_id, delay = self.clients[target], "", 0.2
        while True:
            try:
                async for view in client.watch_load(self.interval_s):
                    engine_id = view.header.id
                    self.tracker.observe(engine_load(view), time.time())
                    delay = 0.2
            except grpc.aio.AioRpcError as err:
                log.warning("engine %s load stream lost (%s); retrying", target,
                            err.code().name)
            if engine_id:
                self.tracker.forget(engine_id)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _probe(self) -> None:
        while True:
            self.tracker.probe(time.time())
            await asyncio.sleep(self.probe_s)

    async def close(self) -> None:
        """Stop every task and close the channels."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(c.close() for c in self.clients.values()),
                             return_exceptions=True)


__all__ = ["LoadWatcher", "engine_load"]
