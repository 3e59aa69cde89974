"""The fixed admission rule (``fixed_rule.TopKRule``): the top K by rank, ties in given order."""

from __future__ import annotations

from services.admission.fixed_rule import TOP_K, TopKRule
from services.common.values.candidates import RankedCandidate


def ranked(*pairs: tuple[str, int]) -> list[RankedCandidate]:
    return [RankedCandidate(c, r, 0.5) for c, r in pairs]


def test_the_top_k_by_rank_are_admitted_ties_in_given_order() -> None:
    rule = TopKRule(top_k=2)
    decision = rule.admit(ranked(("c", 2), ("a", 0), ("b", 1), ("d", 1)))
    assert decision.admitted == ("a", "b")
    assert "top 2 of 4" in decision.reason
    assert TopKRule().top_k == TOP_K == 2


def test_branches_open_only_when_configured() -> None:
    assert TopKRule().open_branch("routing/router")[0]
    assert not TopKRule(open_branches=False).open_branch("routing/router")[0]
    assert TopKRule(top_k=0).admit(ranked(("a", 0))).admitted == ()
