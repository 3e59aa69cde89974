"""The per-branch account of the priced controller (``ledger``): what Action 0 answered, what
Action 1 priced and admitted, and p̃ against the event it estimates (selected and used) by rank,
beside its two factors, once warm."""

from __future__ import annotations

from services.admission.ledger import Ledger, Priced


def _branch(ledger: Ledger, i: int, offers: list[Priced], selected: str, consumed: bool,
            final: bool = True) -> None:
    """A settled branch ``b{i}`` whose candidates are named ``h{rank}``."""
    ledger.opened(f"b{i}", "c", "priced", settled_before=i)
    for offer in offers:
        ledger.priced(f"b{i}", f"h{offer.rank}", offer)
    ledger.settle(f"b{i}", selected, consumed, final)


def test_the_summary_counts_gate_kinds_admissions_and_prices() -> None:
    ledger = Ledger(warm=0)
    ledger.opened("b1", "t/r", "cold", settled_before=0)
    ledger.opened("b2", "t/r", "refused", settled_before=1)
    ledger.priced("b1", "h1", Priced(0, 0.8, gain_ms=6000.0, cost_ms=400.0, admitted=True))
    ledger.priced("b1", "h2", Priced(1, 0.1, gain_ms=6000.0, cost_ms=400.0, admitted=False))
    ledger.priced("nope", "h1", Priced(0, 0.8, 1.0, 1.0, True))  # unknown branch: ignored
    ledger.settle("b1", "h1", consumed=True)
    s = ledger.summary()
    assert s["gate"] == {"cold": 1, "refused": 1}
    assert (s["opened"], s["offered"], s["admitted"], s["consumed"]) == (1, 2, 1, 1)
    assert s["admitted_per_opened"] == 1.0 and s["cost_ms_median"] == 400.0
    rank0 = s["p_tilde_by_rank"]["0"]  # type: ignore[index]
    assert (rank0["useful"], rank0["selected"], rank0["used"]) == (1.0, 1.0, 1.0)


def test_p_tilde_is_set_beside_selected_and_used_and_each_factor_beside_its_own_rate() -> None:
    ledger = Ledger(warm=0)
    for i in range(8):  # rank 0 selected 6 times in 8; its fill used on 3 of those 6
        offers = [Priced(0, 0.45, 5000.0, 300.0, True, p_sel=0.9, p_use=0.5),
                  Priced(1, 0.1, 5000.0, 300.0, False, p_sel=0.2, p_use=0.5)]
        _branch(ledger, i, offers, "h0" if i < 6 else "h1", consumed=i < 3)
    _branch(ledger, 8, [Priced(0, 0.45, 5000.0, 300.0, True, 0.9, 0.5)], "h0", consumed=False,
            final=False)  # selection known, use not yet: counts for selection only
    rank0 = ledger.summary()["p_tilde_by_rank"]["0"]  # type: ignore[index]
    assert rank0 == {"admitted": 8, "p_tilde": 0.45, "useful": 0.375,
                     "offered": 9, "pi_sel": 0.9, "selected": round(7 / 9, 4),
                     "selected_admitted": 6, "pi_use": 0.5, "used": 0.5}
    rank1 = ledger.summary()["p_tilde_by_rank"]["1"]  # type: ignore[index]
    assert rank1["admitted"] == 0 and rank1["p_tilde"] is None and rank1["selected"] == 0.25


def test_p_tilde_is_judged_only_on_warm_branches_and_entries_are_bounded() -> None:
    ledger = Ledger(max_entries=3, warm=2)
    for i in range(5):
        _branch(ledger, i, [Priced(0, 0.5, 1000.0, 10.0, True)], "h0" if i % 2 else "zz",
                consumed=True)
    s = ledger.summary()
    assert s["branches"] == 3  # the oldest went
    warm = s["p_tilde_by_rank_warm"]["0"]  # type: ignore[index]
    assert warm["admitted"] == 3 and warm["p_tilde"] == 0.5  # b2, b3, b4: settled_before >= 2
    assert warm["useful"] == round(1 / 3, 4)  # b3 selected and used h0; b2, b4 another
    assert s["p_tilde_within_2x_warm"] is True


def test_p_tilde_priced_at_the_selection_rate_fails_when_fills_go_unused() -> None:
    # selected 3 times in 4 and priced at 0.75, but only one selected fill in three is used:
    # against selection p̃ looks right; against its own event (0.25) it is 3x too high
    ledger = Ledger(warm=0, warm_strict=0)
    for i in range(12):
        _branch(ledger, i, [Priced(0, 0.75, 5000.0, 300.0, True, 0.75, 1.0)],
                "h0" if i % 4 else "zz", consumed=i % 4 == 1)
    s = ledger.summary()
    rank0 = s["p_tilde_by_rank"]["0"]  # type: ignore[index]
    assert (rank0["selected"], rank0["useful"], rank0["used"]) == (0.75, 0.25, round(1 / 3, 4))
    assert s["p_tilde_within_2x_warm"] is False
    assert s["p_tilde_within_1_25x_warm_strict"] is False


def test_the_strict_check_holds_ranks_0_to_2_to_a_factor_1_25_once_strictly_warm() -> None:
    ledger = Ledger(warm=0, warm_strict=4)
    for i in range(12):  # rank 0 useful 3 in 4 (p̃ 0.7); rank 1 1 in 4 at 0.3 (1.2x): within
        offers = [Priced(0, 0.7, 5000.0, 300.0, True), Priced(1, 0.3, 5000.0, 300.0, True),
                  Priced(3, 0.5, 5000.0, 300.0, True)]  # rank 3: outside the strict check
        _branch(ledger, i, offers, "h1" if i % 4 == 0 else "h0", consumed=True)
    s = ledger.summary()
    assert s["warm_strict"] == 4 and s["p_tilde_by_rank_warm_strict"]["0"]["admitted"] == 8  # type: ignore[index]
    assert s["p_tilde_within_1_25x_warm_strict"] is True
    assert s["p_tilde_within_2x_warm"] is False  # rank 3 (never useful at 0.5) fails this one
    cold = Ledger(warm_strict=48)
    _branch(cold, 0, [Priced(0, 0.7, 5000.0, 300.0, True)], "h0", consumed=True)
    assert cold.summary()["p_tilde_within_1_25x_warm_strict"] is None  # nothing strictly warm


def test_the_timeline_gives_each_branch_its_time_verdict_and_mean_break_even() -> None:
    ledger = Ledger()
    ledger.opened("b1", "c", "priced", settled_before=0, at_s=3.0)
    ledger.priced("b1", "h0", Priced(0, 0.8, gain_ms=3000.0, cost_ms=1000.0, admitted=True))
    ledger.priced("b1", "h1", Priced(1, 0.1, gain_ms=1000.0, cost_ms=1000.0, admitted=False))
    ledger.opened("b2", "c", "refused", settled_before=0, at_s=4.0)
    ledger.refused("priced_out")
    ledger.refused("infeasible", 0)  # nothing left out: not counted
    # p* = C / (G + C): 0.25 and 0.5, averaged over the branch's candidates
    assert ledger.timeline() == [(3.0, True, 0.375), (4.0, False, None)]
    assert ledger.summary()["not_admitted"] == {"priced_out": 1}


def test_the_strict_check_asks_the_point_estimate_and_the_realised_rates_interval() -> None:
    """p̃ 0.12 for a rank useful 4 times in 50 (0.08) is outside 1.25x of the point, but 0.08
    is what a true 0.12 gives often enough (its 95% interval reaches 0.19): consistent. p̃ 0.5
    against 8 in 40 (0.2, interval up to 0.35) is neither."""
    from services.admission.ledger import consistent, wilson, within

    rare = {"2": {"admitted": 50, "p_tilde": 0.12, "useful": 0.08}}
    assert within(rare, 1.25) is False and consistent(rare, 1.25) is True
    off = {"0": {"admitted": 40, "p_tilde": 0.5, "useful": 0.2}}
    assert within(off, 1.25) is False and consistent(off, 1.25) is False
    lo, hi = wilson(4, 50)
    assert 0.03 < lo < 0.04 and 0.18 < hi < 0.2
    assert consistent({"1": {"admitted": 0, "p_tilde": None, "useful": None}}, 1.25) is None
