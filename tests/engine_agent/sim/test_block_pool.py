"""BlockPool and KVCacheManager: chained hashes, reference counts, LRU eviction of free blocks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.engine_agent.sim.block_pool import (
    ROOT_HASH,
    BlockPool,
    PrefixHashes,
    hash_block_tokens,
    hash_full_blocks,
)
from services.engine_agent.sim.kv_cache import KVCacheManager
from services.engine_agent.sim.sequence import Sequence
from services.engine_agent.sim.tokenizer import PseudoText
from tests.engine_agent.sim_factories import make_request


def make_pool(num_blocks: int = 8, block_size: int = 4) -> BlockPool:
    return BlockPool(num_blocks, block_size)


def make_seq(token_ids: list[int], block_size: int = 4, request_id: str = "s") -> Sequence:
    hashes = hash_full_blocks(token_ids, block_size)
    return Sequence(make_request(request_id), tuple(token_ids), hashes, PseudoText(1, None), 0.0)


def run_prefill(kv: KVCacheManager, seq: Sequence) -> None:
    """Admit ``seq`` with its prefix hit, compute its whole prompt, cache its full blocks."""
    computed = kv.computed_blocks(seq)
    assert kv.allocate(seq, len(seq.token_ids) - len(computed) * kv.block_size, computed)
    seq.num_computed = len(seq.token_ids)
    kv.cache_full_blocks(seq)


def test_block_hash_chains_parent_and_tokens() -> None:
    a = hash_block_tokens(ROOT_HASH, [1, 2, 3, 4])
    assert a == hash_block_tokens(ROOT_HASH, [1, 2, 3, 4])
    assert a != hash_block_tokens(ROOT_HASH, [1, 2, 3, 5])
    assert hash_block_tokens(a, [5, 6, 7, 8]) != hash_block_tokens(ROOT_HASH, [5, 6, 7, 8])
    assert hash_full_blocks(list(range(11)), 4) == [
        a := hash_block_tokens(ROOT_HASH, [0, 1, 2, 3]), hash_block_tokens(a, [4, 5, 6, 7])]


def test_hash_full_blocks_extends_an_existing_chain() -> None:
    tokens = list(range(20))
    hashes = hash_full_blocks(tokens[:9], 4)
    assert hash_full_blocks(tokens, 4, hashes) is hashes
    assert hashes == hash_full_blocks(tokens, 4)


def test_allocate_touch_free_keep_reference_counts() -> None:
    pool = make_pool()
    blocks = pool.allocate(3)
    assert [b.ref_cnt for b in blocks] == [1, 1, 1] and pool.num_used == 3
    pool.touch(blocks[:1])
    pool.free(blocks)
    assert [b.ref_cnt for b in blocks] == [1, 0, 0] and pool.num_free == 7
    pool.free(blocks[:1])
    assert pool.num_used == 0 and pool.num_free + pool.num_used == pool.num_blocks
    pool.check()


def test_free_of_an_unreferenced_block_is_an_error() -> None:
    pool = make_pool()
    block = pool.allocate(1)[0]
    pool.free([block])
    with pytest.raises(RuntimeError, match="unreferenced"):
        pool.free([block])


def test_allocating_more_than_free_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="only 8 free"):
        make_pool().allocate(9)


def test_freed_block_stays_cached_until_reused() -> None:
    pool = make_pool(num_blocks=2)
    block = pool.allocate(1)[0]
    assert pool.cache_block(block, 42)
    pool.free([block])
    assert pool.get_cached_block(42) is block and pool.num_free == 2
    pool.touch([block])  # a hit revives it without allocating
    assert block.ref_cnt == 1 and pool.num_free == 1
    pool.free([block])
    pool.allocate(2)  # pressure reuses it
    assert pool.get_cached_block(42) is None and block.block_hash is None
    assert pool.evictions == 1


def test_eviction_takes_the_least_recently_freed_block_first() -> None:
    pool = make_pool(num_blocks=4)
    a, b, c, d = pool.allocate(4)
    for i, block in enumerate((a, b, c, d)):
        pool.cache_block(block, 100 + i)
    pool.free([c])
    pool.free([a])
    pool.free([d])
    assert pool.eviction_order() == [c.block_id, a.block_id, d.block_id]
    pool.touch([a])  # a hit takes it off the queue; its next free puts it at the tail
    pool.free([a])
    assert pool.eviction_order() == [c.block_id, d.block_id, a.block_id]
    assert pool.allocate(1) == [c]
    assert pool.get_cached_block(102) is None and pool.get_cached_block(100) is a


def test_cache_block_refuses_a_duplicate_hash() -> None:
    pool = make_pool()
    x, y = pool.allocate(2)
    assert pool.cache_block(x, 7) and not pool.cache_block(y, 7)
    assert y.block_hash is None and pool.get_cached_block(7) is x


def test_longest_prefix_stops_at_the_first_miss() -> None:
    pool = make_pool()
    blocks = pool.allocate(3)
    for h, block in zip((1, 2, 4), blocks, strict=True):
        pool.cache_block(block, h)
    assert pool.longest_prefix([1, 2, 3, 4], 4) == blocks[:2]
    assert pool.longest_prefix([1, 2, 3, 4], 1) == blocks[:1]


@given(st.lists(st.lists(st.integers(0, 3), max_size=40), min_size=1, max_size=12))
def test_prefix_hashes_equal_a_full_hash_of_every_sequence(sequences: list[list[int]]) -> None:
    hashes = PrefixHashes(4, size=4)
    running: list[int] = []
    for extra in sequences:  # mostly extensions of the last, sometimes a fresh start
        running = running + extra if len(extra) % 3 else extra
        assert hashes(running) == tuple(hash_full_blocks(running, 4))
