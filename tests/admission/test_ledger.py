"""The per-branch account of the priced controller (``ledger``): what Action 0 answered, what
Action 1 priced and admitted, and p̃ against the realised selection by rank once warm."""

from __future__ import annotations

from services.admission.ledger import Ledger, Priced


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
    assert s["p_tilde_by_rank"]["0"]["realised"] == 1.0


def test_p_tilde_is_judged_only_on_warm_branches_and_entries_are_bounded() -> None:
    ledger = Ledger(max_entries=3, warm=2)
    for i in range(5):
        ledger.opened(f"b{i}", "t/r", "priced", settled_before=i)
        ledger.priced(f"b{i}", "h1", Priced(0, 0.5, 1000.0, 10.0, True))
        ledger.settle(f"b{i}", "h1" if i % 2 else "zz", consumed=False)
    s = ledger.summary()
    assert s["branches"] == 3  # the oldest went
    warm = s["p_tilde_by_rank_warm"]["0"]
    assert warm["n"] == 3 and warm["p_tilde"] == 0.5  # b2, b3, b4: settled_before >= 2
    assert warm["realised"] == round(1 / 3, 4)  # b3 selected h1; b2 and b4 something else
    assert s["p_tilde_within_2x_warm"] is True


def test_the_ledger_says_whether_p_tilde_tracks_the_realised_selection_by_rank() -> None:
    ledger = Ledger(warm=2)
    for i in range(12):  # rank 0 selected 3 times in 4, rank 1 once in 4, rank 2 never
        ledger.opened(f"b{i}", "c", "priced", settled_before=i)
        for rank, p in ((0, 0.7), (1, 0.3), (2, 0.05)):
            ledger.priced(f"b{i}", f"h{rank}", Priced(rank, p, 5000.0, 300.0, rank < 2))
        ledger.settle(f"b{i}", "h1" if i % 4 == 0 else "h0", consumed=True)
    summary = ledger.summary()
    assert summary["gate"] == {"priced": 12} and summary["admitted_per_opened"] == 2.0
    assert summary["p_tilde_by_rank"]["0"] == {"n": 12, "p_tilde": 0.7, "realised": 0.75}
    assert summary["p_tilde_within_2x_warm"] is True
    bad = Ledger(warm=0)
    for i in range(10):  # priced at 0.5, selected never: p̃ is far above 1/n
        bad.opened(f"b{i}", "c", "priced", settled_before=i)
        bad.priced(f"b{i}", "h0", Priced(0, 0.5, 5000.0, 300.0, True))
        bad.settle(f"b{i}", "other", consumed=False)
    assert bad.summary()["p_tilde_within_2x_warm"] is False
