"""Per-sequence KV allocation over a ``BlockPool`` (vLLM v1's ``KVCacheManager``)."""

from __future__ import annotations

from collections.abc import Sequence as Seq

from services.engine_agent.sim.block_pool import BlockPool, KVBlock, hash_full_blocks
from services.engine_agent.sim.offload import HostTier
from services.engine_agent.sim.sequence import Sequence


class KVCacheManager:
    """Gives sequences blocks for the tokens they compute, with prefix-cache hits."""

    def __init__(self, pool: BlockPool, tier: HostTier | None = None) -> None:
        self.pool = pool
        self.block_size = pool.block_size
        self.tier = tier  # a CPU tier every newly computed full block is copied to

    def computed_blocks(self, seq: Sequence) -> list[KVBlock]:
        """Resident leading blocks of ``seq``; like vLLM, never covering its last token."""
        max_blocks = (len(seq.token_ids) - 1) // self.block_size
        if len(seq.block_hashes) < max_blocks:  # a preempted sequence has output tokens too
            hash_full_blocks(seq.token_ids, self.block_size, seq.block_hashes)
        return self.pool.longest_prefix(seq.block_hashes, max_blocks)

    def can_allocate(self, seq: Sequence, num_new: int, computed: Seq[KVBlock] = ()) -> bool:
        """Whether ``allocate`` would succeed now."""
        return self.shortfall(seq, num_new, computed) <= 0

    def shortfall(self, seq: Sequence, num_new: int, computed: Seq[KVBlock] = ()) -> int:
        """Free blocks ``allocate`` would still lack now (0 or less: it would succeed)."""
        need = self._blocks_needed(seq, num_new, computed)
        evictable = sum(1 for b in computed if b.ref_cnt == 0)
        return need + evictable - self.pool.num_free

    def allocate(self, seq: Sequence, num_new: int, computed: Seq[KVBlock] = ()) -> bool:
        """Take the hit blocks and enough new blocks for ``num_new`` more tokens; False if short."""
        if not self.can_allocate(seq, num_new, computed):
            return False
        need = self._blocks_needed(seq, num_new, computed)
        if computed:
            self.pool.touch(computed)
            seq.blocks.extend(computed)
            seq.num_computed += len(computed) * self.block_size
            seq.num_cached_blocks = len(seq.blocks)
        if need > 0:
            seq.blocks.extend(self.pool.allocate(need))
        return True

    def _blocks_needed(self, seq: Sequence, num_new: int, computed: Seq[KVBlock]) -> int:
        total = seq.num_computed + len(computed) * self.block_size + num_new
        return -(-total // self.block_size) - len(seq.blocks) - len(computed)

    def cache_full_blocks(self, seq: Sequence) -> None:
        """Register the blocks that the latest step filled, so later prompts can hit them."""
        full = seq.num_computed // self.block_size
        if full <= seq.num_cached_blocks:
            return
        hashes = seq.block_hashes
        if len(hashes) < full:
            hash_full_blocks(seq.token_ids, self.block_size, hashes)
        cache_block = self.pool.cache_block
        for i in range(seq.num_cached_blocks, full):
            cache_block(seq.blocks[i], hashes[i])
            if self.tier is not None:
                self.tier.store(hashes[i])
        seq.num_cached_blocks = full

    def free(self, seq: Sequence) -> None:
        """Drop the sequence's references, tail first so that prefix heads are evicted last."""
        if seq.blocks:
            self.pool.free(reversed(seq.blocks))
            seq.blocks = []
        seq.num_cached_blocks = 0

    def resident_prefix(self, token_ids: Seq[int], max_blocks: int | None = None) -> list[KVBlock]:
        """Resident leading full blocks of ``token_ids`` (no references added)."""
        hashes = hash_full_blocks(token_ids, self.block_size)
        limit = len(hashes) if max_blocks is None else max_blocks
        return self.pool.longest_prefix(hashes, limit)


__all__ = ["KVCacheManager"]
