"""``LeasePort``: what the lease provider needs from an engine's block pool (LADS §3.5, §4).

A backend that supports prefix leases (``BackendInfo.leases_supported``) implements this
protocol: the sim backend over its ``BlockPool``, the embedded vLLM through the dynbranch general
plugin on the engine core's thread. The provider (``provider.py``) holds the policy —
budget, FIFO order, lifetime, revocation — and the port holds only the mechanism: exact extra
references on exact blocks, and the allocation-time handoff check, which must run where the
engine allocates (between steps, before the forward pass).

Rules every port keeps:

* ``acquire`` is all or nothing: it adds one reference to each of exactly the given blocks only
  if they are still resident under the given prefix digest, and records exactly those blocks;
* ``release`` drops exactly the references that lease added, once, tail first, and never a
  native reference or another lease's;
* a bound lease is handed off at the continuation's first positive-token allocation only if the
  engine request then references every leased block; the port then drops the lease's references
  itself (no extra round trip) and reports the handoff.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class ResidentPrefix:
    """The resident reusable prefix of a history, as a submission now would reuse it.

    ``block_ids`` are in prefix order and never cover the block holding the prompt's last token
    (the engine always computes that one). ``digest`` is ``prefix_digest`` of the chained block
    hashes of exactly these blocks; ``free`` the ones no request or lease references now (leasing
    takes them off the free queue, so they count against the headroom).
    """

    block_ids: tuple[int, ...]
    digest: str
    free: frozenset[int]

    @property
    def blocks(self) -> int:
        """|P_i|."""
        return len(self.block_ids)


@dataclass(frozen=True, slots=True)
class PoolState:
    """The engine's block pool and queues now (F(t), w, a, m, κ).

    ``blocked_blocks`` is how many more free blocks the engine's next allocation needed when it
    last failed for memory (0 when nothing waits on memory, or the port cannot tell): the
    provider revokes leases before that allocation rather than let protection starve work.
    """

    free_blocks: int
    total_blocks: int
    waiting: int
    running: int
    max_running: int
    kappa_s: float
    blocked_blocks: int = 0


@dataclass(frozen=True, slots=True)
class Handoff:
    """A bound lease met its continuation's first positive-token allocation.

    ``owned`` is True when the request referenced every leased block and the port released the
    lease's references; False when it did not (the references stay until expiry or revocation).
    ``at_bind`` is True when the request already held its blocks when the lease was bound (a
    lease granted between the engine's allocation and the provider hearing of it): it protected
    nothing, and it is counted apart.
    """

    lease_id: str
    request_id: str
    at: float
    owned: bool
    at_bind: bool = False


@runtime_checkable
class LeasePort(Protocol):
    """Exact extra references on an engine's resident prefix blocks."""

    @property
    def lease_block_size(self) -> int:
        """Tokens per KV block."""

    async def resident(self, token_ids: Sequence[int]) -> ResidentPrefix:
        """The resident reusable prefix of ``token_ids`` (no references added)."""

    async def pool_state(self) -> PoolState:
        """Free blocks, queue lengths, the running limit and κ."""

    async def acquire(self, lease_id: str, block_ids: Sequence[int], digest: str) -> bool:
        """Add one reference to each block iff all are still resident under ``digest``."""

    async def release(self, lease_id: str) -> int:
        """Drop exactly the lease's references; the number of blocks released (0: none held)."""

    async def bind(self, lease_id: str, request_id: str) -> None:
        """Hand the lease to engine request ``request_id`` at its first allocation (see module)."""

    async def handoffs(self) -> list[Handoff]:
        """Handoffs since the last call, oldest first."""

    async def lease_refs(self) -> dict[str, int]:
        """Blocks each live lease references (accounting checks: every reference released)."""


__all__ = ["Handoff", "LeasePort", "PoolState", "ResidentPrefix"]
