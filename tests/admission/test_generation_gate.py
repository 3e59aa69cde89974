"""Action 0 (``generation_gate``, dynbranch Eq. 5): a cold class opens every branch until n0
trials settled (bounding the fan-out beyond n0 in flight), a learned class opens by its score,
audits reopen a closed one, and what was learned survives a restart."""

from __future__ import annotations

import numpy as np
import pytest

from services.admission.generation_gate import DIM, GenerationGate, context
from services.common.values.errors import InvalidArgument
from tests.admission.test_core import x

X = context(canonical_h=32.0, canonical_now=32.0, waiting=0.0)


def test_a_learned_class_opens_by_its_score_and_closes_after_losses() -> None:
    gate = GenerationGate(n0=2, audit_rate=0.0, exploration=0.0)
    for i in range(2):  # the cold trials open; each loses
        assert gate.decide("losing", f"b{i}", X).open
        assert gate.settle("losing", f"b{i}", -500.0)
    verdict = gate.decide("losing", "next", X)
    assert not verdict.open and verdict.kind == "refused" and verdict.score < 0
    for i in range(2):
        gate.decide("paying", f"p{i}", X)
        gate.settle("paying", f"p{i}", 800.0)
    assert gate.decide("paying", "next", X).open


def test_an_audit_reopens_a_closed_class_now_and_then() -> None:
    gate = GenerationGate(n0=1, audit_rate=1.0, exploration=0.0)
    gate.decide("c", "b0", X)
    gate.settle("c", "b0", -1000.0)
    verdict = gate.decide("c", "b1", X)
    assert verdict.open and verdict.audit and verdict.kind == "audit"


def test_learned_state_round_trips_and_a_bad_context_is_refused() -> None:
    gate = GenerationGate(n0=1, audit_rate=0.0)
    gate.decide("c", "b0", X)
    assert gate.settle("c", "b0", 300.0) and not gate.settle("c", "nope", 1.0)
    again = GenerationGate(n0=1, audit_rate=0.0)
    assert again.restore(gate.state()) == 1
    assert again.score("c", X) == pytest.approx(gate.score("c", X))
    with pytest.raises(InvalidArgument, match="context"):
        gate.decide("c", "b1", np.zeros(DIM + 1))


def test_a_cold_class_opens_every_branch_bounding_the_fan_out_beyond_its_trials() -> None:
    g = GenerationGate(n0=2, audit_rate=0.0)
    first, second = g.decide("c", "b1", x()), g.decide("c", "b2", x())
    assert first.open and second.open and not first.bounded and not second.bounded
    third = g.decide("c", "b3", x())  # two cold trials in flight: open, fan-out bounded
    assert third.open and third.bounded and third.kind == "cold_bounded"
    assert g.decide("c", "b1", x()).kind == "known"  # an open branch asked again
    assert g.classes["c"].pending == 3 and set(g.classes["c"].trials) == {"b1", "b2", "b3"}
    for b in ("b1", "b2"):  # n0 trials settle: the class is warm, the model decides
        g.settle("c", b, 500.0)
    assert g.decide("c", "b4", x()).kind == "priced"


def test_an_optimistic_class_prior_does_not_lock_shut_on_a_few_small_losses() -> None:
    g = GenerationGate(n0=2, audit_rate=0.0, prior=1000.0)
    for i in range(6):  # six branches lose 50 ms each (setup, nothing consumed)
        assert g.decide("c", f"b{i}", x()).open
        g.settle("c", f"b{i}", -50.0)
    assert g.decide("c", "next", x()).open
    for i in range(200):  # a class that keeps losing does close in the end, prior or not
        if g.decide("c", f"m{i}", x()).open:
            g.settle("c", f"m{i}", -50.0)
    assert not g.decide("c", "last", x()).open
