"""The baseline admission policies the priced controller is compared with (selectable per run,
``AdmissionSettings.policy``), behind the same ``AdmissionPolicy`` calls:

- ``fixed``: open every branch, admit the top K by rank (``fixed_rule.TopKRule``; K = 2, and
  ``fixed1`` is the same with K = 1);
- ``always``: open every branch and admit every predicted candidate;
- ``threshold``: a static p* on the fill gate (the paper's fixed-threshold control, §5.4);
- ``load_threshold``: the paper's static control (§5.5): open a branch only while some engine of
  the model has at least ``min_free_slots`` (3) free running slots and at most ``max_queue`` (2)
  waiting requests, and admit the top K. Every answer is counted (``account``), so a run shows
  whether the control ever acted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from services.admission.core import Admission, BranchOutcome, Proposal
from services.admission.fixed_rule import TOP_K, TopKRule
from services.admission.generation_gate import GateDecision
from services.admission.load_view import LoadTracker
from services.common.values.candidates import RankedCandidate
from services.common.values.errors import InvalidArgument

#: The paper's static control (§5.5): an engine needs this many free running slots, and at most
#: this many waiting requests, for a branch to open.
MIN_FREE_SLOTS = 3
MAX_QUEUE = 2
#: The threshold baseline's static p*.
P_STAR = 0.5


class FixedAdapter:
    """The fixed policy (``fixed_rule.TopKRule``: open every branch, admit the top K) behind the
    same three calls as the priced controller."""

    name = "fixed"

    def __init__(self, policy: TopKRule) -> None:
        self.policy = policy

    def open_branch(self, branch_id: str, coordinate: str, branch_class: str, model: str,
                    now: float) -> GateDecision:
        is_open, reason = self.policy.open_branch(coordinate)
        return GateDecision(is_open, reason)

    def admit(self, branch_id: str, coordinate: str, proposals: Sequence[Proposal], model: str,
              now: float, branch_class: str = "", window_s: float = 0.0) -> Admission:
        decision = self.policy.admit([RankedCandidate(p.candidate, p.rank, p.probability)
                                      for p in proposals])
        return Admission(decision.admitted, 0.0, decision.reason)

    def report(self, outcome: BranchOutcome) -> bool:
        return True

    def account(self) -> dict[str, Any]:
        """Nothing to account for: every branch opens, the top K are admitted."""
        return {}


class AlwaysPolicy:
    """Open every branch and admit every predicted candidate (the always-on baseline)."""

    name = "always"

    def open_branch(self, branch_id: str, coordinate: str, branch_class: str, model: str,
                    now: float) -> GateDecision:
        return GateDecision(True, "always")

    def admit(self, branch_id: str, coordinate: str, proposals: Sequence[Proposal], model: str,
              now: float, branch_class: str = "", window_s: float = 0.0) -> Admission:
        return Admission(tuple(p.candidate for p in sorted(proposals, key=lambda p: p.rank)),
                         0.0, "always: every candidate")

    def report(self, outcome: BranchOutcome) -> bool:
        return True

    def account(self) -> dict[str, Any]:
        """Nothing to account for: every branch opens."""
        return {}


class ThresholdPolicy(AlwaysPolicy):
    """A static p* on the fill gate (the paper's fixed-threshold control): admit a candidate
    whose predicted probability exceeds ``p_star``."""

    name = "threshold"

    def __init__(self, p_star: float = P_STAR) -> None:
        if not 0 <= p_star <= 1:
            raise InvalidArgument("p_star", "must be in [0, 1]")
        self.p_star = p_star

    def admit(self, branch_id: str, coordinate: str, proposals: Sequence[Proposal], model: str,
              now: float, branch_class: str = "", window_s: float = 0.0) -> Admission:
        chosen = tuple(p.candidate for p in sorted(proposals, key=lambda p: p.rank)
                       if p.probability > self.p_star)
        return Admission(chosen, 0.0, f"threshold: p > {self.p_star}")


class LoadThresholdPolicy(AlwaysPolicy):
    """The paper's static control (§5.5): speculate only while some engine has at least
    ``min_free_slots`` free running slots and at most ``max_queue`` waiting requests; then open
    and admit the top ``top_k``. ``slots`` > 0 counts free slots against that many per engine
    instead of the engine's own ``max_running`` (an operator running engines below their
    limit)."""

    name = "load_threshold"

    def __init__(self, tracker: LoadTracker, top_k: int = TOP_K,
                 min_free_slots: int = MIN_FREE_SLOTS, max_queue: int = MAX_QUEUE,
                 slots: int = 0) -> None:
        if min_free_slots < 0 or max_queue < 0 or slots < 0:
            raise InvalidArgument("min_free_slots", "min_free_slots, max_queue and slots must "
                                                    "be >= 0")
        self.tracker, self.top_k = tracker, top_k
        self.min_free_slots, self.max_queue, self.slots = min_free_slots, max_queue, slots
        self.decisions = {True: 0, False: 0}

    def _headroom(self, model: str, now: float) -> tuple[bool, str]:
        best = ""
        for r in self.tracker.reports(model, now):
            free = (self.slots or r.max_running) - r.running
            if free >= self.min_free_slots and r.waiting <= self.max_queue:
                return True, f"load_threshold: {r.engine_id} has {free} free, {r.waiting} queued"
            best = best or f"{free} free, {r.waiting} queued on {r.engine_id}"
        return False, f"load_threshold: no engine with {self.min_free_slots} free slots and " \
                      f"<= {self.max_queue} queued ({best or 'no current report'})"

    def open_branch(self, branch_id: str, coordinate: str, branch_class: str, model: str,
                    now: float) -> GateDecision:
        ok, reason = self._headroom(model, now)
        self.decisions[ok] += 1
        return GateDecision(ok, reason)

    def account(self) -> dict[str, Any]:
        """How often the control opened and refused (a control that never refuses never
        acted)."""
        return {"gate": {"opened": self.decisions[True], "refused": self.decisions[False]}}

    def admit(self, branch_id: str, coordinate: str, proposals: Sequence[Proposal], model: str,
              now: float, branch_class: str = "", window_s: float = 0.0) -> Admission:
        ok, reason = self._headroom(model, now)
        if not ok:
            return Admission((), 0.0, reason)
        ranked = sorted(proposals, key=lambda p: p.rank)[: self.top_k]
        return Admission(tuple(p.candidate for p in ranked), 0.0,
                         f"load_threshold: top {self.top_k}")


__all__ = ["AlwaysPolicy", "FixedAdapter", "LoadThresholdPolicy", "ThresholdPolicy"]
