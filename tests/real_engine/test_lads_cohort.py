"""One small LADS cohort on a real vLLM: leases granted, handed off, all released, same outputs.

``loadgen.arms.lads_replay.run_on`` drives the production sender and lease provider over the
embedded ``VllmBackend`` in real time, on the cohort of ``lads_cohort`` (four workflows of three
calls, a 24-block pool, a 2-block headroom). The same workload then runs under ``fifo`` on the same
engine; greedy decoding makes the continuation outputs identical whatever the cache held.
tests/real_engine/test_openai_server.py runs the same cohort on a ``vllm serve`` over the
plugin's lease channel.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import pytest_asyncio

from loadgen.arms.lads_cohort import (
    BLOCK,
    HEADROOM_BLOCKS,
    NUM_BLOCKS,
    RecordingPort,
    Runs,
    check_handoffs,
    check_lads_run,
    check_leased_prefixes_hit,
    check_outputs_equal_fifo,
    cohort_workload,
    handed_off_lines,
)
from loadgen.arms.lads_replay import run_on
from services.engine_agent.backends.vllm.backend import VllmBackend
from services.engine_agent.backends.vllm.settings import VllmSettings
from tests.real_engine.engines import MODEL_NAME, require_plugin

pytestmark = [pytest.mark.real_engine, pytest.mark.slow,
              pytest.mark.asyncio(loop_scope="module")]


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


async def test_the_workload_fits_the_model_and_its_histories_span_whole_blocks(
        runs: Runs) -> None:
    tokenize = runs.port.tokenize
    for wf in cohort_workload().workflows:
        assert 3 <= len(tokenize(wf.history_text)) // BLOCK <= 5
        assert all(200 <= c.payload_bytes <= 600 for c in wf.calls[1:])
        last = wf.history_text + "".join(c.observation for c in wf.calls)
        assert len(tokenize(last)) + 3 * 8 < 2048


async def test_the_lads_run_finishes_and_releases_every_reference(runs: Runs) -> None:
    print(f"\nlads stats: {runs.lads.stats}")
    check_lads_run(runs)


async def test_leases_are_granted_and_handed_off_to_their_continuations(runs: Runs) -> None:
    check_handoffs(runs)


async def test_handed_off_continuations_reuse_their_whole_leased_prefix(runs: Runs) -> None:
    print("\n" + "\n".join(handed_off_lines(runs)))
    check_leased_prefixes_hit(runs)


async def test_outputs_equal_those_of_the_fifo_run(runs: Runs) -> None:
    fifo_cached = {f"{k.workflow_id}/{k.turn}": s.cached_tokens
                   for k, s in sorted(runs.fifo.stages.items())}
    print(f"\nfifo (warm engine) cached tokens: {fifo_cached}")
    check_outputs_equal_fifo(runs)
