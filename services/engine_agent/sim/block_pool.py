"""Paged KV blocks with vLLM v1 prefix-caching semantics (``vllm/v1/core/block_pool.py``).

* Only full blocks are hashed; a block's hash chains its parent's hash with its token ids, so a
  hash names the whole prefix up to and including that block.
* Every block is either referenced (``ref_cnt > 0``) or on the free queue. A freed block keeps
  its hash and stays findable until the allocator reuses it; allocation takes the head of the
  free queue (the least recently freed block) and evicts its hash then.
* ``touch`` adds a reference (taking a free block off the queue); ``free`` drops one and queues
  blocks that reach zero in the order given. Sequences free tail first, so prefix heads are
  evicted last.

Every operation is O(1) per block: the free queue is an ``OrderedDict`` keyed by block id.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from services.engine_agent.sim.recent import recent

#: Parent hash of a sequence's first block.
ROOT_HASH = 0


def hash_block_tokens(parent: int, token_ids: Sequence[int]) -> int:
    """Chained 64-bit hash of one full block: blake2b(parent ‖ token ids)."""
    data = parent.to_bytes(8, "little") + array("I", token_ids).tobytes()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def hash_full_blocks(
    token_ids: Sequence[int], block_size: int, hashes: list[int] | None = None
) -> list[int]:
    """Chained hashes of every full block of ``token_ids``, extending ``hashes`` in place."""
    out = [] if hashes is None else hashes
    parent = out[-1] if out else ROOT_HASH
    for start in range(len(out) * block_size, len(token_ids) - block_size + 1, block_size):
        parent = hash_block_tokens(parent, token_ids[start:start + block_size])
        out.append(parent)
    return out


class PrefixHashes:
    """Block hashes of recently seen token sequences, extended rather than recomputed.

    An agent's prompts grow by appending, so a new sequence usually starts with one seen
    before: its full blocks inside that prefix have the same chained hashes. Lookups compare
    whole prefixes, so a hit is exact.
    """

    def __init__(self, block_size: int, size: int = 64) -> None:
        self.block_size, self.size = block_size, size
        # token ids -> (their packed bytes, their block hashes), least recently used first
        self._known: dict[tuple[int, ...], tuple[bytes, tuple[int, ...]]] = {}

    def __call__(self, token_ids: Sequence[int]) -> tuple[int, ...]:
        """The chained hashes of every full block of ``token_ids``."""
        ids = tuple(token_ids)
        return recent(self._known, ids, lambda: self._extend(ids), self.size)[1]

    def _extend(self, ids: tuple[int, ...]) -> tuple[bytes, tuple[int, ...]]:
        size, raw = self.block_size, array("I", ids).tobytes()
        longest_first = sorted((seen for seen in self._known
                                if 0 < len(seen) <= len(ids) and seen[-1] == ids[len(seen) - 1]),
                               key=len, reverse=True)
        for seen in longest_first:
            seen_raw, seen_hashes = self._known[seen]
            if seen_hashes and raw.startswith(seen_raw[:len(seen_hashes) * size * 4]):
                return raw, tuple(hash_full_blocks(ids, size, list(seen_hashes)))
        return raw, tuple(hash_full_blocks(ids, size))


class KVBlock:
    """One physical KV block."""

    __slots__ = ("block_id", "ref_cnt", "block_hash")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self.block_hash: int | None = None

    def __repr__(self) -> str:
        return f"KVBlock({self.block_id}, ref={self.ref_cnt}, hash={self.block_hash})"


class BlockPool:
    """A fixed set of KV blocks with a prefix cache and an LRU free queue."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(
                f"num_blocks ({num_blocks}) and block_size ({block_size}) must be >= 1")
        self.block_size = block_size
        self.blocks = [KVBlock(i) for i in range(num_blocks)]
        self._free: OrderedDict[int, KVBlock] = OrderedDict((b.block_id, b) for b in self.blocks)
        self._cached: dict[int, KVBlock] = {}
        self.prefix_query_tokens = 0
        self.prefix_hit_tokens = 0
        self.evictions = 0

    @property
    def num_blocks(self) -> int:
        """Total blocks."""
        return len(self.blocks)

    @property
    def num_free(self) -> int:
        """Blocks with no reference (cached or not): what an allocation may take."""
        return len(self._free)

    @property
    def num_used(self) -> int:
        """Blocks with at least one reference."""
        return len(self.blocks) - len(self._free)

    @property
    def num_cached(self) -> int:
        """Blocks findable by hash (referenced or free)."""
        return len(self._cached)

    def get_cached_block(self, block_hash: int) -> KVBlock | None:
        """The resident block with this hash, if any."""
        return self._cached.get(block_hash)

    def longest_prefix(self, block_hashes: Sequence[int], max_blocks: int) -> list[KVBlock]:
        """Resident blocks matching the leading ``block_hashes`` (at most ``max_blocks``)."""
        hits: list[KVBlock] = []
        cached = self._cached
        for block_hash in block_hashes[:max_blocks]:
            block = cached.get(block_hash)
            if block is None:
                break
            hits.append(block)
        return hits

    def record_query(self, query_tokens: int, hit_tokens: int) -> None:
        """Count one prefix-cache query (``vllm:prefix_cache_{queries,hits}_total``)."""
        self.prefix_query_tokens += query_tokens
        self.prefix_hit_tokens += hit_tokens

    def allocate(self, n: int) -> list[KVBlock]:
        """Take ``n`` blocks from the head of the free queue, evicting their hashes."""
        if n > len(self._free):
            raise RuntimeError(f"allocate({n}) with only {len(self._free)} free blocks")
        out = []
        for _ in range(n):
            _, block = self._free.popitem(last=False)
            if block.block_hash is not None:
                del self._cached[block.block_hash]
                block.block_hash = None
                self.evictions += 1
            block.ref_cnt = 1
            out.append(block)
        return out

    def touch(self, blocks: Iterable[KVBlock]) -> None:
        """Add one reference to each block, taking free ones off the eviction queue."""
        free = self._free
        for block in blocks:
            if block.ref_cnt == 0:
                del free[block.block_id]
            block.ref_cnt += 1

    def free(self, blocks: Iterable[KVBlock]) -> None:
        """Drop one reference from each block; blocks reaching zero join the queue in order."""
        free = self._free
        for block in blocks:
            if block.ref_cnt <= 0:
                raise RuntimeError(f"free of unreferenced {block!r}")
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                free[block.block_id] = block

    def cache_block(self, block: KVBlock, block_hash: int) -> bool:
        """Make a just-filled block findable; False when another block already holds the hash."""
        if block.block_hash is not None or block_hash in self._cached:
            return False
        block.block_hash = block_hash
        self._cached[block_hash] = block
        return True

    def eviction_order(self) -> list[int]:
        """Free block ids, next to be reused first (for tests and debugging)."""
        return list(self._free)

    def check(self) -> None:
        """Raise AssertionError when the pool's invariants do not hold."""
        for block in self.blocks:
            assert block.ref_cnt >= 0, block
            assert (block.ref_cnt == 0) == (block.block_id in self._free), block
            if block.block_hash is not None:
                assert self._cached[block.block_hash] is block, block
        assert all(b.block_hash == h for h, b in self._cached.items())


__all__ = ["BlockPool", "KVBlock", "PrefixHashes", "ROOT_HASH", "hash_block_tokens",
           "hash_full_blocks"]
