"""The demand-derived protection budget of LADS §3.4, as pure functions over plain values.

Notation follows the paper. For each current, noncold pending result i: P_i its resident
reusable-prefix block set, τ_i(t) its remaining horizon (ℓ before the first grant g_i, g_i + ℓ − t
after), T̂ᴮ_i(t) the estimated time to its first successful allocation if the sender keeps FIFO
order. The near-use set N(t) holds the i with P_i ≠ ∅, τ_i > 0 and T̂ᴮ_i ≤ τ_i; its demand is
D(t) = |∪ P_i|. With F(t) free blocks, U(t) protected blocks and headroom H:

    C_safe(t) = max(0, F(t) + U(t) − H)      (protection that still leaves H blocks free)
    B(t)      = min(D(t), C_safe(t))  if some i ∈ N(t) has |P_i| ≤ C_safe(t), else 0
    C(t)      = max(B(t), U(t))               (a lowered target keeps existing references)

Our copy of the paper lost the equations' typesetting; the forms above are our reading of the
surrounding text ("the safe ceiling from free blocks and headroom H", "the fit condition"), and
``engine_queue_delay`` in ``services.common.values.leases`` is our reading of T̂'s engine term.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from services.common.values.leases import InventoryView, ResultKey, engine_queue_delay

#: The LADS paper's headroom H and the pool it was set for (§5.1: 12,316 configured blocks, one
#: of them vLLM's null block).
PAPER_HEADROOM_BLOCKS, PAPER_POOL_BLOCKS = 2048, 12_315


def scaled_headroom(kv_blocks: int) -> int:
    """H scaled to a pool: the paper's 2,048 of 12,315 blocks (16.6%) of ``kv_blocks``."""
    return round(PAPER_HEADROOM_BLOCKS * kv_blocks / PAPER_POOL_BLOCKS)


@dataclass(frozen=True, slots=True)
class Candidate:
    """What the budget needs of one pending result."""

    key: ResultKey
    blocks: frozenset[int]  # P_i
    horizon_s: float  # τ_i(t)
    eta_s: float  # T̂ᴮ_i(t)


@dataclass(frozen=True, slots=True)
class Budget:
    """One evaluation: D(t), C_safe(t), B(t), C(t)."""

    demand: int
    safe: int
    target: int
    capacity: int


def horizon(now: float, lifetime_s: float, granted_at: float | None) -> float:
    """τ_i(t): ℓ before the first grant, g_i + ℓ − t after (a regrant never resets g_i)."""
    return lifetime_s if granted_at is None else granted_at + lifetime_s - now


def inventory_etas(view: InventoryView | None, *, waiting: int, running: int, max_running: int,
                   kappa_s: float) -> dict[ResultKey, float]:
    """T̂ᴮ_i for every frame of the sender's FIFO inventory (LADS §3.4).

    (Q_B + Σ_{j⪯i} (h + p_j)) / R over the uncommitted frames up to and including i, plus the
    engine-queue proxy; a committed (in-flight) frame waits at most for the backlog Q_B.
    """
    queue = engine_queue_delay(waiting, running, max_running, kappa_s)
    if view is None or view.link_bytes_per_s <= 0:
        return {}
    rate, ahead = view.link_bytes_per_s, float(view.backlog_bytes)
    etas: dict[ResultKey, float] = {}
    for entry in view.entries:
        if entry.committed:
            etas[entry.key] = view.backlog_bytes / rate + queue
            continue
        ahead += view.framing_bytes + entry.payload_bytes
        etas[entry.key] = ahead / rate + queue
    return etas


def near_use(candidates: Iterable[Candidate]) -> list[Candidate]:
    """N(t): nonempty prefix, positive horizon, expected allocation within the horizon."""
    return [c for c in candidates if c.blocks and c.horizon_s > 0 and c.eta_s <= c.horizon_s]


def evaluate(candidates: Iterable[Candidate], *, free_blocks: int, protected: int,
             headroom: int) -> Budget:
    """D(t), C_safe(t), B(t) and C(t) from the candidates and the pool (module docstring)."""
    near = near_use(candidates)
    demand = len(frozenset().union(*(c.blocks for c in near))) if near else 0
    safe = max(0, free_blocks + protected - headroom)
    fits = any(len(c.blocks) <= safe for c in near)
    target = min(demand, safe) if fits else 0
    return Budget(demand, safe, target, max(target, protected))


def exclusive_blocks(leases: Mapping[str, frozenset[int]]) -> dict[str, int]:
    """E_i per lease: its blocks that no other lease references (the quota a handoff returns)."""
    if len(leases) <= 1:
        return {lease_id: len(blocks) for lease_id, blocks in leases.items()}
    counts = Counter(itertools.chain.from_iterable(leases.values()))
    shared = {block for block, n in counts.items() if n > 1}
    return {lease_id: len(blocks - shared) for lease_id, blocks in leases.items()}


__all__ = ["PAPER_HEADROOM_BLOCKS", "PAPER_POOL_BLOCKS", "Budget", "Candidate", "evaluate",
           "exclusive_blocks", "horizon", "inventory_etas", "near_use", "scaled_headroom"]
