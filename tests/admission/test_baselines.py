"""The baselines the priced controller is judged against (``baselines``): each acts as it says,
and the static control's account shows when it refused."""

from __future__ import annotations

from services.admission.baselines import (
    MAX_QUEUE,
    MIN_FREE_SLOTS,
    AlwaysPolicy,
    LoadThresholdPolicy,
    ThresholdPolicy,
)
from services.admission.core import Proposal
from services.admission.load_view import EngineLoad, LoadTracker

PROPOSALS = [Proposal("b", 1, 0.3), Proposal("a", 0, 0.6), Proposal("c", 2, 0.1)]


def test_always_admits_every_candidate_by_rank_and_threshold_those_above_p_star() -> None:
    assert AlwaysPolicy().admit("x", "r/r", PROPOSALS, "m", 0.0).admitted == ("a", "b", "c")
    assert ThresholdPolicy(0.25).admit("x", "r/r", PROPOSALS, "m", 0.0).admitted == ("a", "b")


def test_the_static_control_refuses_without_free_slots_and_counts_it() -> None:
    tracker = LoadTracker()
    policy = LoadThresholdPolicy(tracker, top_k=2)
    tracker.observe(EngineLoad("e0", "m", 1, 0.0, 16 - MIN_FREE_SLOTS + 1, 0, 16, 0, 100, 0, 0),
                    now=0.0)
    assert not policy.open_branch("b1", "r/r", "t/r/r", "m", 0.0).open
    tracker.observe(EngineLoad("e0", "m", 2, 0.1, 16 - MIN_FREE_SLOTS, MAX_QUEUE, 16, 0, 100, 0,
                               0), now=0.1)
    assert policy.open_branch("b2", "r/r", "t/r/r", "m", 0.1).open
    assert policy.admit("b2", "r/r", PROPOSALS, "m", 0.1).admitted == ("a", "b")
    assert policy.account() == {"gate": {"opened": 1, "refused": 1}}
