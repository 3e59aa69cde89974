"""The LADS replay: every policy on one small workload, in virtual time, with the real parts."""

from __future__ import annotations

import asyncio

import pytest
from aiotools import VirtualClock

from loadgen.arms.lads_replay import CohortService, run_policy
from services.corpus.loaders import default_data_dir
from services.delivery.policies import POLICIES

PRESET = "qwen2.5-7b-rtxpro5000"

pytestmark = pytest.mark.skipif(not default_data_dir().exists(),
                                reason=f"shared data sets absent at {default_data_dir()}")


@pytest.fixture(scope="module")
def runs() -> dict:
    from loadgen.workloads.lads import cohort_workload
    workload = cohort_workload(7, n=4, cohort_size=2, calls=3)
    return {policy: run_policy(workload, policy, PRESET) for policy in POLICIES}


def test_every_policy_finishes_every_workflow(runs: dict) -> None:
    for policy, result in runs.items():
        assert not result.failed, (policy, result.error)
        assert len(result.latencies) == 4 and all(t > 0 for t in result.latencies.values())


def test_a_continuation_is_identical_under_every_policy(runs: dict) -> None:
    outputs = [r.outputs for r in runs.values()]
    assert len(outputs[0]) == 4 * 3
    assert all(o == outputs[0] for o in outputs)


def test_every_added_reference_is_released_and_no_grant_exceeds_the_target(runs: dict) -> None:
    for policy, result in runs.items():
        stats = result.stats
        assert stats["all_references_released"], policy
        assert stats["added_refs"] == stats["released_refs"], policy
        assert stats["grants_over_target"] == 0, policy
    assert runs["lads"].stats["grants"] > 0
    assert runs["fifo"].stats["grants"] == 0  # FIFO leases nothing


def test_stage_timestamps_follow_the_return_path(runs: dict) -> None:
    for result in runs.values():
        for key, s in result.stages.items():
            assert s.r <= s.s <= s.c <= s.n <= s.f, (key, s)


def test_the_cohort_service_releases_together_or_at_the_limit() -> None:
    async def scenario() -> list[float]:
        with VirtualClock().patch_loop():
            loop = asyncio.get_running_loop()
            service = CohortService(loop.time, {0: 3}, 0.05, 60.0)
            released: list[float] = []

            async def member(delay: float) -> None:
                await asyncio.sleep(delay)
                await service.call(0, 1)
                released.append(loop.time())

            await asyncio.gather(member(0.0), member(10.0), member(100.0))
            return released

    loop = asyncio.SelectorEventLoop()
    try:
        released = loop.run_until_complete(scenario())
    finally:
        loop.close()
    # The first two wait for their straggling mate only up to the limit (partial release).
    assert released == pytest.approx([60.0, 70.0, 100.05])


def test_the_bench_s_engine_setups_act(runs: dict) -> None:
    """The no-eviction pool recomputes nothing a lease could save, a CPU tier reloads what the
    GPU pool lost, and a long fixed TTL pins through the link while a short one expires."""
    from loadgen.arms.lads_replay import EngineVariant
    from loadgen.bench.lads import unbounded_blocks
    from loadgen.workloads.lads import cohort_workload

    workload = cohort_workload(7, n=4, cohort_size=2, calls=3)
    small = 2500  # blocks: 40k tokens, less than the four histories (about 60k)

    def recomputed(result) -> int:  # noqa: ANN001
        return sum(s.prompt_tokens - s.cached_tokens for s in result.stages.values())

    fifo = run_policy(workload, "fifo", PRESET, EngineVariant(kv_blocks=small))
    bound = run_policy(workload, "fifo", PRESET,
                       EngineVariant(kv_blocks=unbounded_blocks(workload, PRESET)))
    offload = run_policy(workload, "fifo", PRESET, EngineVariant(kv_blocks=small, offload_gib=64))
    assert fifo.stats["evicted_blocks"] > 0 and bound.stats["evicted_blocks"] == 0
    assert recomputed(bound) < recomputed(fifo) and recomputed(offload) < recomputed(fifo)
    assert offload.stats["offload_loaded_blocks"] > 0 and "offload_load_s" in offload.stats
    assert bound.outputs == offload.outputs == fifo.outputs == runs["fifo"].outputs
    assert sum(bound.latencies.values()) < sum(fifo.latencies.values())
    short = run_policy(workload, "ttl_fixed", PRESET, EngineVariant(lease=(("ttl_s", 0.25),)))
    long = run_policy(workload, "ttl_fixed", PRESET, EngineVariant(lease=(("ttl_s", 60.0),)))
    for result in (short, long):
        assert result.stats["all_references_released"]
        assert result.stats["pin_decisions"] == result.stats["grants"] > 0
    assert short.stats["pins_reused"] < long.stats["pins_reused"]
    assert long.stats["expiries"] == 0
