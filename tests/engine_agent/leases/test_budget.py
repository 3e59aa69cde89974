"""The protection budget (``leases.budget``, LADS §3.4): the near-use set, D(t), C_safe(t), the
fit condition behind B(t), C(t) keeping existing references, and E_i."""

from __future__ import annotations

from services.common.values.leases import ResultKey
from services.engine_agent.leases.budget import (
    Candidate,
    evaluate,
    exclusive_blocks,
    horizon,
    near_use,
    scaled_headroom,
)


def cand(turn: int, blocks: set[int], horizon_s: float = 8.0, eta_s: float = 1.0) -> Candidate:
    return Candidate(ResultKey("wf", turn), frozenset(blocks), horizon_s, eta_s)


def test_near_use_needs_a_prefix_a_horizon_and_an_allocation_within_it() -> None:
    ok, empty, expired, late = (cand(1, {1}), cand(2, set()), cand(3, {2}, horizon_s=0.0),
                                cand(4, {3}, eta_s=9.0))
    assert near_use([ok, empty, expired, late]) == [ok]
    assert horizon(10.0, 8.0, None) == 8.0 and horizon(10.0, 8.0, granted_at=5.0) == 3.0


def test_the_budget_is_the_demand_capped_by_what_leaves_the_headroom_free() -> None:
    b = evaluate([cand(1, {1, 2, 3}), cand(2, {3, 4})], free_blocks=10, protected=0, headroom=8)
    assert (b.demand, b.safe, b.target, b.capacity) == (4, 2, 2, 2)
    # no single prefix fits the safe ceiling: nothing is protected, existing references stay
    tight = evaluate([cand(1, {1, 2, 3})], free_blocks=9, protected=1, headroom=8)
    assert (tight.safe, tight.target, tight.capacity) == (2, 0, 1)


def test_exclusive_blocks_count_what_no_other_lease_references() -> None:
    assert exclusive_blocks({"a": frozenset({1, 2, 3}), "b": frozenset({3, 4})}) == \
        {"a": 2, "b": 1}
    assert exclusive_blocks({"a": frozenset({1, 2})}) == {"a": 2}
    assert scaled_headroom(12_315) == 2048 and scaled_headroom(1000) == 166
