"""Running one stage (``execution.Executor``): a generation accounts its engine seconds by
priority and teaches the decode pace."""

from __future__ import annotations

import json

from services.common.values.generation import Priority
from tests.gateway.local_ports import MODEL, local_core, routing_demand

INPUTS = {"functions": json.dumps([{"name": "get_weather"}]), "query": "Weather in Oslo?"}


async def test_running_a_stage_accounts_its_engine_seconds_by_priority() -> None:
    async with local_core(c2=False, engines=1) as core:
        ex = core.stages.executor
        d = core.stages.naming.resolved(routing_demand("acme", "wf", "router", INPUTS))
        assert ex.pace.engine_s_per_token(MODEL) is None  # nothing learned yet
        run = await ex.execute(d, d.stage, Priority.CANONICAL, d.request_id, 30.0)
        assert run.stored.text and run.storable
        assert ex.engine_s[Priority.CANONICAL] > 0 and Priority.FILL not in ex.engine_s
        assert ex.pace.engine_s_per_token(MODEL) is not None
