"""The fill gate (Action 1) and its exact oracle: Equations 6–7, Proposition A.8, Appendix B."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.admission.fill_gate import (
    FillCandidate,
    admit,
    break_even,
    oracle,
    utility,
)


@dataclass(frozen=True)
class Footprint:
    slot_s: float
    kv_share: float


@dataclass(frozen=True)
class Load:
    fills: int
    kv: float
    pressure: float


class RisingPrices:
    """Monotone test prices: slot price grows with pressure and fills, KV price with occupancy
    and steepens near the budget; at most ``max_fills`` fills, KV within the budget."""

    def __init__(self, max_fills: int = 4, slot_ms: float = 100.0, kv_ms: float = 400.0) -> None:
        self.max_fills, self.slot_ms, self.kv_ms = max_fills, slot_ms, kv_ms

    def cost_ms(self, c: FillCandidate, v: Load) -> float:
        fp = c.footprint
        assert isinstance(fp, Footprint)
        slot_price = self.slot_ms * (v.pressure + 0.25 * v.fills)
        kv_price = self.kv_ms * v.kv / max(1e-3, 1.0 - v.kv)
        return slot_price * fp.slot_s + kv_price * fp.kv_share

    def feasible(self, c: FillCandidate, v: Load) -> bool:
        fp = c.footprint
        assert isinstance(fp, Footprint)
        return v.fills < self.max_fills and v.kv + fp.kv_share <= 1.0

    def project(self, c: FillCandidate, v: Load) -> Load:
        fp = c.footprint
        assert isinstance(fp, Footprint)
        return Load(v.fills + 1, v.kv + fp.kv_share, v.pressure)


PRICING = RisingPrices()


def cand(name: str, p: float, gain: float, slot: float = 1.0, kv: float = 0.1) -> FillCandidate:
    return FillCandidate(name, p, gain, Footprint(slot, kv))


candidates = st.lists(
    st.builds(lambda p, g, s, k: (p, g, s, k), st.floats(0, 1), st.floats(0, 2000),
              st.floats(0.1, 5), st.floats(0, 0.6)),
    min_size=0, max_size=5).map(
        lambda rows: [cand(f"c{i}", *row) for i, row in enumerate(rows)])
loads = st.builds(Load, st.integers(0, 3), st.floats(0, 0.9), st.floats(0, 3))


def brute_force(cs: list[FillCandidate], v: Load) -> float:
    best = 0.0
    for size in range(1, len(cs) + 1):
        for order in itertools.permutations(cs, size):
            state, total = v, 0.0
            for c in order:
                if not PRICING.feasible(c, state):
                    break
                total += utility(c, PRICING.cost_ms(c, state))
                state = PRICING.project(c, state)
            else:
                best = max(best, total)
    return best


@settings(max_examples=150, deadline=None)
@given(cs=candidates, v=loads)
def test_the_oracle_is_exact_against_brute_force(cs: list[FillCandidate], v: Load) -> None:
    assert oracle(cs, v, PRICING).utility_ms == pytest.approx(brute_force(cs, v), abs=1e-6)


@settings(max_examples=200, deadline=None)
@given(cs=candidates, v=loads)
def test_each_admission_is_the_argmax_and_the_stopping_set_is_maximal(
        cs: list[FillCandidate], v: Load) -> None:
    decision = admit(cs, v, PRICING)
    state, left = v, list(cs)
    for admitted in decision.admitted:
        feasible = [c for c in left if PRICING.feasible(c, state)]
        best = max(utility(c, PRICING.cost_ms(c, state)) for c in feasible)
        assert admitted.utility_ms == pytest.approx(best) and admitted.utility_ms > 0
        chosen = next(c for c in left if c.name == admitted.name)
        left.remove(chosen)
        state = PRICING.project(chosen, state)
    # Proposition A.8: no remaining candidate has positive utility, now or after any further
    # admissions (prices only rise as load is projected).
    for c in left:
        assert not PRICING.feasible(c, state) or utility(c, PRICING.cost_ms(c, state)) <= 0
    assert decision.total_utility_ms <= oracle(cs, v, PRICING).utility_ms + 1e-6


def test_the_same_candidate_is_admitted_under_headroom_and_refused_under_contention() -> None:
    c = cand("h1", p=0.5, gain=300.0, slot=1.0, kv=0.1)
    idle, busy = Load(0, 0.05, 0.2), Load(2, 0.7, 2.5)
    assert admit([c], idle, PRICING).names == ("h1",)
    assert admit([c], busy, PRICING).names == ()
    assert break_even(c, PRICING.cost_ms(c, idle)) < c.p < break_even(c, PRICING.cost_ms(c, busy))


def test_re_pricing_after_each_admission_stops_before_the_projected_load_turns_negative() -> None:
    cs = [cand(f"h{i}", p=0.5, gain=200.0, slot=1.0, kv=0.15) for i in range(6)]
    decision = admit(cs, Load(0, 0.0, 1.0), RisingPrices(max_fills=8))
    assert len(decision.admitted) == 3 and decision.view == Load(3, pytest.approx(0.45), 1.0)
    utilities = [a.utility_ms for a in decision.admitted]
    assert utilities == sorted(utilities, reverse=True)  # each admission makes the rest dearer


def test_hard_constraints_and_failed_reservations_drop_a_candidate() -> None:
    big, small = cand("big", 0.9, 5000.0, kv=0.8), cand("small", 0.9, 4000.0, kv=0.1)
    assert admit([big, small], Load(0, 0.5, 0.0), PRICING).names == ("small",)  # KV budget
    assert admit([big, small], Load(0, 0.0, 0.0), PRICING,
                 reserve=lambda c: c.name != "big").names == ("small",)
    assert admit([small], Load(4, 0.0, 0.0), PRICING).names == ()  # fill slots are full


def test_seeded_audits_admit_one_refused_candidate_and_stop() -> None:
    cs = [cand("a", 0.01, 1.0), cand("b", 0.01, 1.0)]
    v = Load(3, 0.5, 3.0)
    assert admit(cs, v, PRICING).names == ()
    probed = admit(cs, v, PRICING, audit_rate=1.0, rng=random.Random(7))
    assert len(probed.admitted) == 1 and probed.admitted[0].audit
    with pytest.raises(ValueError, match="seeded"):
        admit(cs, v, PRICING, audit_rate=0.5)


def test_break_even_matches_the_utility_sign_and_is_undefined_at_zero() -> None:
    c = cand("x", 0.3, 100.0)
    assert break_even(c, 0.0) == 0.0 and break_even(cand("z", 0.3, 0.0), 50.0) == 1.0
    assert break_even(cand("z", 0.3, 0.0), 0.0) is None
    assert utility(cand("z", 0.3, 0.0), 0.0) == 0.0  # the strict rule refuses it
    for cost in (10.0, 42.857, 100.0, 400.0):
        assert (utility(c, cost) > 0) == (c.p > break_even(c, cost))


def test_bad_candidates_and_oversized_oracle_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="p must be"):
        cand("x", 1.5, 1.0)
    with pytest.raises(ValueError, match="gain_ms"):
        cand("x", 0.5, -1.0)
    with pytest.raises(ValueError, match="distinct"):
        admit([cand("x", 0.5, 1.0), cand("x", 0.5, 1.0)], Load(0, 0, 0), PRICING)
    with pytest.raises(ValueError, match="at most"):
        oracle([cand(f"c{i}", 0.5, 1.0) for i in range(17)], Load(0, 0, 0), PRICING)
