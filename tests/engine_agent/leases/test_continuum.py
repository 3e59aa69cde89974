"""Continuum's TTL (``leases.continuum``): τ* maximises F̂(τ)·(R + Q) − c·E[min(G, τ)] over the
observed gaps, pins for the code's 2 s before any sample, and never pins past the cap; the gap
book keeps each tool's recent gaps from a call's finish to its program's next arrival."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.engine_agent.leases.continuum import (
    COLD_START_TTL_S,
    MIN_PIN_S,
    GapBook,
    PinPrice,
    hit_probability,
    optimal_ttl,
    pin_price,
)


def utility(gaps: list[float], tau: float, price: PinPrice) -> float:
    """U(τ) computed directly from its definition."""
    n = len(gaps)
    hit = sum(1 for g in gaps if g <= tau) / n
    held = sum(min(g, tau) for g in gaps) / n
    return hit * price.benefit_s - price.cost_per_s * held


def test_before_any_sample_the_code_s_cold_start_ttl_applies() -> None:
    assert optimal_ttl([], PinPrice(5.0, 1.0), max_ttl_s=60) == COLD_START_TTL_S == 2.0
    assert optimal_ttl([], PinPrice(5.0, 1.0), max_ttl_s=1.5) == 1.5


def test_a_free_pin_covers_every_gap_under_the_cap_and_a_dear_one_is_not_taken() -> None:
    gaps = [0.5, 1.0, 3.0, 7.0, 40.0]
    assert optimal_ttl(gaps, PinPrice(2.0, 0.0), max_ttl_s=60) == 40.0
    assert optimal_ttl(gaps, PinPrice(2.0, 0.0), max_ttl_s=10) == 7.0  # never past the cap
    assert optimal_ttl(gaps, PinPrice(2.0, 100.0), max_ttl_s=60) == 0.0  # U < 0 everywhere


def test_a_worked_example() -> None:
    # gaps 1, 2, 10 and R + Q = 4 s. With c = 0.6: U(1) = 4/3 - 0.6 = 0.73,
    # U(2) = 8/3 - 0.6*5/3 = 1.67, U(10) = 4 - 0.6*13/3 = 1.40; with c = 0.4: U(2) = 2.00 and
    # U(10) = 2.27.
    assert optimal_ttl([10.0, 1.0, 2.0], PinPrice(4.0, 0.6), max_ttl_s=60) == 2.0
    assert optimal_ttl([10.0, 1.0, 2.0], PinPrice(4.0, 0.4), max_ttl_s=60) == 10.0


@given(st.lists(st.floats(0.0, 100.0), min_size=1, max_size=30), st.floats(0.0, 50.0),
       st.floats(0.0, 10.0), st.floats(0.5, 100.0))
def test_tau_star_is_the_best_of_every_candidate(gaps: list[float], benefit: float, cost: float,
                                                 cap: float) -> None:
    price = PinPrice(benefit, cost)
    tau = optimal_ttl(gaps, price, max_ttl_s=cap)
    assert tau == 0.0 or (tau in gaps and MIN_PIN_S < tau <= cap)
    best = utility(gaps, tau, price) if tau else 0.0
    for candidate in [g for g in gaps if MIN_PIN_S < g <= cap]:  # U steps up only at a gap
        assert utility(gaps, candidate, price) <= best + 1e-9


def test_the_price_counts_reload_queueing_and_the_memory_share() -> None:
    price = pin_price(prefix_blocks=100, block_size=16, pool_blocks=1000, waiting=3, running=5,
                      kappa_s=0.05, queue_s=0.4, chunk_tokens=512)
    assert price.benefit_s == pytest.approx(0.05 * 1600 / 512 + 0.4)
    assert price.cost_per_s == pytest.approx(0.1 * 8)
    idle = pin_price(prefix_blocks=100, block_size=16, pool_blocks=1000, waiting=0, running=0,
                     kappa_s=0.05, queue_s=0.0, chunk_tokens=512)
    assert idle.cost_per_s == 0.0  # nobody shares the pool: holding it costs nothing


def test_the_gap_book_keeps_recent_gaps_per_tool() -> None:
    book = GapBook(window=3)
    for i, gap in enumerate([1.0, 2.0, 3.0, 4.0]):
        book.finished(("wf", i), "search", 10.0 * i)
        assert book.arrived(("wf", i), 10.0 * i + gap) == gap
    assert book.gaps("search") == (2.0, 3.0, 4.0)  # the newest three
    assert book.arrived(("wf", 99), 5.0) is None  # a finish never seen
    book.finished(("wf", 7), "fetch", 0.0)
    book.forget(("wf", 7))
    assert book.arrived(("wf", 7), 1.0) is None and book.gaps("fetch") == ()
    assert hit_probability([1.0, 2.0, 3.0, 4.0], 2.5) == 0.5
