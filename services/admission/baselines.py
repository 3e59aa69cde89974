"""The baseline admission policies the priced controller is compared with (issue: selectable
per run), behind the same ``Policy`` calls:

- ``fixed``: open every branch, admit the top K by rank (``policy.FixedPolicy``);
- ``always``: open every branch and admit every predicted candidate;
- ``threshold``: a static p* on the fill gate (the paper's fixed-threshold control, §5.4);
- ``load_threshold``: speculate only while the engines' load is below a set level, the way
  SPAgent-style schedulers gate speculation.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.admission.controller import Admission, Outcome, Proposal
from services.admission.generation_gate import GateDecision
from services.admission.load_view import LoadTracker
from services.admission.policy import FixedPolicy
from services.common.candidates import RankedCandidate
from services.common.errors import InvalidArgument


class FixedAdapter:
    """The fixed policy (``policy.FixedPolicy``: open every branch, admit the top K) behind the
    same three calls as the priced controller."""

    name = "fixed"

    def __init__(self, policy: FixedPolicy) -> None:
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

    def report(self, outcome: Outcome) -> bool:
        return True


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

    def report(self, outcome: Outcome) -> bool:
        return True


class ThresholdPolicy(AlwaysPolicy):
    """A static p* on the fill gate (the paper's fixed-threshold control): admit a candidate
    whose predicted probability exceeds ``p_star``."""

    name = "threshold"

    def __init__(self, p_star: float = 0.5) -> None:
        if not 0 <= p_star <= 1:
            raise InvalidArgument("p_star", "must be in [0, 1]")
        self.p_star = p_star

    def admit(self, branch_id: str, coordinate: str, proposals: Sequence[Proposal], model: str,
              now: float, branch_class: str = "", window_s: float = 0.0) -> Admission:
        chosen = tuple(p.candidate for p in sorted(proposals, key=lambda p: p.rank)
                       if p.probability > self.p_star)
        return Admission(chosen, 0.0, f"threshold: p > {self.p_star}")


class LoadThresholdPolicy(AlwaysPolicy):
    """Speculate only while the engines' load is below a set level (SPAgent-style gating):
    open and admit the top ``top_k`` while ρ_t < ``max_pressure``, nothing otherwise."""

    name = "load_threshold"

    def __init__(self, tracker: LoadTracker, max_pressure: float = 0.7, top_k: int = 2) -> None:
        self.tracker, self.max_pressure, self.top_k = tracker, max_pressure, top_k

    def open_branch(self, branch_id: str, coordinate: str, branch_class: str, model: str,
                    now: float) -> GateDecision:
        rho = self.tracker.snapshot(model, now).pressure
        return GateDecision(rho < self.max_pressure, f"load_threshold: ρ={rho:.2f}")

    def admit(self, branch_id: str, coordinate: str, proposals: Sequence[Proposal], model: str,
              now: float, branch_class: str = "", window_s: float = 0.0) -> Admission:
        rho = self.tracker.snapshot(model, now).pressure
        if rho >= self.max_pressure:
            return Admission((), rho, f"load_threshold: ρ={rho:.2f} >= {self.max_pressure}")
        ranked = sorted(proposals, key=lambda p: p.rank)[: self.top_k]
        return Admission(tuple(p.candidate for p in ranked), rho,
                         f"load_threshold: top {self.top_k}")


__all__ = ["AlwaysPolicy", "FixedAdapter", "LoadThresholdPolicy", "ThresholdPolicy"]
