"""The gateway's engine-load view keeps DESIGN.md §3's record rule: a stale, future-dated,
duplicate or out-of-order load view is refused (and counted), the last good one kept."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from services.common.pb import common_pb2
from services.common.runtime.records import make_header
from services.common.values.generation import LoadReport
from services.gateway.adapters.engines import LOAD_MAX_AGE_S, EnginePool
from services.gateway.adapters.router import EngineState

TARGET = "127.0.0.1:1"


def view(sequence: int, running: int, age_s: float = 0.0) -> common_pb2.LoadView:
    return common_pb2.LoadView(header=make_header("e0", sequence, "engine_agent/e0",
                                                  time.time() - age_s),
                               running=running, max_running=8)


class ScriptedAgent:
    def __init__(self, views: list[common_pb2.LoadView]) -> None:
        self.views, self.sent = views, asyncio.Event()

    async def _stream(self) -> AsyncIterator[common_pb2.LoadView]:
        for v in self.views:
            yield v
        self.sent.set()
        await asyncio.Event().wait()

    async def close(self) -> None:
        return None

    def watch_load(self, interval_s: float = 0.0, timeout_s: float = 3600.0
                   ) -> AsyncIterator[common_pb2.LoadView]:
        return self._stream()


async def test_views_breaking_the_record_rule_are_refused_and_the_last_good_one_kept() -> None:
    pool = EnginePool([TARGET])
    real = pool.clients[TARGET]
    agent = ScriptedAgent([
        view(1, running=1),
        view(1, running=9),                         # duplicate
        view(0, running=9),                         # older sequence
        view(2, running=9, age_s=LOAD_MAX_AGE_S + 1),  # stale
        view(3, running=9, age_s=-30),              # from the future
    ])
    pool.clients[TARGET] = agent  # type: ignore[assignment]
    pool.states[TARGET] = EngineState(engine_id="e0", target=TARGET, model="m",
                                      max_model_len=1024, load=LoadReport(0, 0, 8, 0, 64))
    task = asyncio.create_task(pool._watch(TARGET))
    try:
        await asyncio.wait_for(agent.sent.wait(), 5)
        assert pool.states[TARGET].load.running == 1
        assert pool.refused_views == 4
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await real.close()
