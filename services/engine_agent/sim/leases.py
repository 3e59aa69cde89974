"""Prefix leases on the simulated engine's block pool: the mechanism behind ``LeasePort``.

Exact extra references on exact blocks (``BlockPool.touch`` / ``free``), all or nothing, and the
allocation-time handoff check run by the engine loop right where it allocates (before the step's
forward pass), like the vLLM plugin's schedule hook. The policy lives in ``leases/provider.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from services.common.values.leases import prefix_digest
from services.engine_agent.leases.port import Handoff, ResidentPrefix
from services.engine_agent.sim.block_pool import BlockPool, KVBlock, PrefixHashes
from services.engine_agent.sim.kv_cache import KVCacheManager
from services.engine_agent.sim.recent import recent
from services.engine_agent.sim.sequence import Sequence as Seq

log = logging.getLogger(__name__)


#: Prefix digests remembered (a pending result's prefix is described every evaluation).
_DIGESTS = 1024


@dataclass(eq=False, slots=True)
class _Held:
    blocks: list[KVBlock]
    request_id: str | None = None


class SimLeases:
    """Lease references on one ``BlockPool``; every method runs on the engine's event loop."""

    def __init__(self, kv: KVCacheManager, clock: Callable[[], float],
                 on_release: Callable[[], None], hashes: PrefixHashes | None = None) -> None:
        self._kv = kv
        self._pool: BlockPool = kv.pool
        self._clock = clock
        self._on_release = on_release  # wakes the engine: freed blocks may admit waiting work
        self._held: dict[str, _Held] = {}
        self._bound: dict[str, str] = {}  # request id -> lease id
        self._handoffs: list[Handoff] = []
        # block hashes of recent histories (the engine shares its own: prompts extend them)
        self._hashes = hashes or PrefixHashes(self._pool.block_size)
        self._digests: dict[tuple[int, int], str] = {}  # (blocks, last hash) -> digest
        self.added = 0  # references added, summed over blocks
        self.released = 0  # references dropped, summed over blocks

    def resident(self, token_ids: Sequence[int]) -> ResidentPrefix:
        """Resident reusable prefix: whole blocks, never the one holding the last token."""
        size = self._pool.block_size
        max_blocks = max(len(token_ids) - 1, 0) // size
        blocks = self._pool.longest_prefix(self._hashes(token_ids), max_blocks)
        return ResidentPrefix(tuple(b.block_id for b in blocks), self._digest(blocks),
                              frozenset(b.block_id for b in blocks if b.ref_cnt == 0))

    def _digest(self, blocks: Sequence[KVBlock]) -> str:
        """``prefix_digest`` of the blocks' hashes, remembered by the last one: a chained hash
        names its whole prefix, so (length, last hash) names the digest."""
        if not blocks or blocks[-1].block_hash is None:
            return prefix_digest(_hashes(blocks))
        return recent(self._digests, (len(blocks), blocks[-1].block_hash),
                      lambda: prefix_digest(_hashes(blocks)), _DIGESTS)

    def acquire(self, lease_id: str, block_ids: Sequence[int], digest: str) -> bool:
        """Touch exactly ``block_ids`` iff they still hold the prefix named by ``digest``."""
        if not block_ids or lease_id in self._held:
            return False
        blocks = [self._pool.blocks[i] for i in block_ids]
        if any(b.block_hash is None for b in blocks):
            return False
        if prefix_digest(_hashes(blocks)) != digest:
            return False
        self._pool.touch(blocks)
        self._held[lease_id] = _Held(blocks)
        self.added += len(blocks)
        return True

    def release(self, lease_id: str) -> int:
        """Drop exactly the lease's references, tail first; 0 when it holds none."""
        held = self._held.pop(lease_id, None)
        if held is None:
            return 0
        if held.request_id is not None:
            self._bound.pop(held.request_id, None)
        self._pool.free(reversed(held.blocks))
        self.released += len(held.blocks)
        self._on_release()
        return len(held.blocks)

    def bind(self, lease_id: str, request_id: str, running: Seq | None) -> None:
        """Hand the lease to ``request_id`` at its first allocation (now, if it already has one)."""
        held = self._held.get(lease_id)
        if held is None:
            return
        held.request_id = request_id
        self._bound[request_id] = lease_id
        if running is not None and running.allocated:
            self.on_allocated(running, at_bind=True)

    def holds_for(self, seq: Seq) -> bool:
        """Whether a live lease is bound to ``seq``'s request: its history is pinned for it
        (Continuum's queue puts such requests first)."""
        return seq.request_id in self._bound

    def on_allocated(self, seq: Seq, *, at_bind: bool = False) -> None:
        """The engine gave ``seq`` its first positive-token allocation (or, ``at_bind``, the
        lease was bound after it): verify and hand off."""
        lease_id = self._bound.get(seq.request_id)
        if lease_id is None:
            return
        held = self._held[lease_id]
        owned_ids = {b.block_id for b in seq.blocks}
        owned = all(b.block_id in owned_ids for b in held.blocks)
        self._handoffs.append(Handoff(lease_id, seq.request_id, self._clock(), owned, at_bind))
        if owned:
            self.release(lease_id)
        else:
            del self._bound[seq.request_id]
            held.request_id = None
            log.warning("lease %s: request %s does not own every leased block; kept",
                        lease_id, seq.request_id)

    def drain_handoffs(self) -> list[Handoff]:
        """Handoffs since the last call, oldest first."""
        out, self._handoffs = self._handoffs, []
        return out

    def refs(self) -> dict[str, int]:
        """Blocks each live lease references."""
        return {lease_id: len(h.blocks) for lease_id, h in self._held.items()}

    def release_all(self) -> int:
        """Release every lease (shutdown); blocks released."""
        return sum(self.release(lease_id) for lease_id in list(self._held))


def _hashes(blocks: Sequence[KVBlock]) -> list[int]:
    """The block hashes of cached blocks (a prefix from the pool is hashed throughout)."""
    return [h for b in blocks if (h := b.block_hash) is not None]


__all__ = ["SimLeases"]
