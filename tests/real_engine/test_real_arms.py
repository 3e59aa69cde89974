"""Routing workflows through the whole in-process mesh on real engines (tiny model).

Gateway, library and engine agents over a real vLLM (embedded, prefix leases on) and a real
SGLang (a server beside the agent): four serial workflows, one of them an exact replay of an
earlier one, under the no-reuse floor, the floor again with its workflows concurrent (another
batch composition), and the full arm. Greedy decoding on these CPU kernels is not
batch-invariant, so the full arm's outputs must equal the floor's except where a divergence is
the engine's own (``loadgen.arms.divergence``: the floor's rerun differs too, or the texts part at a
near tie of the floor's top two logits); any other divergence fails. The full arm must serve at
least one stage from the library and one from a promoted fill, and leave no request running or
waiting and no lease held on any engine.
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import time

import pytest

from loadgen.arms.divergence import EPSILON, LogitProbe, classify, summary
from loadgen.arms.runner import ArmResult, run_schedule
from loadgen.meshes.config import MeshConfig
from loadgen.meshes.live import in_process_mesh
from loadgen.meshes.real_engines import RealEngine, shared_engines
from loadgen.workloads import build_schedule, get_workload
from loadgen.workloads.base import SimClock
from services.engine_agent import tiny_model_path
from tests.real_engine.engines import require_sglang, require_vllm

pytestmark = [pytest.mark.real_engine, pytest.mark.slow]

WORKFLOWS = 4


async def _arm(arm: str, config: MeshConfig, workload, schedule
               ) -> tuple[ArmResult, dict[str, int], list[dict[str, int]]]:
    calls: dict = {}
    async with in_process_mesh(config, arm, workload.corpus_source) as mesh:
        results = await run_schedule(mesh.address, workload, schedule, SimClock(1.0),
                                     calls=calls)
        counters = mesh.counters()
        states = await _settled(mesh)
    return ArmResult(arm, schedule.digest(), results, counters, calls), counters, states


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
async def test_routing_on_a_real_engine_equals_the_floor_but_for_the_engines_own_variation(
        engine: str) -> None:
    (require_vllm if engine == "vllm" else require_sglang)()
    workload = get_workload("routing")
    schedule = build_schedule(workload, WORKFLOWS, seed=0, arrival="serial", replay_rate=0.5)
    keys = [a.instance.key for a in schedule.arrivals]
    assert len(set(keys)) < len(keys)  # an exact replay is in the schedule
    together = dataclasses.replace(schedule, arrival="poisson", arrivals=tuple(
        dataclasses.replace(a, at_s=0.0) for a in schedule.arrivals))  # all at once
    model = tiny_model_path(engine)
    # one engine lent to the three meshes, its prefix cache reset between them (each arm starts
    # cold, as on a fresh engine; an engine that does not settle or refuses the reset fails)
    config = MeshConfig(engines=1, time_scale=1.0, real=RealEngine(engine, model, shared=True))
    async with shared_engines():
        floor, _, floor_states = await _arm("floor", config, workload, schedule)
        rerun, _, _ = await _arm("floor", config, workload, together)
        full, counters, states = await _arm("full", config, workload, schedule)

    assert not any(r.error for r in floor.results + rerun.results + full.results)
    probe = LogitProbe(model)
    found = classify(full.results, floor.results, rerun.results, floor.calls, probe.gap)
    report = summary(found)
    print(f"{engine}: divergences from the floor {report['counts']}: {report['divergences']}")
    assert report["allowed"], report  # value equivalence, up to the engine's own variation
    # the check can fail: along the floor's first answer, most splits would be clear choices
    first = floor.calls[floor.results[0].workflow_id][0]
    gaps = [g for _, g in probe.gaps(first.prompt, floor.results[0].stages[0].text)]
    assert statistics.median(gaps) > 2 * EPSILON, gaps
    sources = [s.source for r in full.results for s in r.stages]
    assert sources.count("library") >= 1
    assert sources.count("promoted_fill") >= 1 and counters["stages_promoted"] >= 1
    idle = {"running": 0, "waiting": 0, "leases": 0, "leased_blocks": 0}
    assert floor_states == [idle] and states == [idle]  # every slot and lease released
