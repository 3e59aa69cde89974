"""The vLLM plugin's lease and allocation logic on a fake engine core (no vLLM needed).

The fake block pool keeps vLLM's reference-count semantics (``touch`` adds one and takes a free
block off the eviction queue, ``free_blocks`` drops one and queues it in the order given); the
real pool is exercised in tests/real_engine/test_vllm_backend.py.
"""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

import pytest

from services.engine_agent.backends.vllm import plugin

BS = 4


class Block:
    def __init__(self, block_id: int) -> None:
        self.block_id, self.ref_cnt, self.block_hash, self.is_null = block_id, 0, None, False


class Pool:
    def __init__(self, n: int) -> None:
        self.hash_block_size, self.num_gpu_blocks = BS, n
        self.blocks = [Block(i) for i in range(n)]
        self.free_order: list[int] = [b.block_id for b in self.blocks[1:]]
        self.cached: dict[tuple, Block] = {}

    def touch(self, blocks) -> None:
        for b in blocks:
            if b.ref_cnt == 0:
                self.free_order.remove(b.block_id)
            b.ref_cnt += 1

    def free_blocks(self, blocks) -> None:
        for b in blocks:
            b.ref_cnt -= 1
            assert b.ref_cnt >= 0
            if b.ref_cnt == 0:
                self.free_order.append(b.block_id)

    def get_num_free_blocks(self) -> int:
        return len(self.free_order)


class Coordinator:
    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    def find_longest_cache_hit(self, hashes, max_len):
        hit = []
        for h in hashes:
            if (len(hit) + 1) * BS > max_len or h not in self.pool.cached:
                break
            hit.append(self.pool.cached[h])
        return (hit,), len(hit) * BS, 0


def make_core(n: int = 16):
    pool = Pool(n)
    manager = SimpleNamespace(block_pool=pool, enable_caching=True, coordinator=Coordinator(pool))
    scheduler = SimpleNamespace(kv_cache_manager=manager, requests={},
                                get_request_counts=lambda: (1, 2),
                                schedule=lambda: SimpleNamespace(scheduled_new_reqs=[]))
    cfg = SimpleNamespace(cache_config=SimpleNamespace(prefix_caching_hash_algo="sha256"),
                          scheduler_config=SimpleNamespace(max_num_seqs=8),
                          model_config=SimpleNamespace(max_model_len=64))
    return SimpleNamespace(scheduler=scheduler, vllm_config=cfg), pool


@pytest.fixture(autouse=True)
def plain_hashes(monkeypatch: pytest.MonkeyPatch) -> None:
    def hashes(core, ids):
        return [tuple(ids[:i + BS]) for i in range(0, len(ids) - BS + 1, BS)]
    monkeypatch.setattr(plugin, "_block_hashes", hashes)


def cache_prefix(pool: Pool, ids: list[int], first_block: int) -> list[int]:
    """Mark the full blocks of ``ids`` as cached and free (a finished request's prefix)."""
    used = []
    for i in range(0, len(ids) - BS + 1, BS):
        block = pool.blocks[first_block + len(used)]
        pool.cached[tuple(ids[:i + BS])] = block
        used.append(block.block_id)
    return used


def test_lease_touches_exactly_the_resident_blocks_and_release_restores() -> None:
    core, pool = make_core()
    ids = list(range(10))  # two full blocks + 2 tokens
    blocks = cache_prefix(pool, ids, 1)
    free_before = pool.get_num_free_blocks()
    grant = plugin.dynbranch_lease(core, "L1", ids, 30.0)
    assert grant["blocks"] == 2 and grant["block_ids"] == blocks and grant["tokens"] == 8
    assert [pool.blocks[i].ref_cnt for i in blocks] == [1, 1]
    assert pool.get_num_free_blocks() == free_before - 2
    # renewing does not add references
    assert plugin.dynbranch_lease(core, "L1", ids, 30.0)["renewed"] is True
    assert [pool.blocks[i].ref_cnt for i in blocks] == [1, 1]
    assert plugin.dynbranch_release(core, "L1") == 2
    assert [pool.blocks[i].ref_cnt for i in blocks] == [0, 0]
    assert pool.get_num_free_blocks() == free_before
    assert pool.free_order[-2:] == list(reversed(blocks))  # the prefix tail is evicted first
    assert plugin.dynbranch_release(core, "L1") == 0  # never released twice


def test_lookup_stops_before_the_last_token() -> None:
    core, pool = make_core()
    ids = list(range(8))
    cache_prefix(pool, ids, 1)
    assert plugin.dynbranch_lookup(core, ids)["resident_tokens"] == 4
    assert plugin.dynbranch_lookup(core, ids + [99])["resident_tokens"] == 8


def test_nothing_resident_grants_nothing() -> None:
    core, _ = make_core()
    assert plugin.dynbranch_lease(core, "L", [1, 2, 3, 4, 5], 1.0)["blocks"] == 0
    assert plugin.dynbranch_lease_stats(core)["leases"] == 0


def test_expired_leases_are_swept_and_release_all_empties(monkeypatch) -> None:
    core, pool = make_core()
    a, b = list(range(4)), list(range(100, 108))
    cache_prefix(pool, a, 1)
    cache_prefix(pool, b, 5)
    plugin.dynbranch_lease(core, "short", a, 0.5)
    plugin.dynbranch_lease(core, "long", b, 60.0)
    now = plugin.time.monotonic()
    monkeypatch.setattr(plugin.time, "monotonic", lambda: now + 1.0)
    assert plugin.dynbranch_sweep(core) == 1
    stats = plugin.dynbranch_lease_stats(core)
    assert stats["leases"] == 1 and stats["expired"] == 1 and stats["blocks"] == 2
    assert plugin.dynbranch_release_all(core) == 2
    assert all(blk.ref_cnt == 0 for blk in pool.blocks)


def test_release_never_underflows_a_block() -> None:
    core, pool = make_core()
    ids = list(range(4))
    [blk] = cache_prefix(pool, ids, 1)
    plugin.dynbranch_lease(core, "L", ids, 10.0)
    pool.blocks[blk].ref_cnt = 0  # corrupted by someone else: we must not go negative
    assert plugin.dynbranch_release(core, "L") == 1
    assert pool.blocks[blk].ref_cnt == 0


def test_allocation_signal_resolves_once_scheduled() -> None:
    core, _ = make_core()
    core.scheduler.requests["r-1"] = object()
    fut = plugin.dynbranch_wait_allocated(core, "r-1")
    assert isinstance(fut, Future) and not fut.done()
    new = SimpleNamespace(req_id="r-1", num_computed_tokens=128)
    plugin._on_scheduled(core, plugin._state(core), SimpleNamespace(scheduled_new_reqs=[new]))
    assert fut.result()["cached_tokens"] == 128
    # scheduled before anyone asked: answered at once from the record
    plugin._on_scheduled(core, plugin._state(core), SimpleNamespace(
        scheduled_new_reqs=[SimpleNamespace(req_id="r-2", num_computed_tokens=0)]))
    assert plugin.dynbranch_wait_allocated(core, "r-2")["cached_tokens"] == 0
    # unknown (finished before it was scheduled) → None; forgetting resolves a waiter
    assert plugin.dynbranch_wait_allocated(core, "gone") is None
    core.scheduler.requests["r-3"] = object()
    fut3 = plugin.dynbranch_wait_allocated(core, "r-3")
    assert plugin.dynbranch_forget(core, "r-3") and fut3.result() is None


def test_schedule_hook_survives_its_own_errors() -> None:
    core, _ = make_core()
    broken = SimpleNamespace(scheduled_new_reqs=None)  # iterating None raises in the hook
    core.scheduler.schedule = lambda: broken
    plugin._state(core)  # installs the guarded hook over this schedule
    assert core.scheduler.schedule() is broken  # the engine step goes on


def test_register_adds_utilities(monkeypatch) -> None:
    class FakeEngineCore:
        def shutdown(self):
            return "down"

    fake_module = SimpleNamespace(EngineCore=FakeEngineCore)
    import sys
    monkeypatch.setitem(sys.modules, "vllm.v1.engine.core", fake_module)
    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace())
    monkeypatch.setitem(sys.modules, "vllm.v1", SimpleNamespace())
    monkeypatch.setitem(sys.modules, "vllm.v1.engine", SimpleNamespace(core=fake_module))
    plugin.register()
    plugin.register()  # loaded in several processes, maybe twice: idempotent
    assert all(hasattr(FakeEngineCore, name) for name in plugin.UTILITIES)
    assert FakeEngineCore().shutdown() == "down"
