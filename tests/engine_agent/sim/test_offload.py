"""The sim's CPU tier (``sim.offload``, after vLLM's native KV offloading): blocks are stored as
they are computed, the least recently used drop out beyond capacity, a prefix evicted from the
GPU pool is loaded back over the host link instead of recomputed, and the load delays only the
request that waits for it."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest
from aiotools import VirtualClock

from services.engine_agent.backend import Allocated
from services.engine_agent.sim.cost_model import get_preset
from services.engine_agent.sim.offload import (
    HOST_COPY_EFFICIENCY,
    HostTier,
    OffloadSpec,
)
from tests.engine_agent.sim_factories import (
    assert_idle,
    finish,
    make_backend,
    make_request,
    small_preset,
    words,
)

T = TypeVar("T")


def test_the_spec_follows_the_preset_s_model_and_host_link() -> None:
    preset = get_preset("qwen2.5-7b-rtxpro5000")
    spec = OffloadSpec.from_preset(preset, 64)
    block = 2 * 28 * 4 * 128 * 2 * 16  # K and V, 28 layers, 4 KV heads, head 128, BF16, 16 tokens
    assert spec.block_bytes == block and spec.capacity_blocks == 64 * (1 << 30) // block
    assert spec.bytes_per_s == 64e9 * HOST_COPY_EFFICIENCY  # PCIe 5.0 x16, one direction
    assert spec.load_s(1250) == pytest.approx(1250 * block / (64e9 * 0.8))  # a 20k-token history
    measured = get_preset("tiny-cpu")
    with pytest.raises(ValueError, match="host link"):
        OffloadSpec.from_preset(measured, 1)


def test_the_tier_keeps_the_most_recently_used_blocks_and_loads_queue_on_one_link() -> None:
    tier = HostTier(OffloadSpec(capacity_blocks=3, block_bytes=100.0, bytes_per_s=1000.0))
    for h in (1, 2, 3):
        tier.store(h)
    assert tier.hits([1, 2, 3], 0, 3) == 3  # a lookup refreshes: 1, 2, 3 most recent in order
    tier.store(4)  # drops 1, the least recently used
    assert tier.hits([1, 2], 0, 2) == 0 and tier.hits([9, 2, 3, 4], 1, 4) == 3
    assert tier.hits([2, 3, 4], 0, 2) == 2  # never past the limit
    assert tier.stats.stored == 4 and tier.stats.dropped == 1
    first = tier.schedule_load(10.0, 5, time_scale=1.0)  # 500 bytes at 1,000 B/s
    second = tier.schedule_load(10.1, 2, time_scale=1.0)  # waits for the first on the link
    assert first == pytest.approx(10.5) and second == pytest.approx(10.7)
    assert tier.schedule_load(20.0, 5, time_scale=0.0) == 20.0  # scale 0: instant
    with pytest.raises(ValueError):
        OffloadSpec(capacity_blocks=0, block_bytes=1.0, bytes_per_s=1.0)


def virtual(scenario: Coroutine[Any, Any, T]) -> T:
    """Run ``scenario`` on a stdlib loop with a virtual clock (it patches a stdlib loop only)."""
    loop = asyncio.SelectorEventLoop()
    try:
        return loop.run_until_complete(scenario)
    finally:
        loop.close()


def slow_link(backend: Any, seconds_per_block: float) -> None:
    """Make the backend's host link take ``seconds_per_block`` per block (visible timing)."""
    tier = backend.engine.tier
    spec = tier.spec
    object.__setattr__(tier, "spec", OffloadSpec(spec.capacity_blocks, spec.block_bytes,
                                                 spec.block_bytes / seconds_per_block))


async def _evict_and_return(offload_gib: float) -> tuple[int, float, str]:
    """A history computed, pushed out of a 32-block GPU pool by others, then asked for again
    (with a host link of 0.1 s a block): the cached tokens of its return, the seconds from its
    submission to its allocation, and its output."""
    with VirtualClock().patch_loop():
        clock = asyncio.get_running_loop().time
        preset = small_preset("qwen2.5-7b-rtxpro5000", num_kv_blocks=32, max_model_len=512)
        backend = make_backend(preset, time_scale=1.0, clock=clock, offload_gib=offload_gib)
        if offload_gib:
            slow_link(backend, 0.1)
        await backend.start()
        history = words(320, "h")  # 20 blocks
        await finish(backend, make_request("first", history, max_tokens=1))
        for i in range(3):  # 3 x 20 blocks through a 32-block pool
            await finish(backend, make_request(f"other{i}", words(320, f"o{i}"), max_tokens=1))
        assert backend.engine.lookup_prefix(history + " again").resident_tokens == 0
        submitted, allocated_at = clock(), 0.0
        events = []
        async for event in backend.generate(make_request("again", history + " again",
                                                          max_tokens=4)):
            events.append(event)
            if isinstance(event, Allocated):
                allocated_at = clock()
        allocated = next(e for e in events if isinstance(e, Allocated))
        waited = allocated_at - submitted
        await backend.close()
        assert_idle(backend.engine)
        return allocated.cached_prompt_tokens, waited, events[-1].text


def test_an_evicted_prefix_is_loaded_back_from_the_tier_instead_of_recomputed() -> None:
    cached_off, _, text_off = virtual(_evict_and_return(0.0))
    cached_on, waited, text_on = virtual(_evict_and_return(1.0))
    assert cached_off == 0  # without a tier: recomputed
    assert cached_on == 320  # every full block but the one holding the last prompt token...
    assert waited >= 2.0 - 0.01  # ...after its 20 blocks crossed the 0.1 s/block host link
    assert text_on == text_off  # the output does not depend on where the KV came from


def test_a_request_waiting_for_its_load_does_not_hold_up_the_next_one() -> None:
    virtual(_load_beside_other_work())


async def _load_beside_other_work() -> None:
    with VirtualClock().patch_loop():
        clock = asyncio.get_running_loop().time
        # a slow host link: 1 block takes 1 s to load
        preset = small_preset("qwen2.5-7b-rtxpro5000", num_kv_blocks=32, max_model_len=512)
        backend = make_backend(preset, time_scale=1.0, clock=clock, offload_gib=1.0)
        slow_link(backend, 1.0)
        await backend.start()
        history = words(320, "h")
        await finish(backend, make_request("first", history, max_tokens=1))
        for i in range(3):
            await finish(backend, make_request(f"other{i}", words(320, f"o{i}"), max_tokens=1))
        slow = asyncio.create_task(finish(backend, make_request("again", history + " x",
                                                                max_tokens=1)))
        await asyncio.sleep(0.001)
        started = clock()
        quick = await finish(backend, make_request("next", words(16, "n"), max_tokens=1))
        assert clock() - started < 5  # admitted while the 20-block load (20 s) runs
        assert quick.usage.completion_tokens == 1 and not slow.done()
        done = await slow
        assert done.usage.cached_prompt_tokens == 320 and clock() - started >= 19.0
        await backend.close()
        assert_idle(backend.engine)
