"""The sim engine's lease port (``sim.leases.SimLeases``, LADS §3.5): a resident prefix of
whole blocks and its digest, all-or-nothing acquire of exactly those blocks, release of exactly
the lease's references, and the handoff when the continuation is allocated."""

from __future__ import annotations

from services.engine_agent.sim.kv_cache import KVCacheManager
from services.engine_agent.sim.leases import SimLeases
from tests.engine_agent.sim.test_block_pool import make_pool, make_seq, run_prefill


def setup() -> tuple[KVCacheManager, SimLeases, list[int]]:
    kv = KVCacheManager(make_pool(num_blocks=8))
    history = list(range(9))  # two full blocks resident after a prefill, and one token more
    seq = make_seq(history, request_id="h")
    run_prefill(kv, seq)
    kv.free(seq)
    woken: list[int] = []
    return kv, SimLeases(kv, clock=lambda: 1.0, on_release=lambda: woken.append(1)), history


def test_a_resident_prefix_is_acquired_whole_and_released_exactly() -> None:
    kv, leases, history = setup()
    prefix = leases.resident(history)
    assert len(prefix.block_ids) == 2 and prefix.free == frozenset(prefix.block_ids)
    assert leases.acquire("L1", prefix.block_ids, prefix.digest)
    assert not leases.acquire("L1", prefix.block_ids, prefix.digest)  # held already
    assert all(kv.pool.blocks[i].ref_cnt == 1 for i in prefix.block_ids)
    assert leases.refs() == {"L1": 2}
    assert leases.release("L1") == 2 and leases.release("L1") == 0
    assert all(kv.pool.blocks[i].ref_cnt == 0 for i in prefix.block_ids)
    assert leases.added == leases.released == 2


def test_acquire_refuses_blocks_that_no_longer_hold_the_named_prefix() -> None:
    _, leases, history = setup()
    prefix = leases.resident(history)
    assert not leases.acquire("L1", prefix.block_ids, "another digest")
    assert not leases.acquire("L2", (), prefix.digest)
    assert leases.refs() == {}


def test_the_lease_is_handed_to_the_continuation_that_owns_its_blocks() -> None:
    kv, leases, history = setup()
    prefix = leases.resident(history)
    leases.acquire("L1", prefix.block_ids, prefix.digest)
    continuation = make_seq(history + [99, 98, 97], request_id="c")
    run_prefill(kv, continuation)  # hits the leased blocks
    continuation.allocated = True
    leases.bind("L1", "c", continuation)
    [handoff] = leases.drain_handoffs()
    assert handoff.lease_id == "L1" and handoff.request_id == "c" and handoff.owned
    assert leases.refs() == {}  # released: the continuation holds the blocks now
