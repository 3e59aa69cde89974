"""The LADS vocabulary shared by the delivery sender and the engine agents' lease providers.

Plain frozen values (DESIGN.md §3 delivery, engine_agent; ``papers/lads.txt`` §3): the identity of
a pending tool result, the records an engine publishes about its prefix leases and its budget,
and the causal view of the sender's inventory the engine replenishes from. Times are seconds on
the publisher's clock (``time.time()`` in a mesh, the event loop's clock in a replay); records
are versioned by ``sequence`` (per lease) and ``generation`` (per budget evaluation). Nothing here
imports a service; ``services.common.runtime.convert`` maps them to and from ``dynbranch.v1``
messages.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

#: Tokens per chunk of the engine-queue delay proxy κ (LADS §3.4).
KAPPA_CHUNK_TOKENS = 512


@dataclass(frozen=True, slots=True, order=True)
class ResultKey:
    """Identity of one pending tool result and its continuation: workflow and turn."""

    workflow_id: str
    turn: int

    def __str__(self) -> str:
        return f"{self.workflow_id}#{self.turn}"


class LeaseState(enum.IntEnum):
    """Life of a prefix lease (values match ``dynbranch.v1.LeaseState``)."""

    ACTIVE = 1
    HANDED_OFF = 2
    REVOKED = 3
    EXPIRED = 4
    RELEASED = 5  # withdrawn: the result was cancelled, or the provider closed

    @property
    def final(self) -> bool:
        """Whether the lease's references are gone for good (no regrant after this)."""
        return self in (LeaseState.HANDED_OFF, LeaseState.EXPIRED, LeaseState.RELEASED)


#: Legal successor states; anything else in a record stream is an inconsistent event order.
LEASE_TRANSITIONS: dict[LeaseState, frozenset[LeaseState]] = {
    LeaseState.ACTIVE: frozenset({LeaseState.ACTIVE, LeaseState.HANDED_OFF, LeaseState.REVOKED,
                                  LeaseState.EXPIRED, LeaseState.RELEASED}),
    LeaseState.REVOKED: frozenset({LeaseState.ACTIVE, LeaseState.REVOKED, LeaseState.EXPIRED,
                                   LeaseState.RELEASED}),
    LeaseState.HANDED_OFF: frozenset(),
    LeaseState.EXPIRED: frozenset(),
    LeaseState.RELEASED: frozenset(),
}


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """One published update of one prefix lease.

    ``blocks`` is |P_i|, the whole reusable prefix the lease references; ``exclusive`` is E_i,
    the blocks no other lease references (the logical quota a handoff returns). ``granted_at``
    is g_i, the first grant, and ``deadline`` is g_i + ℓ: a regrant never moves either.
    """

    engine_id: str
    key: ResultKey
    sequence: int
    published_at: float
    prefix_digest: str
    payload_digest: str
    budget_generation: int
    state: LeaseState
    blocks: int
    exclusive: int
    granted_at: float
    deadline: float


@dataclass(frozen=True, slots=True)
class BudgetRecord:
    """One evaluation of the engine's protection budget (LADS §3.4).

    ``target`` is B(t), ``protected`` U(t) (distinct leased blocks), ``capacity`` C(t) =
    max(B(t), U(t)) (a lowered target keeps existing references until they retire),
    ``free_blocks`` F(t), ``headroom`` H, ``demand`` D(t). ``denied`` names the feasible pending
    results denied protection at this generation because U(t) + Δ_i > B(t) (the sender's fresh
    evidence of a budget denial). ``waiting``/``running``/``max_running`` are w, a, m and
    ``kappa_s`` is κ, the frozen wall-time proxy per 512-token chunk, for the sender's estimates.
    """

    engine_id: str
    generation: int
    published_at: float
    target: int
    protected: int
    capacity: int
    free_blocks: int
    headroom: int
    demand: int
    denied: tuple[ResultKey, ...]
    waiting: int
    running: int
    max_running: int
    kappa_s: float


@dataclass(frozen=True, slots=True)
class InventoryEntry:
    """One frame of the sender's inventory as the lease provider may see it (identity, phase)."""

    key: ResultKey
    ready_at: float
    payload_bytes: int
    committed: bool


@dataclass(frozen=True, slots=True)
class InventoryView:
    """The sender's causal inventory for one engine, in FIFO ready order.

    ``backlog_bytes`` is Q_B, the committed bytes still on the link; ``link_bytes_per_s`` R and
    ``framing_bytes`` h. Its ranking and time estimates never pick lease recipients: the
    provider reads only identity, phase and bytes.
    """

    engine_id: str
    sequence: int
    published_at: float
    entries: tuple[InventoryEntry, ...]
    backlog_bytes: int
    link_bytes_per_s: float
    framing_bytes: int


def engine_queue_delay(waiting: int, running: int, max_running: int, kappa_s: float) -> float:
    """The coarse engine-queue delay proxy of T̂ (LADS §3.4): κ per wave of m requests ahead.

    Our copy of the paper lost the equation's typesetting; this is the reading we implement:
    the requests ahead of a new arrival are the waiting ones plus any running beyond a free slot,
    and each batch of m of them costs about one κ before the arrival is allocated.
    """
    if max_running <= 0:
        return float("inf")
    ahead = waiting + max(0, running + 1 - max_running)
    return kappa_s * ahead / max_running


def digest(data: bytes | str) -> str:
    """Hex digest naming a payload or a prefix (blake2b-128)."""
    raw = data.encode() if isinstance(data, str) else data
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


def prefix_digest(block_hashes: Iterable[int | str | bytes]) -> str:
    """Digest of a prefix's chained block hashes (the last hash names the whole prefix)."""
    h = hashlib.blake2b(digest_size=16)
    for block_hash in block_hashes:
        h.update(repr(block_hash).encode())
        h.update(b"\x00")
    return h.hexdigest()


__all__ = [
    "KAPPA_CHUNK_TOKENS", "LEASE_TRANSITIONS", "BudgetRecord", "InventoryEntry", "InventoryView",
    "LeaseRecord", "LeaseState", "ResultKey", "digest", "engine_queue_delay", "prefix_digest",
]
