"""Routing workflows through the whole in-process mesh on real engines (tiny model).

Gateway, library and engine agents over a real vLLM (embedded, prefix leases on) and a real
SGLang (a server beside the agent): four serial workflows, one of them an exact replay of an
earlier one, under the no-reuse floor and the full arm. The full arm must return exactly the
floor's outputs, serve at least one stage from the library and one from a promoted fill, and
leave no request running or waiting and no lease held on any engine.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from loadgen.arms import ArmResult, MeshConfig, in_process_mesh, mismatches, run_schedule
from loadgen.real_engines import RealEngine, tiny_model
from loadgen.workloads import build_schedule, get_workload
from loadgen.workloads.base import SimClock
from tests.real_engine.engines import require_sglang, require_vllm

pytestmark = [pytest.mark.real_engine, pytest.mark.slow]

WORKFLOWS = 4


async def _arm(arm: str, config: MeshConfig, workload, schedule
               ) -> tuple[ArmResult, dict[str, int], list[dict[str, int]]]:
    async with in_process_mesh(config, arm, workload.corpus_source) as mesh:
        results = await run_schedule(mesh.address, workload, schedule, SimClock(1.0))
        counters = mesh.counters()
        states = await _settled(mesh)
    return ArmResult(arm, schedule.digest(), results, counters), counters, states


async def _settled(mesh, timeout_s: float = 20.0) -> list[dict[str, int]]:
    """The engines' states once nothing runs (aborted losers drain; SGLang's gauges lag a
    little), or as they are at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        states = await mesh.engine_states()
        if all(not any(s.values()) for s in states) or time.monotonic() > deadline:
            return states
        await asyncio.sleep(0.2)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
async def test_routing_on_a_real_engine_equals_the_floor_with_hits_and_promotions(
        engine: str) -> None:
    (require_vllm if engine == "vllm" else require_sglang)()
    workload = get_workload("routing")
    schedule = build_schedule(workload, WORKFLOWS, seed=0, arrival="serial", replay_rate=0.5)
    keys = [a.instance.key for a in schedule.arrivals]
    assert len(set(keys)) < len(keys)  # an exact replay is in the schedule
    config = MeshConfig(engines=1, time_scale=1.0, real=RealEngine(engine, tiny_model(engine)))
    floor, _, floor_states = await _arm("floor", config, workload, schedule)
    full, counters, states = await _arm("full", config, workload, schedule)

    assert not any(r.error for r in floor.results + full.results)
    assert mismatches(full, floor) == []  # value equivalence on a real engine
    sources = [s.source for r in full.results for s in r.stages]
    assert sources.count("library") >= 1
    assert sources.count("promoted_fill") >= 1 and counters["stages_promoted"] >= 1
    idle = {"running": 0, "waiting": 0, "leases": 0, "leased_blocks": 0}
    assert floor_states == [idle] and states == [idle]  # every slot and lease released
