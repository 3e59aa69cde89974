"""The baseline admission policies the priced controller is compared with (selectable per run,
``AdmissionSettings.policy``), behind the same ``AdmissionPolicy`` calls:

- ``fixed``: open every branch, admit the top K by rank (``fixed_rule.TopKRule``; K = 2, and
  ``fixed1`` is the same with K = 1);
- ``always``: open every branch and admit every predicted candidate;
- ``threshold``: a static p* on the fill gate (the paper's fixed-threshold control, §5.4);
- ``load_threshold``: the paper's static control (§5.5, ``StaticRule``): open a branch only while
  at least 3 of 4 engines are free workers (no canonical request) and at most 2 requests wait,
  and admit the top K. Every answer is counted (``account``), so a run shows whether the
  control ever acted.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from services.admission.core import Admission, BranchOutcome, Proposal
from services.admission.fixed_rule import TOP_K, TopKRule
from services.admission.generation_gate import GateDecision
from services.admission.load_view import EngineLoad, LoadTracker
from services.common.values.candidates import RankedCandidate
from services.common.values.errors import InvalidArgument

#: The paper's static control (§5.5, ``StaticRule``): the share of the engines that must be free
#: (3 of 4 workers), the most requests waiting over them, and the canonical requests an engine
#: may hold and still count as free.
FREE_WORKERS = 0.75
MAX_QUEUE = 2
FREE_CANONICAL = 4
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
              now: float, branch_class: str = "", window_s: float = 0.0,
              visit: int = 0) -> Admission:
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
              now: float, branch_class: str = "", window_s: float = 0.0,
              visit: int = 0) -> Admission:
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
              now: float, branch_class: str = "", window_s: float = 0.0,
              visit: int = 0) -> Admission:
        chosen = tuple(p.candidate for p in sorted(proposals, key=lambda p: p.rank)
                       if p.probability > self.p_star)
        return Admission(chosen, 0.0, f"threshold: p > {self.p_star}")


@dataclass(frozen=True, slots=True)
class StaticRule:
    """The paper's static control over the engines of a model as its workers (dynbranch §5.5):
    "Static opens candidate generation only with at least three free workers and queue depth
    at most two; always opens whenever a candidate exists."

    The paper does not define a free worker. Here an engine is free while it holds at most
    ``free_canonical`` canonical requests (running sequences that are not fills, plus waiting
    ones): a worker whose batch does not yet slow it. The default, 4, is where a decode step on
    the 32B/H200 preset is within 10% of a lone sequence's (19.9 against 18.6 ms; each sequence
    adds about 0.44 ms), so a fill placed there stretches its few canonical requests little. A
    stricter reading, 0 (no canonical request at all), left the rule refusing nearly every
    branch from 0.8 workflows/s on four engines (Routing: 0.788 of the floor against C1 alone's
    0.812 and top 2's 0.542): a baseline that cannot act where fills are cheap is no baseline.
    Running fills do not make a worker busy (they delay no canonical request), and the
    engine's ``max_running`` is no measure of busy (an admission cap: 1,024 on the sim's H200
    preset, as in vLLM). ``free_workers`` is the share of the model's engines (current reports)
    that must be free: 3 of 4 is 0.75. The count needed is floor(share x engines), at least 1
    (1 of 2, 3 of 4, 6 of 8): while Action 0 is asked the branch's own decision request runs on
    one engine, so on the paper's four workers "three free" is every other worker free;
    rounding up would ask 2 of 2 on two engines, which the decision request itself refuses.
    The queue depth is the requests waiting over all of the model's engines: one queue, as the
    paper states one depth."""

    free_workers: float = FREE_WORKERS
    max_queue: int = MAX_QUEUE
    free_canonical: int = FREE_CANONICAL

    def __post_init__(self) -> None:
        if not 0 < self.free_workers <= 1:
            raise InvalidArgument("free_workers", "must be in (0, 1]")
        if self.max_queue < 0:
            raise InvalidArgument("max_queue", "must be >= 0")
        if self.free_canonical < 0:
            raise InvalidArgument("free_canonical", "must be >= 0")

    def needed(self, engines: int) -> int:
        """Free engines needed among ``engines``: floor(share x engines), at least one."""
        return max(math.floor(self.free_workers * engines + 1e-9), 1)

    def is_free(self, r: EngineLoad) -> bool:
        """An engine holding at most ``free_canonical`` canonical requests."""
        return max(r.running - r.fill_running, 0) + r.waiting <= self.free_canonical

    def check(self, reports: Sequence[EngineLoad]) -> tuple[bool, str, str]:
        """(open, refusal cause or "", a reason naming the figures) for the engines' reports;
        causes: "no_report", "free_workers", "queue", "free_workers+queue"."""
        if not reports:
            return False, "no_report", "load_threshold: no current engine report"
        free = sum(self.is_free(r) for r in reports)
        queue = sum(r.waiting for r in reports)
        need = self.needed(len(reports))
        causes = "+".join(c for c, failed in (("free_workers", free < need),
                                              ("queue", queue > self.max_queue)) if failed)
        figures = (f"{free} of {len(reports)} engines free (need {need}), queue {queue} "
                   f"(at most {self.max_queue})")
        return not causes, causes, f"load_threshold: {figures}"


#: Timed answers ``LoadThresholdPolicy`` keeps for a run's record (the oldest forgotten).
MAX_ANSWERS = 100_000


class LoadThresholdPolicy(AlwaysPolicy):
    """The paper's static control (``StaticRule``, §5.5) at Action 0: open a branch only while
    the rule holds over the model's engines; Action 1 then admits the top ``top_k`` (the rule
    gates candidate generation, as the paper's does). Every answer is counted, refusals by
    cause (``account``), so a run shows whether the control acted."""

    name = "load_threshold"

    def __init__(self, tracker: LoadTracker, top_k: int = TOP_K,
                 rule: StaticRule | None = None) -> None:
        if top_k < 0:
            raise InvalidArgument("top_k", "must be >= 0")
        self.tracker, self.top_k, self.rule = tracker, top_k, rule or StaticRule()
        self.opened = 0
        self.refused = Counter[str]()
        self.answers: deque[tuple[float, bool, float | None]] = deque(maxlen=MAX_ANSWERS)

    def open_branch(self, branch_id: str, coordinate: str, branch_class: str, model: str,
                    now: float) -> GateDecision:
        ok, cause, reason = self.rule.check(self.tracker.reports(model, now))
        if ok:
            self.opened += 1
        else:
            self.refused[cause] += 1
        self.answers.append((now, ok, None))
        return GateDecision(ok, reason)

    def decisions(self) -> list[tuple[float, bool, float | None]]:
        """Its answers in order (the latest ``MAX_ANSWERS``): (time, opened, None: the rule
        prices nothing)."""
        return list(self.answers)

    def account(self) -> dict[str, Any]:
        """How often the control opened and refused, refusals by cause (a control that never
        refuses never acted)."""
        return {"gate": {"opened": self.opened, "refused": sum(self.refused.values())},
                "refused_by": dict(sorted(self.refused.items()))}

    def admit(self, branch_id: str, coordinate: str, proposals: Sequence[Proposal], model: str,
              now: float, branch_class: str = "", window_s: float = 0.0,
              visit: int = 0) -> Admission:
        ranked = sorted(proposals, key=lambda p: p.rank)[: self.top_k]
        return Admission(tuple(p.candidate for p in ranked), 0.0,
                         f"load_threshold: top {self.top_k}")


__all__ = ["AlwaysPolicy", "FixedAdapter", "LoadThresholdPolicy", "StaticRule", "ThresholdPolicy"]
