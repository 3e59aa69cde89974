"""The baselines the priced controller is judged against (``baselines``): each acts as it says,
and the static control's account shows when it refused."""

from __future__ import annotations

from services.admission.baselines import AlwaysPolicy, LoadThresholdPolicy, ThresholdPolicy
from tests.admission.test_core import MODEL, proposals, tracker_at


def test_baselines_answer_the_same_calls() -> None:
    t = tracker_at(running=40)
    assert AlwaysPolicy().admit("b", "c", proposals(), MODEL, 1.0).admitted == ("h1", "h2", "h3")
    assert ThresholdPolicy(0.2).admit("b", "c", proposals(), MODEL, 1.0).admitted == ("h1", "h2")
    low = LoadThresholdPolicy(tracker_at(running=4), top_k=2)  # 44 of 48 slots free
    high = LoadThresholdPolicy(tracker_at(running=46))  # 2 free: fewer than 3
    queued = LoadThresholdPolicy(tracker_at(running=4, waiting=3))  # a queue of 3 > 2
    assert low.open_branch("b", "c", "", MODEL, 100.0).open
    assert low.admit("b", "c", proposals(), MODEL, 100.0).admitted == ("h1", "h2")
    assert not high.open_branch("b", "c", "", MODEL, 100.0).open
    assert high.admit("b", "c", proposals(), MODEL, 100.0).admitted == ()
    assert not queued.open_branch("b", "c", "", MODEL, 100.0).open
    assert high.account() == {"gate": {"opened": 0, "refused": 1}}
    run_below = LoadThresholdPolicy(t, slots=42)  # counted against 42 slots: 2 free
    assert not run_below.open_branch("b", "c", "", MODEL, 100.0).open
