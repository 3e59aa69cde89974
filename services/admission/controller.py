"""Load-priced, two-level admission with delayed feedback (dynbranch §3.4, Algorithm 1), and the
baseline policies it is compared with.

``PricedController`` ties the parts together: the load view (``load_view``), the generation gate
(``generation_gate``, Action 0), and the fill gate (``fill_gate``, Action 1) priced by
``pricing``. Its estimates, all learned online from ``report``:

- p̃_s = π̃_sel(rank) x π̄_use: a rank-conditioned Beta upper quantile of "the branch selects the
  candidate at this rank" (prior: the predictor's probability as ``prior_weight`` pseudo-counts)
  times the posterior mean of "an admitted, selected fill is used in time" (per class);
- G_s: the execution a consumed fill saves (class mean of reported savings, prior: the
  candidate's ``est_gain_s`` or ``default_gain_ms``);
- the footprint: the candidate's ``est_exec_s`` (or the class mean fill cost) and
  ``fill_kv_blocks``.

Selection posteriors update for every predicted candidate of a settled branch; usability only for
admitted fills of the selected candidate. Every per-branch record is bounded (oldest forgotten).
The baselines (``baselines``) answer the same three calls (``Policy``), so a run selects one by
name; ``replay`` scores recorded decisions against the exact oracle.
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from scipy.special import betaincinv

from services.admission.fill_gate import FillCandidate, FillDecision, admit
from services.admission.generation_gate import GateDecision, GenerationGate, context
from services.admission.load_view import LoadSnapshot, LoadTracker
from services.admission.pricing import Footprint, LoadPricing, PriceCurves
from services.common.errors import InvalidArgument


@dataclass(frozen=True, slots=True)
class Proposal:
    """A candidate as Action 1 receives it (proto ``Candidate``)."""

    candidate: str
    rank: int
    probability: float
    est_exec_s: float = 0.0
    est_gain_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Outcome:
    """A settled branch (proto ``ReportOutcomeRequest``)."""

    branch_id: str
    selected: str
    saved_s: float
    fill_cost_s: float
    setup_s: float
    #: False for the provisional report at resolution (the selection is known, savings are not
    #: yet); True for the final one. A branch may get one of each, in that order.
    final: bool = True
    #: Producer identities of the shadows the branch's demands promoted.
    consumed: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Admission:
    """Action 1's answer: admitted names in order and the slot price it used."""

    admitted: tuple[str, ...]
    load_price: float
    reason: str


@dataclass(slots=True)
class _Beta:
    success: float = 0.0
    failure: float = 0.0


@dataclass(slots=True)
class _ClassStats:
    selection: dict[int, _Beta] = field(default_factory=dict)
    usability: _Beta = field(default_factory=_Beta)
    gain_sum_ms: float = 0.0
    gain_n: int = 0
    cost_sum_s: float = 0.0
    cost_n: int = 0
    consumption: float = 0.0  # exponentially weighted share of branches that consumed a fill


@dataclass(slots=True)
class _Branch:
    coordinate: str
    branch_class: str
    model: str
    proposals: list[Proposal] = field(default_factory=list)
    admitted: dict[str, float] = field(default_factory=dict)  # candidate -> cost_ms at admission
    producers: dict[str, str] = field(default_factory=dict)  # candidate -> producer prefix
    tokens: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One Action 1 decision as recorded for oracle replay (Appendix B): the candidates as the
    gate priced them, the view, the pricing, and what the rule admitted (audits excluded)."""

    candidates: tuple[FillCandidate, ...]
    view: LoadSnapshot
    pricing: LoadPricing
    admitted: tuple[str, ...]
    utility_ms: float


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    """Tunables of the priced controller (defaults: the paper's, where it gives one)."""

    window_s: float = 8.0
    n0: int = 4
    audit_rate: float = 0.05
    selection_quantile: float = 0.9
    prior_weight: float = 2.0
    default_gain_ms: float = 2000.0
    default_exec_s: float = 2.0
    fill_kv_blocks: int = 64
    max_branches: int = 10_000
    #: Action 1 decisions kept for oracle replay (0: none).
    max_snapshots: int = 0
    seed: int = 0


class PricedController:
    """Action 0 and Action 1 at live load, learning from delayed feedback."""

    name = "priced"

    def __init__(self, tracker: LoadTracker, curves: PriceCurves | None = None,
                 settings: ControllerSettings | None = None) -> None:
        self.settings = s = settings or ControllerSettings()
        self.tracker = tracker
        self.curves = curves or PriceCurves()
        self.gate = GenerationGate(n0=s.n0, audit_rate=s.audit_rate, seed=s.seed)
        self.rng = random.Random(s.seed + 1)
        self.stats: OrderedDict[str, _ClassStats] = OrderedDict()
        self.branches: OrderedDict[str, _Branch] = OrderedDict()
        #: Branches with a provisional report, waiting for their final one (bounded).
        self.settled: OrderedDict[str, _Branch] = OrderedDict()
        self.snapshots: deque[Snapshot] = deque(maxlen=s.max_snapshots or None)
        #: Action 0 answers so far: opened (cold trials, priced, audits) and refused.
        self.gate_counts = {"opened": 0, "refused": 0}

    # -- helpers ---------------------------------------------------------------------------------

    def _stats(self, branch_class: str) -> _ClassStats:
        st = self.stats.get(branch_class)
        if st is None:
            st = self.stats[branch_class] = _ClassStats()
            while len(self.stats) > self.settings.max_branches:
                self.stats.popitem(last=False)
        return st

    def _branch(self, branch_id: str, coordinate: str, branch_class: str,
                model: str) -> _Branch:
        b = self.branches.get(branch_id)
        if b is None:
            b = self.branches[branch_id] = _Branch(coordinate, branch_class, model)
            while len(self.branches) > self.settings.max_branches:
                _, old = self.branches.popitem(last=False)
                for token in old.tokens:
                    self.tracker.release(old.model, token)
        return b

    def selection_upper(self, st: _ClassStats, rank: int, probability: float) -> float:
        """π̃_sel: the upper ``selection_quantile`` of the rank's Beta posterior."""
        beta = st.selection.get(rank, _Beta())
        w = self.settings.prior_weight
        a = 1.0 + w * probability + beta.success
        b = 1.0 + w * (1.0 - probability) + beta.failure
        return float(betaincinv(a, b, self.settings.selection_quantile))

    @staticmethod
    def usability_mean(st: _ClassStats) -> float:
        """π̄_use: the posterior mean of timely use given selection (uniform prior)."""
        return (1.0 + st.usability.success) / (2.0 + st.usability.success + st.usability.failure)

    def _gain_ms(self, st: _ClassStats, proposal: Proposal) -> float:
        if st.gain_n:
            return st.gain_sum_ms / st.gain_n
        if proposal.est_gain_s > 0:
            return proposal.est_gain_s * 1000.0
        return self.settings.default_gain_ms

    def _pending_credit_ms(self, st: _ClassStats, b: _Branch, outcome: Outcome) -> float:
        """What a provisional report credits a branch whose selected candidate was admitted
        but not yet consumed: its expected gain (usability mean × class gain). The fill is
        usually consumed after the branch resolves, when the downstream demand arrives; a zero
        credit here would teach Action 0 a loss for every trial until the final report revises
        it, and close the class meanwhile. The final report replaces this with the measured
        return."""
        if outcome.final or outcome.selected not in b.admitted:
            return 0.0
        proposal = next((p for p in b.proposals if p.candidate == outcome.selected), None)
        gain = self._gain_ms(st, proposal) if proposal is not None else (
            st.gain_sum_ms / st.gain_n if st.gain_n else self.settings.default_gain_ms)
        return self.usability_mean(st) * gain

    def _exec_s(self, st: _ClassStats, proposal: Proposal) -> float:
        if proposal.est_exec_s > 0:
            return proposal.est_exec_s
        return st.cost_sum_s / st.cost_n if st.cost_n else self.settings.default_exec_s

    def view(self, model: str, now: float) -> LoadSnapshot:
        """V_H for a model now."""
        return self.tracker.snapshot(model, now)

    # -- Action 0 -------------------------------------------------------------------------------

    def open_branch(self, branch_id: str, coordinate: str, branch_class: str, model: str,
                    now: float) -> GateDecision:
        """The generation gate for one branch (registered as a trial when it opens)."""
        cls = branch_class or coordinate
        v = self.view(model, now)
        st = self._stats(cls)
        x = context(v.envelope, v.pressure, st.consumption, max(v.pressure - 1.0, 0.0),
                    min(v.fill_occupancy, 10.0))
        decision = self.gate.decide(cls, branch_id, x)
        self.gate_counts["opened" if decision.open else "refused"] += 1
        if decision.open:
            self._branch(branch_id, coordinate, cls, model)
        return decision

    # -- Action 1 -------------------------------------------------------------------------------

    def admit(self, branch_id: str, coordinate: str, proposals: Sequence[Proposal], model: str,
              now: float, branch_class: str = "", window_s: float = 0.0) -> Admission:
        """The fill gate at projected load; admitted fills are reserved until settled.

        ``window_s`` (engine seconds): > 0 caps each gain at the overlap the window leaves
        (Lemma A.6); < 0: the window has closed and nothing is admitted; 0: unknown, no cap.
        """
        if window_s < 0:
            return Admission((), 0.0, "priced: the resolution window has closed")
        b = self.branches.get(branch_id)
        if b is None:  # admitted without Action 0 (e.g. a user-offered branch)
            b = self._branch(branch_id, coordinate, branch_class or coordinate, model)
        b.proposals = list(proposals)
        st = self._stats(b.branch_class)
        v = self.view(model, now)
        pool = max(v.kv_budget_blocks, 1)
        pricing = LoadPricing(self.curves, kv_pool_blocks=max(
            int(pool / self.tracker.kv_budget_share / max(v.engines, 1)), 1))
        use = self.usability_mean(st)
        cap = window_s * 1000.0 if window_s > 0 else math.inf
        candidates = [FillCandidate(p.candidate,
                                    min(self.selection_upper(st, p.rank, p.probability) * use, 1),
                                    min(self._gain_ms(st, p), cap),
                                    Footprint(self._exec_s(st, p), self.settings.fill_kv_blocks))
                      for p in proposals if p.candidate not in b.admitted]
        decision: FillDecision[LoadSnapshot] = admit(
            candidates, v, pricing, audit_rate=self.settings.audit_rate, rng=self.rng)
        if self.settings.max_snapshots and candidates and \
                not any(a.audit for a in decision.admitted):
            self.snapshots.append(Snapshot(tuple(candidates), v, pricing, decision.names,
                                           decision.total_utility_ms))
        for a in decision.admitted:
            token = f"{branch_id}/{a.name}"
            self.tracker.reserve(model, token, self.settings.fill_kv_blocks)
            b.tokens.append(token)
            cand = next(c for c in candidates if c.name == a.name)
            b.admitted[a.name] = pricing.cost_ms(cand, v)
            b.producers[a.name] = f"fill/{branch_id}/{a.name}/"  # recorded at admission
        price = self.curves.slot_price(v)
        return Admission(decision.names, price,
                         f"priced: {len(decision.names)} of {len(candidates)} at "
                         f"ρ̄={v.envelope:.2f}, slot price {price:.0f} ms/s")

    # -- feedback ---------------------------------------------------------------------------------

    def report(self, outcome: Outcome) -> bool:
        """Feedback of a branch. The first report (provisional or final) updates selection for
        every predicted candidate, releases the branch's reservations and gives Action 0 the
        branch's return so far (Eq. 4), so its trial stops counting as pending; the final one
        updates usability, gain and cost and revises that return. False when unknown or
        already final."""
        b = self.branches.pop(outcome.branch_id, None)
        if b is not None:
            for token in b.tokens:
                self.tracker.release(b.model, token)
            st = self._stats(b.branch_class)
            for p in b.proposals:
                beta = st.selection.setdefault(p.rank, _Beta())
                if p.candidate == outcome.selected:
                    beta.success += 1
                else:
                    beta.failure += 1
            self.settled[outcome.branch_id] = b
            while len(self.settled) > self.settings.max_branches:
                self.settled.popitem(last=False)
        elif outcome.branch_id not in self.settled:
            return False
        b = self.settled[outcome.branch_id]
        st = self._stats(b.branch_class)
        # Credit requires a consumed entry that names the producer recorded at admission.
        prefix = b.producers.get(outcome.selected, "")
        consumed = bool(prefix) and outcome.saved_s > 0 \
            and any(p.startswith(prefix) for p in outcome.consumed)
        if outcome.final:
            del self.settled[outcome.branch_id]
            if outcome.selected in b.admitted:
                if consumed:
                    st.usability.success += 1
                else:
                    st.usability.failure += 1
            if consumed:
                st.gain_sum_ms += outcome.saved_s * 1000.0
                st.gain_n += 1
            if b.admitted and outcome.fill_cost_s > 0:
                st.cost_sum_s += outcome.fill_cost_s / len(b.admitted)
                st.cost_n += 1
            st.consumption = 0.8 * st.consumption + 0.2 * float(consumed)
        # The selected fill is waste only once the final report says it was not consumed.
        selected_unused = outcome.final and not consumed
        wasted = sum(c for name, c in b.admitted.items()
                     if name != outcome.selected or selected_unused)
        target = (outcome.saved_s * 1000.0 if consumed else self._pending_credit_ms(
            st, b, outcome)) - outcome.setup_s * 1000.0 - wasted
        self.gate.settle(b.branch_class, outcome.branch_id, target)
        return True


class Policy(Protocol):
    """What the admission servicer asks of any policy (priced or a baseline)."""

    name: str

    def open_branch(self, branch_id: str, coordinate: str, branch_class: str, model: str,
                    now: float) -> GateDecision:
        """Action 0."""
        ...

    def admit(self, branch_id: str, coordinate: str, proposals: Sequence[Proposal], model: str,
              now: float, branch_class: str = "", window_s: float = 0.0) -> Admission:
        """Action 1."""
        ...

    def report(self, outcome: Outcome) -> bool:
        """Delayed feedback of a settled branch."""
        ...


def finite(value: float, name: str) -> float:
    """Refuse NaN and infinities in a report, naming the field."""
    if not math.isfinite(value) or value < 0:
        raise InvalidArgument(name, "must be a finite, non-negative number")
    return value


__all__ = [
    "Admission", "ControllerSettings", "Outcome", "Policy", "PricedController", "Proposal",
    "Snapshot", "finite",
]
