"""A returning tool result continues on the engine that holds the workflow's history, also when
another gateway replica (or this one before a restart) ran the history call: the engines' own
prefix caches say where it is (found by the fault matrix: a DeliverResult retried on the other
replica was refused with 'engine_id required')."""

from __future__ import annotations

from contextlib import AsyncExitStack

from services.common.values.generation import GenerationRequest, Sampling
from services.gateway.adapters.engines import EnginePool
from tests.factories import MODEL, engine_agent

HISTORY = "You are a shopping agent. Inspect the product and its reviews carefully. " * 12


async def test_a_replica_without_affinity_finds_the_engine_whose_cache_holds_the_history(
) -> None:
    async with AsyncExitStack() as stack:
        agents = [await stack.enter_async_context(engine_agent(engine_id=f"engine-{i}"))
                  for i in range(3)]
        targets = [a.address for a in agents]
        ran, fresh = EnginePool(targets[2:]), EnginePool(targets)  # two gateway replicas
        for pool in (ran, fresh):
            await pool.start(timeout_s=10)
            stack.push_async_callback(pool.close)
        execution = await ran.generate(  # the history ran on the last engine, through `ran`
            GenerationRequest("history-1", MODEL, HISTORY, Sampling(max_tokens=4)), 10,
            prefix_key="acme/wf-1")
        assert execution.engine_id == "engine-2"
        assert await ran.locate_history("acme/wf-1", MODEL, HISTORY) == "engine-2"
        # the other replica never routed this workflow; only engine-2's cache holds it
        assert await fresh.locate_history("acme/wf-1", MODEL, HISTORY) == "engine-2"
        # nothing cached anywhere: any healthy engine (the least loaded) is the answer
        assert await fresh.locate_history("acme/wf-2", MODEL, "an unrelated prompt") in {
            "engine-0", "engine-1", "engine-2"}
        assert await fresh.locate_history("acme/wf-1", "no-such-model", HISTORY) == ""
