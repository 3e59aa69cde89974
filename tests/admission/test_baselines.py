"""The baselines the priced controller is judged against (``baselines``): each acts as it says;
the static control (``StaticRule``, §5.5) opens at its boundary and refuses just past it, and
its account says why it refused."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.admission.baselines import (
    FREE_CANONICAL,
    AlwaysPolicy,
    LoadThresholdPolicy,
    StaticRule,
    ThresholdPolicy,
)
from services.admission.config import AdmissionSettings
from services.admission.load_view import LoadTracker
from services.admission.policies import build_policy
from services.common.values.errors import InvalidArgument
from tests.admission.test_core import MODEL, proposals, report, tracker_at

NOW = 100.0


def engines(*loads: tuple[int, int, int]) -> LoadTracker:
    """A tracker with one current report per (running, fills among them, waiting)."""
    t = LoadTracker(window_s=8.0)
    for i, (running, fills, waiting) in enumerate(loads):
        t.observe(report(1, NOW, running=running, waiting=waiting, fills=fills,
                         engine=f"e{i}"), NOW)
    return t


def opens(t: LoadTracker, rule: StaticRule | None = None) -> bool:
    return LoadThresholdPolicy(t, rule=rule).open_branch("b", "c", "", MODEL, NOW).open


def test_baselines_answer_the_same_calls() -> None:
    assert AlwaysPolicy().admit("b", "c", proposals(), MODEL, 1.0).admitted == ("h1", "h2", "h3")
    assert ThresholdPolicy(0.2).admit("b", "c", proposals(), MODEL, 1.0).admitted == ("h1", "h2")
    static = LoadThresholdPolicy(tracker_at(running=40), top_k=2)
    assert static.admit("b", "c", proposals(), MODEL, NOW).admitted == ("h1", "h2")


def test_three_of_four_free_workers_open_and_two_do_not() -> None:
    busy = (FREE_CANONICAL + 1, 0, 0)  # one canonical request past a free worker's
    assert opens(engines((FREE_CANONICAL, 0, 0), (0, 0, 0), (0, 0, 0), busy))
    assert not opens(engines((0, 0, 0), (0, 0, 0), busy, busy))
    # a worker running only fills delays no canonical request: it is free
    assert opens(engines((9, 9, 0), (0, 0, 0), (0, 0, 0), busy))
    # a waiting request counts against its engine too
    assert not opens(engines((0, 0, 0), (0, 0, 0), (FREE_CANONICAL, 0, 1), busy))


def test_a_queue_of_two_opens_and_three_refuses() -> None:
    assert opens(engines((0, 0, 0), (0, 0, 0), (0, 0, 0), (9, 0, 2)))
    assert not opens(engines((0, 0, 0), (0, 0, 0), (0, 0, 0), (9, 0, 3)))


def test_the_thresholds_are_settings() -> None:
    one_busy = engines((5, 0, 0), (5, 0, 0), (0, 0, 0), (0, 0, 0))
    assert not opens(one_busy)
    assert opens(one_busy, StaticRule(free_canonical=5))  # five canonical requests still free
    assert not opens(engines((1, 0, 0), (1, 0, 0), (0, 0, 0), (0, 0, 0)),
                     StaticRule(free_canonical=0))  # the strict reading: none at all
    assert opens(one_busy, StaticRule(free_workers=0.5))  # 2 of 4 suffice
    assert StaticRule().needed(4) == 3 and StaticRule().needed(8) == 6  # floor(0.75 n)
    assert StaticRule().needed(2) == 1 and StaticRule(free_workers=0.1).needed(4) == 1
    assert opens(engines((5, 0, 0), (0, 0, 0)))  # two engines: 1 of 2 free suffices
    policy = build_policy(AdmissionSettings(policy="load_threshold", free_workers=0.5,
                                            free_canonical=1, max_queue=0), LoadTracker())
    assert isinstance(policy, LoadThresholdPolicy)
    assert policy.rule == StaticRule(0.5, 0, 1)


def test_every_refusal_is_counted_by_cause() -> None:
    policy = LoadThresholdPolicy(engines((5, 0, 0), (5, 0, 0), (0, 0, 0), (0, 0, 0)))
    decision = policy.open_branch("b", "c", "", MODEL, NOW)
    assert not decision.open and "2 of 4 engines free (need 3)" in decision.reason
    policy.tracker = engines((0, 0, 0), (0, 0, 0), (0, 0, 0), (0, 0, 0))
    assert policy.open_branch("b2", "c", "", MODEL, NOW).open
    policy.tracker = engines((0, 0, 0), (4, 0, 3), (4, 0, 3), (0, 0, 0))
    assert not policy.open_branch("b3", "c", "", MODEL, NOW).open
    assert not policy.open_branch("b4", "c", "", MODEL, NOW + 60).open  # every report stale
    assert policy.account() == {"gate": {"opened": 1, "refused": 3}, "refused_by": {
        "free_workers": 1, "free_workers+queue": 1, "no_report": 1}}


@pytest.mark.parametrize(("key", "value"), [("free_workers", 0.0), ("free_workers", 1.5),
                                            ("free_canonical", -1), ("max_queue", -1)])
def test_the_static_settings_refuse_values_out_of_range(key: str, value: float) -> None:
    with pytest.raises(ValidationError, match=key):
        AdmissionSettings(policy="load_threshold", **{key: value})
    with pytest.raises(InvalidArgument, match=key):
        StaticRule(**{key: value})  # type: ignore[arg-type]


def test_the_static_rule_keeps_its_answers_timed_for_a_runs_record() -> None:
    policy = LoadThresholdPolicy(engines((0, 0, 0), (0, 0, 0), (0, 0, 0), (0, 0, 0)))
    assert policy.open_branch("b1", "c", "", MODEL, NOW).open
    policy.tracker = engines((5, 0, 0), (5, 0, 0), (0, 0, 0), (0, 0, 0))
    assert not policy.open_branch("b2", "c", "", MODEL, NOW + 1).open
    assert policy.decisions() == [(NOW, True, None), (NOW + 1, False, None)]
