"""The vLLM plugin's lease and allocation logic on a fake engine core (no vLLM needed).

The fake block pool keeps vLLM's reference-count semantics (``touch`` adds one and takes a free
block off the eviction queue, ``free_blocks`` drops one and queues it in the order given); the
real pool is exercised in tests/real_engine/test_vllm_leases.py.
"""

from __future__ import annotations

import inspect
import logging
from concurrent.futures import Future
from types import SimpleNamespace

import pytest

from services.engine_agent.backends.vllm import plugin, plugin_leases

BS = 4


class Block:
    def __init__(self, block_id: int) -> None:
        self.block_id, self.ref_cnt, self.block_hash = block_id, 0, None
        self.is_null = block_id == 0


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

    def refs(self, ids: list[int]) -> list[int]:
        return [self.blocks[i].ref_cnt for i in ids]


class Coordinator:
    """Cache hits over ``Pool.cached``; the blocks each running request holds (group 0)."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.held: dict[str, list[Block]] = {}

    def find_longest_cache_hit(self, hashes, max_len):
        hit = []
        for h in hashes:
            if (len(hit) + 1) * BS > max_len or h not in self.pool.cached:
                break
            hit.append(self.pool.cached[h])
        return (hit,), len(hit) * BS, 0

    def get_blocks(self, request_id: str) -> tuple[list[Block], ...]:
        return (list(self.held.get(request_id, [])),)


def step(tokens: dict[str, int] | None = None, new: list | None = None) -> SimpleNamespace:
    """A ``SchedulerOutput`` with just the fields the hook reads."""
    tokens = tokens or {}
    return SimpleNamespace(scheduled_new_reqs=new or [], num_scheduled_tokens=tokens,
                           total_num_scheduled_tokens=sum(tokens.values()))


class Scheduler:
    """The scheduler's attributes the plugin reads; ``schedule()`` returns ``next_output``."""

    def __init__(self, manager: SimpleNamespace) -> None:
        self.kv_cache_manager, self.requests, self.max_num_running_reqs = manager, {}, 8
        self.next_output = step()

    def get_request_counts(self) -> tuple[int, int]:
        return 1, 2

    def schedule(self):
        return self.next_output


def make_core(n: int = 16):
    pool = Pool(n)
    manager = SimpleNamespace(block_pool=pool, enable_caching=True, coordinator=Coordinator(pool))
    scheduler = Scheduler(manager)
    cfg = SimpleNamespace(cache_config=SimpleNamespace(prefix_caching_hash_algo="sha256"),
                          scheduler_config=SimpleNamespace(max_num_seqs=8,
                                                           max_num_batched_tokens=64),
                          model_config=SimpleNamespace(max_model_len=64))
    return SimpleNamespace(scheduler=scheduler, vllm_config=cfg), pool


def run_request(core, pool: Pool, engine_id: str, block_ids: list[int]) -> None:
    """A request in the engine holding ``block_ids`` (its own references)."""
    blocks = [pool.blocks[i] for i in block_ids]
    pool.touch(blocks)
    core.scheduler.requests[engine_id] = object()
    core.scheduler.kv_cache_manager.coordinator.held[engine_id] = blocks


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
        block.block_hash = tuple(ids[:i + BS])
        pool.cached[block.block_hash] = block
        used.append(block.block_id)
    return used


def leased_prefix(core, pool: Pool, lease_id: str = "L") -> tuple[list[int], str]:
    """A cached three-block prefix, acquired under ``lease_id``; its ids and digest."""
    ids = list(range(13))
    cache_prefix(pool, ids, 1)
    view = plugin.dynbranch_resident(core, ids)
    assert plugin_leases.dynbranch_acquire(core, lease_id, view["block_ids"], view["digest"])
    return view["block_ids"], view["digest"]


# ---- TTL leases by token ids ----------------------------------------------------------------


def test_lease_touches_exactly_the_resident_blocks_and_release_restores() -> None:
    core, pool = make_core()
    ids = list(range(10))  # two full blocks + 2 tokens
    blocks = cache_prefix(pool, ids, 1)
    free_before = pool.get_num_free_blocks()
    grant = plugin.dynbranch_lease(core, "L1", ids, 30.0)
    assert grant["blocks"] == 2 and grant["block_ids"] == blocks and grant["tokens"] == 8
    assert pool.refs(blocks) == [1, 1]
    assert pool.get_num_free_blocks() == free_before - 2
    # renewing does not add references
    assert plugin.dynbranch_lease(core, "L1", ids, 30.0)["renewed"] is True
    assert pool.refs(blocks) == [1, 1]
    assert plugin_leases.dynbranch_release(core, "L1") == 2
    assert pool.refs(blocks) == [0, 0]
    assert pool.get_num_free_blocks() == free_before
    assert pool.free_order[-2:] == list(reversed(blocks))  # the prefix tail is evicted first
    assert plugin_leases.dynbranch_release(core, "L1") == 0  # never released twice


def test_lookup_stops_before_the_last_token() -> None:
    core, pool = make_core()
    ids = list(range(8))
    cache_prefix(pool, ids, 1)
    assert plugin.dynbranch_lookup(core, ids)["resident_tokens"] == 4
    assert plugin.dynbranch_lookup(core, ids + [99])["resident_tokens"] == 8


def test_nothing_resident_grants_nothing() -> None:
    core, _ = make_core()
    assert plugin.dynbranch_lease(core, "L", [1, 2, 3, 4, 5], 1.0)["blocks"] == 0
    assert plugin_leases.dynbranch_lease_stats(core)["leases"] == 0


def test_expired_leases_are_swept_and_release_all_empties(monkeypatch) -> None:
    core, pool = make_core()
    a, b = list(range(4)), list(range(100, 108))
    cache_prefix(pool, a, 1)
    cache_prefix(pool, b, 5)
    plugin.dynbranch_lease(core, "short", a, 0.5)
    plugin.dynbranch_lease(core, "long", b, 60.0)
    now = plugin_leases.time.monotonic()
    monkeypatch.setattr(plugin_leases.time, "monotonic", lambda: now + 1.0)
    assert plugin_leases.dynbranch_sweep(core) == 1
    stats = plugin_leases.dynbranch_lease_stats(core)
    assert stats["leases"] == 1 and stats["expired"] == 1 and stats["blocks"] == 2
    assert plugin_leases.dynbranch_release_all(core) == 2
    assert all(blk.ref_cnt == 0 for blk in pool.blocks)


def test_release_never_underflows_a_block() -> None:
    core, pool = make_core()
    ids = list(range(4))
    [blk] = cache_prefix(pool, ids, 1)
    plugin.dynbranch_lease(core, "L", ids, 10.0)
    pool.blocks[blk].ref_cnt = 0  # corrupted by someone else: we must not go negative
    assert plugin_leases.dynbranch_release(core, "L") == 1
    assert pool.blocks[blk].ref_cnt == 0


# ---- the lease port: acquire, release, bind and handoff -------------------------------------


def test_acquire_is_all_or_nothing_under_the_digest() -> None:
    core, pool = make_core()
    ids = list(range(13))
    blocks = cache_prefix(pool, ids, 1)
    view = plugin.dynbranch_resident(core, ids)
    assert view["block_ids"] == blocks and view["free"] == blocks
    uncached = pool.blocks[9].block_id  # never held a prefix: no hash
    refused = [
        (blocks, "0" * 32),  # digest mismatch
        (blocks[:-1], view["digest"]),  # a part of the prefix: another digest
        ([*blocks[:-1], uncached], view["digest"]),  # an uncached block
        ([*blocks, blocks[0]], view["digest"]),  # a duplicate id
        ([0, *blocks[1:]], view["digest"]),  # the null block
        ([*blocks[:-1], 99], view["digest"]),  # out of the pool
        ([], plugin_leases.block_digest([])),
    ]
    for block_ids, digest in refused:
        assert not plugin_leases.dynbranch_acquire(core, "L", block_ids, digest)
    assert all(b.ref_cnt == 0 for b in pool.blocks)  # touched nothing
    assert plugin_leases.dynbranch_lease_refs(core) == {}
    assert plugin_leases.dynbranch_lease_stats(core)["granted"] == 0


def test_acquire_adds_one_reference_and_release_drops_it_once() -> None:
    core, pool = make_core()
    free0 = pool.get_num_free_blocks()
    blocks, digest = leased_prefix(core, pool)
    assert pool.refs(blocks) == [1, 1, 1] and pool.get_num_free_blocks() == free0 - 3
    assert not plugin_leases.dynbranch_acquire(core, "L", blocks, digest)  # a duplicate id
    assert pool.refs(blocks) == [1, 1, 1]
    assert plugin_leases.dynbranch_lease_refs(core) == {"L": 3}
    assert plugin_leases.dynbranch_release(core, "L") == 3
    assert plugin_leases.dynbranch_release(core, "L") == 0
    assert pool.refs(blocks) == [0, 0, 0] and pool.get_num_free_blocks() == free0
    assert pool.free_order[-3:] == list(reversed(blocks))


def test_bound_lease_hands_off_at_the_first_scheduled_step() -> None:
    core, pool = make_core()
    blocks, _ = leased_prefix(core, pool)
    plugin._state(core)  # the schedule hook
    assert plugin_leases.dynbranch_bind(core, "L", "cont")  # before submission
    engine_id = "cont-0a1b2c3d"  # AsyncLLM's rename of our id
    run_request(core, pool, engine_id, [*blocks, 10])
    core.scheduler.next_output = step({engine_id: 0})
    core.scheduler.schedule()  # a step without its tokens: no handoff yet
    assert plugin_leases.dynbranch_handoffs(core) == []
    core.scheduler.next_output = step({engine_id: 12})
    core.scheduler.schedule()
    [handoff] = plugin_leases.dynbranch_handoffs(core)
    assert (handoff["lease_id"], handoff["request_id"], handoff["owned"]) == ("L", "cont", True)
    assert pool.refs([*blocks, 10]) == [1, 1, 1, 1]  # exactly the lease's references went
    assert plugin_leases.dynbranch_lease_refs(core) == {}
    assert plugin_leases.dynbranch_release(core, "L") == 0
    core.scheduler.schedule()
    assert plugin_leases.dynbranch_handoffs(core) == []  # handed off once


def test_a_request_without_the_blocks_leaves_the_lease_held(caplog) -> None:
    core, pool = make_core()
    blocks, _ = leased_prefix(core, pool)
    plugin._state(core)
    plugin_leases.dynbranch_bind(core, "L", "other")
    run_request(core, pool, "other", [blocks[0], 10])  # a shorter prefix only
    core.scheduler.next_output = step({"other": 8})
    with caplog.at_level(logging.WARNING):
        core.scheduler.schedule()
    [handoff] = plugin_leases.dynbranch_handoffs(core)
    assert (handoff["lease_id"], handoff["request_id"], handoff["owned"]) == ("L", "other", False)
    assert "lacks leased blocks" in caplog.text
    assert plugin_leases.dynbranch_lease_refs(core) == {"L": 3}
    assert pool.refs(blocks) == [2, 1, 1]
    assert plugin_leases.dynbranch_release(core, "L") == 3
    assert pool.refs(blocks) == [1, 0, 0]


def test_binding_a_request_that_already_holds_the_blocks_hands_off_at_once() -> None:
    core, pool = make_core()
    blocks, _ = leased_prefix(core, pool)
    run_request(core, pool, "late-0a1b2c3d", blocks)
    assert plugin_leases.dynbranch_bind(core, "L", "late")
    [handoff] = plugin_leases.dynbranch_handoffs(core)
    assert handoff["owned"] and handoff["request_id"] == "late"
    assert pool.refs(blocks) == [1, 1, 1]
    assert not plugin_leases.dynbranch_bind(core, "L", "late")  # no longer held


def test_pool_state_reports_free_blocks_queues_and_kappa() -> None:
    core, pool = make_core()
    leased_prefix(core, pool)
    assert plugin_leases.dynbranch_pool_state(core) == {
        "free_blocks": 12, "blocked_blocks": 0, "total_blocks": 15, "waiting": 2, "running": 1,
        "max_running": 8, "kappa_s": 0.05}


class Queue(list):
    """vLLM's waiting RequestQueue, as far as the plugin reads it."""

    def peek_request(self) -> object:
        return self[0]


def test_blocked_blocks_is_what_the_head_waiting_request_lacks() -> None:
    from types import SimpleNamespace as NS

    cached = [NS(block_id=i, ref_cnt=0) for i in range(2)]  # 2 resident blocks, unreferenced
    request = NS(block_hashes=[b"h0", b"h1"], num_tokens=100)
    coordinator = NS(find_longest_cache_hit=lambda hashes, max_len: ((cached,), 32))

    def core(free_running: bool, budget: int = 512) -> NS:
        sched = NS(waiting=Queue([request]), running=[] if free_running else [1, 2],
                   max_num_running_reqs=2, max_num_scheduled_tokens=budget)
        manager = NS(block_pool=NS(hash_block_size=16), coordinator=coordinator)
        return NS(scheduler=sched, _manager=manager)

    c = core(True)
    c.scheduler.kv_cache_manager = c._manager
    # 100 tokens, 32 resident: 68 to compute in blocks 2..6 (5 new) + 2 cached off the queue
    assert plugin_leases.blocked_blocks(c, free=3) == 4
    assert plugin_leases.blocked_blocks(c, free=10) == 0
    c.scheduler.max_num_scheduled_tokens = 16  # a 16-token chunk needs 1 new block + 2 cached
    assert plugin_leases.blocked_blocks(c, free=1) == 2
    full = core(False)
    full.scheduler.kv_cache_manager = full._manager
    assert plugin_leases.blocked_blocks(full, free=0) == 0  # no free slot: not memory-blocked
    assert plugin_leases.blocked_blocks(NS(), free=0) == 0  # unknown internals: 0, no raise


# ---- κ --------------------------------------------------------------------------------------


def test_kappa_ignores_steps_under_half_a_chunk(monkeypatch) -> None:
    core, _ = make_core()
    core.scheduler.requests["r"] = object()
    clock = iter([0.0, 0.1, 0.2, 0.3, 0.5])
    monkeypatch.setattr(plugin_leases.time, "perf_counter", lambda: next(clock))
    for tokens in (255, 255, 255):  # decode-sized steps: scaling them would inflate κ
        plugin_leases.measure_kappa(core, step({"r": tokens}))
    assert plugin_leases.book(core).kappa_samples == 0
    assert plugin_leases.dynbranch_pool_state(core)["kappa_s"] == 0.05
    plugin_leases.measure_kappa(core, step({"r": 1024}))  # at 0.3
    plugin_leases.measure_kappa(core, step({"r": 1}))  # at 0.5: the 1,024 tokens took 0.2 s
    assert plugin_leases.book(core).kappa_samples == 1
    assert plugin_leases.dynbranch_pool_state(core)["kappa_s"] == pytest.approx(0.1)


def test_kappa_skips_a_gap_with_an_empty_step_between(monkeypatch) -> None:
    core, _ = make_core()
    core.scheduler.requests["r"] = object()
    clock = iter([0.0, 5.0, 5.1])
    monkeypatch.setattr(plugin_leases.time, "perf_counter", lambda: next(clock))
    for out in (step({"r": 512}), step(), step({"r": 512})):  # the engine idled between
        plugin_leases.measure_kappa(core, out)
    assert plugin_leases.book(core).kappa_samples == 0


# ---- the schedule hook and registration -----------------------------------------------------


def test_allocation_signal_resolves_once_scheduled(caplog) -> None:
    core, _ = make_core()
    core.scheduler.requests["r-1"] = object()
    fut = plugin.dynbranch_wait_allocated(core, "r-1")
    assert isinstance(fut, Future) and not fut.done()
    new = SimpleNamespace(req_id="r-1", num_computed_tokens=128)
    plugin._on_scheduled(core, step({"r-1": 1}, [new]))
    assert fut.result()["cached_tokens"] == 128
    # scheduled before anyone asked: answered at once from the record
    plugin._on_scheduled(core, step({"r-2": 1}, [SimpleNamespace(req_id="r-2",
                                                                  num_computed_tokens=0)]))
    assert plugin.dynbranch_wait_allocated(core, "r-2")["cached_tokens"] == 0
    # unknown (finished before it was scheduled) → None; forgetting resolves a waiter
    assert plugin.dynbranch_wait_allocated(core, "gone") is None
    core.scheduler.requests["r-3"] = object()
    fut3 = plugin.dynbranch_wait_allocated(core, "r-3")
    assert plugin.dynbranch_forget(core, "r-3") and fut3.result() is None
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # no part failed


@pytest.mark.parametrize("broken", [
    SimpleNamespace(scheduled_new_reqs=None),  # iterating None raises in every part
    None,
    SimpleNamespace(scheduled_new_reqs=[], num_scheduled_tokens={"r": "many"},
                    total_num_scheduled_tokens="many"),
])
def test_schedule_hook_never_raises_on_a_malformed_output(broken, caplog) -> None:
    core, pool = make_core()
    leased_prefix(core, pool)
    plugin_leases.dynbranch_bind(core, "L", "r")
    core.scheduler.next_output = broken
    plugin._state(core)  # installs the guarded hook over the scheduler's schedule
    with caplog.at_level(logging.ERROR):
        assert core.scheduler.schedule() is broken  # the engine step goes on
    assert "dynbranch schedule hook" in caplog.text
    assert plugin_leases.dynbranch_lease_refs(core) == {"L": 3}  # nothing half-released


def test_every_utility_installs_the_hook_and_keeps_its_signature() -> None:
    core, pool = make_core()
    original = core.scheduler.schedule
    assert plugin.UTILITIES["dynbranch_handoffs"](core) == []
    assert core.scheduler.schedule is not original
    for name, fn in plugin.UTILITIES.items():
        # the engine core checks the argument count against the signature
        assert inspect.signature(fn) == inspect.signature(inspect.unwrap(fn)), name
    assert set(plugin.UTILITIES) >= {fn.__name__ for fn in plugin_leases.LEASE_UTILITIES}
    assert {"dynbranch_resident", "dynbranch_lookup", "dynbranch_wait_allocated"} <= set(
        plugin.UTILITIES)


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


def test_shutdown_releases_every_lease(monkeypatch) -> None:
    class FakeEngineCore:
        def shutdown(self):
            return "down"

    plugin._wrap_shutdown(FakeEngineCore)
    core, pool = make_core()
    blocks, _ = leased_prefix(core, pool)
    assert FakeEngineCore.shutdown(core) == "down"
    assert pool.refs(blocks) == [0, 0, 0]

