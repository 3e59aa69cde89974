"""Per-sequence KV allocation (``sim.kv_cache.KVCacheManager``, vLLM v1's): prefix hits of
whole blocks that never cover the last token, free cached hits counted against free blocks, tail
first freeing, and every reference returned."""

from __future__ import annotations

from services.engine_agent.sim.kv_cache import KVCacheManager
from tests.engine_agent.sim.test_block_pool import make_pool, make_seq, run_prefill


def test_sequence_frees_tail_first_so_prefix_heads_are_evicted_last() -> None:
    kv = KVCacheManager(make_pool(num_blocks=8))
    seq = make_seq(list(range(12)))
    run_prefill(kv, seq)
    ids = [b.block_id for b in seq.blocks]
    kv.free(seq)
    assert kv.pool.eviction_order()[-3:] == ids[::-1]


def test_repeated_prefix_hits_whole_blocks_but_never_the_last_token() -> None:
    kv = KVCacheManager(make_pool())
    first = make_seq(list(range(8)), request_id="a")
    run_prefill(kv, first)
    head = first.blocks[0]
    kv.free(first)
    # Same 8 tokens: one block hits; the block holding the last token is recomputed.
    assert kv.computed_blocks(make_seq(list(range(8)), request_id="b")) == [head]
    assert len(kv.computed_blocks(make_seq(list(range(10)), request_id="c"))) == 2
    assert kv.computed_blocks(make_seq([5] + list(range(1, 10)), request_id="d")) == []


def test_allocation_counts_free_cached_hits_against_free_blocks() -> None:
    kv = KVCacheManager(make_pool(num_blocks=4))
    first = make_seq(list(range(9)), request_id="a")
    run_prefill(kv, first)  # 3 blocks, 2 of them full and cached
    kv.free(first)
    seq = make_seq(list(range(9)) + [99] * 8, request_id="b")  # 17 tokens: 5 blocks needed
    computed = kv.computed_blocks(seq)
    assert len(computed) == 2
    assert not kv.can_allocate(seq, 9, computed)
    assert kv.allocate(seq, 5, computed) and seq.num_computed == 8
    assert [b.ref_cnt for b in seq.blocks] == [1, 1, 1, 1]
    kv.free(seq)
    assert kv.pool.num_used == 0
    kv.pool.check()


def test_every_reference_returns_to_zero_after_many_sequences() -> None:
    kv = KVCacheManager(make_pool(num_blocks=16))
    for i in range(20):
        seq = make_seq([i % 3] * 4 + list(range(i, i + 9)), request_id=f"s{i}")
        run_prefill(kv, seq)
        kv.free(seq)
        kv.pool.check()
    assert all(b.ref_cnt == 0 for b in kv.pool.blocks)
    assert kv.pool.num_free == kv.pool.num_blocks
