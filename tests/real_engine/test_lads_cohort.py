"""One small LADS cohort on a real vLLM: leases granted, handed off, all released, same outputs.

``loadgen.lads_replay.run_on`` drives the production sender and lease provider over the embedded
``VllmBackend`` in real time: four workflows of three calls in one tool cohort, histories of
three to five 128-token blocks, observations of 200–600 bytes over a 4,000 B/s return link. The
pool (24 blocks) is small enough that the four growing histories do not all stay cached, and the
headroom (2 blocks) is below the largest continuation's new blocks, so leases can hold blocks a
waiting continuation needs: the plugin reports what the head waiting request lacks
(``PoolState.blocked_blocks``) and the provider revokes before that allocation instead of
letting the continuation wait out the lease lifetime.

The same workload then runs under ``fifo`` on the same engine; greedy decoding makes the
continuation outputs identical whatever the cache held.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from loadgen.lads_replay import RunResult, run_on
from loadgen.workloads.lads import LadsCall, LadsWorkflow, LadsWorkload
from services.common.values.leases import ResultKey
from services.engine_agent.backends.vllm.backend import VllmBackend
from services.engine_agent.backends.vllm.settings import VllmSettings
from services.engine_agent.leases.port import Handoff
from tests.real_engine.engines import MODEL_NAME, long_prompt, require_plugin

pytestmark = [pytest.mark.real_engine, pytest.mark.slow,
              pytest.mark.asyncio(loop_scope="module")]

NUM_BLOCKS = 24
BLOCK = 128
HEADROOM_BLOCKS = 2
#: ``long_prompt`` sizes giving 458, 560, 632 and 745 tokens: 3, 4, 4 and 5 whole blocks.
HISTORY_SIZES = (540, 620, 700, 780)
#: Observation bytes of turns 1 and 2, per workflow.
OBSERVATION_BYTES = ((240, 520), (580, 300), (360, 460), (200, 600))


def observation(workflow: int, turn: int, size: int) -> str:
    """Distinct tool output of ``size`` bytes."""
    lines = (f"out[{workflow}.{turn}.{i}] = tool_{workflow}({i}, {turn * 7 + i})"
             for i in range(64))
    return "\n".join(lines)[:size]


def cohort_workload() -> LadsWorkload:
    """Four workflows of three calls, one cohort, arriving 50 ms apart."""
    workflows = []
    for i, (size, observed) in enumerate(zip(HISTORY_SIZES, OBSERVATION_BYTES, strict=True)):
        calls = [LadsCall(0, "", "", 0.0)] + [
            LadsCall(turn, "bash", observation(i, turn, observed[turn - 1]), 0.0)
            for turn in (1, 2)]
        # history_tokens counts sim tokens, which run_on never reads: the approximate size will do
        workflows.append(LadsWorkflow(f"cohort-w{i}", 0.05 * i, 0, long_prompt(100 + i, size),
                                      size, tuple(calls)))
    return LadsWorkload("cohort-real", 0, tuple(workflows), cohort_size=4, tool_service_s=0.05,
                        tool_limit_s=60.0, output_tokens=8, context_limit=2048,
                        link_bytes_per_s=4000.0, sources=())


class RecordingPort:
    """The backend, recording the blocks of every granted lease and every handoff drained."""

    def __init__(self, backend: VllmBackend) -> None:
        self._backend = backend
        self.leased: dict[str, int] = {}
        self.handed_off: list[Handoff] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    async def acquire(self, lease_id: str, block_ids: Sequence[int], digest: str) -> bool:
        ok = await self._backend.acquire(lease_id, block_ids, digest)
        if ok:
            self.leased[lease_id] = len(block_ids)
        return ok

    async def handoffs(self) -> list[Handoff]:
        drained = await self._backend.handoffs()
        self.handed_off += drained
        return drained


@dataclass(frozen=True)
class Runs:
    """The lads and fifo runs and what the engine reported around them."""

    lads: RunResult
    fifo: RunResult
    port: RecordingPort
    refs_before: list[int]
    refs_after: list[int]
    lease_refs_after: dict[str, int]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def runs(tiny_model_path: Path):
    require_plugin()
    backend = VllmBackend(VllmSettings(model_path=str(tiny_model_path), model=MODEL_NAME,
                                       num_gpu_blocks=NUM_BLOCKS, max_num_seqs=16,
                                       poll_interval_s=0.2))
    await backend.start()
    try:
        workload, every_block = cohort_workload(), list(range(NUM_BLOCKS))
        port = RecordingPort(backend)
        refs_before = await backend.block_refs(every_block)
        started = time.monotonic()
        lads = await run_on(port, workload, "lads", headroom_blocks=HEADROOM_BLOCKS,
                            clock=time.monotonic)
        print(f"lads on vLLM: {time.monotonic() - started:.1f} s, {lads.stats}")
        refs_after = await backend.block_refs(every_block)
        lease_refs_after = await backend.lease_refs()
        fifo = await run_on(backend, workload, "fifo", headroom_blocks=HEADROOM_BLOCKS,
                            clock=time.monotonic)
        yield Runs(lads, fifo, port, refs_before, refs_after, lease_refs_after)
    finally:
        await backend.close()


def continuation_key(request_id: str) -> ResultKey:
    workflow, turn = request_id.rsplit("/", 1)
    return ResultKey(workflow, int(turn))


async def test_the_workload_fits_the_model_and_its_histories_span_whole_blocks(
        runs: Runs) -> None:
    tokenize = runs.port.tokenize
    for wf in cohort_workload().workflows:
        assert 3 <= len(tokenize(wf.history_text)) // BLOCK <= 5
        assert all(200 <= c.payload_bytes <= 600 for c in wf.calls[1:])
        last = wf.history_text + "".join(c.observation for c in wf.calls)
        assert len(tokenize(last)) + 3 * 8 < 2048


async def test_the_lads_run_finishes_and_releases_every_reference(runs: Runs) -> None:
    lads = runs.lads
    print(f"\nlads stats: {lads.stats}")
    assert not lads.failed, lads.error
    assert len(lads.latencies) == 4 and len(lads.stages) == 8
    assert lads.stats["all_references_released"]
    assert lads.stats["added_refs"] == lads.stats["released_refs"] > 0
    assert runs.lease_refs_after == {}
    assert runs.refs_after == runs.refs_before


async def test_leases_are_granted_and_handed_off_to_their_continuations(runs: Runs) -> None:
    stats, port = runs.lads.stats, runs.port
    assert stats["grants"] >= 1 and stats["handoffs"] >= 1
    owned = [h for h in port.handed_off if h.owned]
    assert len(owned) == stats["handoffs"]
    assert {continuation_key(h.request_id) for h in owned} <= set(runs.lads.stages)
    assert len(owned) >= len(runs.lads.stages) // 2  # most continuations, not one lucky one


async def test_handed_off_continuations_reuse_their_whole_leased_prefix(runs: Runs) -> None:
    port, stages = runs.port, runs.lads.stages
    lines = []
    for h in port.handed_off:
        key = continuation_key(h.request_id)
        lines.append(f"{h.request_id}: leased {port.leased[h.lease_id]} blocks, "
                     f"owned={h.owned}, cached {stages[key].cached_tokens} tokens")
    print("\n" + "\n".join(lines))
    for h in port.handed_off:
        if h.owned:
            cached = stages[continuation_key(h.request_id)].cached_tokens
            assert cached >= max(port.leased[h.lease_id] * BLOCK, BLOCK), h


async def test_outputs_equal_those_of_the_fifo_run(runs: Runs) -> None:
    assert not runs.fifo.failed, runs.fifo.error
    fifo_cached = {f"{k.workflow_id}/{k.turn}": s.cached_tokens
                   for k, s in sorted(runs.fifo.stages.items())}
    print(f"\nfifo (warm engine) cached tokens: {fifo_cached}")
    assert runs.fifo.stats["grants"] == 0
    assert runs.lads.outputs.keys() == runs.fifo.outputs.keys()
    assert len(runs.lads.outputs) == 12 and all(runs.lads.outputs.values())
    assert runs.lads.outputs == runs.fifo.outputs
