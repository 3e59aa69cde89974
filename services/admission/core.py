"""Load-priced, two-level admission with delayed feedback (dynbranch §3.4, Algorithm 1), and the
baseline policies it is compared with.

``PricedController`` ties the parts together: the load view (``load_view``), the generation gate
(``generation_gate``, Action 0), and the fill gate (``fill_gate``, Action 1) priced by
``pricing``. Its estimates, all learned online from ``report``:

- p̃_s = π̃_sel x π̄_use: a quantile of the Beta posterior of "the branch selects this
  candidate" (the median by default, or its mean: ``ControllerSettings.selection_quantile``),
  conditioned on its rank (a tie shares its best rank and learns apart from a candidate alone
  at it: ``tied_ranks``), the bin of the predictor's probability (on the rank alone when it
  gives none) and the branch's visit to its decision point in its workflow (``selection_key``;
  prior Beta(w p', w (1 - p')): the predictor's probability p, scaled by how often its rank's
  candidates in the other bins were selected against what it predicted for them, as
  ``prior_weight`` pseudo-counts, no uniform floor) times the posterior mean of "an admitted,
  selected fill is used in time" (per class);
- G_s: the execution a consumed fill saves: the gateway's projection (``est_gain_s``, capped by
  the window) times the class's realised/projected ratio (shrunk towards 1), else the class's
  realised mean, else ``default_gain_ms`` — per pricing class (single- or multi-stage fills);
- the footprint: the candidate's ``est_exec_s`` (or the class's mean fill cost), its KV blocks
  from its rendered prompt + max_tokens (``est_peak_tokens``) and the prompt it prefills.

The branch class (the gateway sends tenant and coordinate) keys everything learned, so tenants
learn apart while the price curves, which describe the engines, are shared. Selection
posteriors update for every predicted candidate of a settled branch; usability for admitted
fills of the selected candidate: a success when its demand consumed it, a failure otherwise, also
when it did no engine work (still queued when its demand came, or answered by the library, which
served the demand without it): the event p̃ estimates is a consumed fill. Every per-branch
record is bounded (oldest forgotten); ``ledger`` keeps the per-branch account a run is judged
by, and ``state``/``restore`` carry what was learned across restarts (``state_store``). The
baselines (``baselines``) answer the same three calls (``AdmissionPolicy``), so a run selects
one by name; ``replay`` scores recorded decisions against the exact oracle.
"""

from __future__ import annotations

import math
import random
from collections import Counter, OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from scipy.special import betaincinv

from services.admission.fill_gate import FillCandidate, FillDecision, admit
from services.admission.generation_gate import GateDecision, GenerationGate, context
from services.admission.learned import (
    STATE_VERSION,
    Beta,
    ClassStats,
    Mean,
    SelectionCalibration,
    calibration_key,
    class_records,
    discount,
    dropped_parts,
    read_class,
    selection_key,
)
from services.admission.ledger import Ledger, Priced
from services.admission.load_view import WINDOW_S, LoadSnapshot, LoadTracker
from services.admission.pricing import Footprint, LoadPricing, PriceCurves
from services.common.values.errors import InvalidArgument


@dataclass(frozen=True, slots=True)
class Proposal:
    """A candidate as Action 1 receives it (proto ``Candidate``)."""

    candidate: str
    rank: int
    probability: float
    est_exec_s: float = 0.0
    est_gain_s: float = 0.0
    #: Prompt tokens its first stage prefills and tokens it holds at its peak (0: unknown).
    prompt_tokens: int = 0
    peak_tokens: int = 0
    stages: int = 1

    @property
    def pricing_class(self) -> str:
        """Single- and multi-stage fills learn their costs and gains apart."""
        return "single" if self.stages <= 1 else "multi"


@dataclass(frozen=True, slots=True)
class BranchOutcome:
    """A settled branch (proto ``ReportOutcomeRequest``); seconds are engine seconds."""

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
    #: Waits on this branch's fills that did not pay (W_b of Eq. 4).
    wait_s: float = 0.0

    @property
    def fills_worked(self) -> bool:
        """Whether some fill of the branch did engine work (a final report's cost > 0): when
        none did (the library or a canonical execution answered every step, or the branch
        resolved before they started), nothing was late and nothing spent."""
        return self.fill_cost_s > 0


@dataclass(frozen=True, slots=True)
class Admission:
    """Action 1's answer: admitted names in order and the slot price it used."""

    admitted: tuple[str, ...]
    load_price: float
    reason: str
    #: Every candidate as the gate priced it, by name (the priced controller's p̃, G and C;
    #: empty from a policy that prices nothing).
    priced: tuple[tuple[str, Priced], ...] = ()


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

    window_s: float = WINDOW_S
    n0: int = 4
    #: Fills a cold branch beyond the class's cold trials in flight may admit (the bounded
    #: fan-out of cold exploration).
    cold_fanout: int = 1
    #: w_0,c: the class prior of Action 0's ridge model (ms; > 0 is optimistic).
    class_prior_ms: float = 1000.0
    audit_rate: float = 0.05
    #: The quantile of the selection posterior p̃ takes; None: its mean. The paper's upper
    #: quantile buys no exploration here: every predicted candidate's selection is observed
    #: once its branch settles, admitted or not, so optimism would only bias p̃ upwards (issue
    #: 37: 0.75 priced rank-1 candidates at 0.30 against a selection rate of 0.14, filling
    #: runners-up that cost more than they saved under load). The median. Not the mean, though
    #: a fill's expected return p G - C takes p's mean: on a posterior with little evidence the
    #: median prices a candidate predicted at 0.05 at 0.006 (a cold controller left such
    #: candidates out even on idle engines: HCI at idle, +0.012 of the floor behind always,
    #: until a bin's own observations left its prior: +0.003 since), but it also discounts the
    #: runners-up a predictor overrates until their rank's calibration has learned it, and with
    #: the mean a cold controller filled them on Routing at 8/s and at moderate load (+0.019
    #: and +0.015 behind the best fixed fan-out, from +0.006 and +0.008) while a warm one rated
    #: rank 2 at 2.8x its useful rate (docs/experiments.md).
    selection_quantile: float | None = 0.5
    #: Pseudo-counts of the predictor's probability in the selection's Beta prior (no uniform
    #: floor: Beta(w p, w (1 - p))).
    prior_weight: float = 4.0
    #: Evidence a restored selection posterior keeps: its counts scaled down to at most this
    #: many observations, its rate unchanged (a power prior; 0: all). Selection is learned on
    #: another period (or, in the study, another split) and drifts with the workload; kept
    #: whole, tens of old observations per bin outweigh the new branches, and the bins they
    #: overstate are the ones admitted (issue 37; docs/experiments.md, "The C3 study").
    restored_selection: float = 8.0
    #: The same for each rank's calibration, in predicted probability (0: all).
    restored_calibration: float = 2.0
    #: Beta prior of timely use given selection (successes, failures).
    usability_prior: tuple[float, float] = (2.0, 0.5)
    default_gain_ms: float = 2000.0
    #: Pseudo-observations of a realised/projected gain ratio of 1 that the learned ratio
    #: starts from: the first few consumed fills (often at low load, where a fill saves far less
    #: than its window) do not collapse every later gain estimate.
    gain_prior_weight: float = 4.0
    #: Pseudo-counts (in probability units) of a calibration factor of 1 per rank.
    calibration_weight: float = 2.0
    default_exec_s: float = 2.0
    #: KV blocks a fill is priced and reserved at when its tokens are unknown.
    fill_kv_blocks: int = 64
    max_branches: int = 10_000
    #: Action 1 decisions kept for oracle replay (0: none).
    max_snapshots: int = 0
    seed: int = 0


@dataclass(slots=True)
class _Branch:
    coordinate: str
    branch_class: str
    model: str
    bounded: bool = False
    proposals: list[Proposal] = field(default_factory=list)
    admitted: dict[str, float] = field(default_factory=dict)  # candidate -> cost_ms at admission
    producers: dict[str, str] = field(default_factory=dict)  # candidate -> producer prefix
    tokens: list[str] = field(default_factory=list)
    #: The branch's visit to its coordinate in its workflow (``selection_key``).
    visit: int = 0


def tied_ranks(proposals: Sequence[Proposal]) -> dict[str, tuple[int, bool]]:
    """The rank each candidate's selection is learned by (``selection_key``,
    ``calibration_key``), and whether it is tied: its own rank, or, when the predictor gives it
    the same (positive) probability as a better-ranked candidate, that one's; tied when another
    candidate has its probability. The order within a tie is the order
    the candidates were offered in, which says nothing of which one is selected (Routing at
    8/s: a tie at the top in 27% of branches; in two-way ties rank 0 was selected 40 times and
    rank 1 43 times), so learned apart a tie's ranks learn noise: a cold controller filled the
    second of two candidates at 0.5 after a few lucky selections of rank 1 there, or priced
    three candidates at 1/3 out, where top 1 fills the first (issue 37). A predictor whose
    order within equal scores is a ranking gives them unequal probabilities (the gateway's
    ``ObservationEntities`` and ``CorpusTitles``), so they are no tie. The ledger keeps the
    gateway's ranks."""
    best: dict[float, int] = {}
    shared: Counter[float] = Counter()
    for p in proposals:
        if p.probability > 0:
            best[p.probability] = min(best.get(p.probability, p.rank), p.rank)
            shared[p.probability] += 1
    return {p.candidate: (best[p.probability], shared[p.probability] > 1) if p.probability > 0
            else (p.rank, False) for p in proposals}


class PricedController:
    """Action 0 and Action 1 at live load, learning from delayed feedback."""

    name = "priced"

    def __init__(self, tracker: LoadTracker, curves: PriceCurves | None = None,
                 settings: ControllerSettings | None = None) -> None:
        self.settings = s = settings or ControllerSettings()
        self.tracker = tracker
        self.curves = curves or PriceCurves()
        self.gate = GenerationGate(n0=s.n0, audit_rate=s.audit_rate, prior=s.class_prior_ms,
                                   seed=s.seed)
        self.rng = random.Random(s.seed + 1)
        self.stats: OrderedDict[str, ClassStats] = OrderedDict()
        self.branches: OrderedDict[str, _Branch] = OrderedDict()
        #: Branches with a provisional report, waiting for their final one (bounded).
        self.settled: OrderedDict[str, _Branch] = OrderedDict()
        self.snapshots: deque[Snapshot] = deque(maxlen=s.max_snapshots or None)
        self.ledger = Ledger()

    @property
    def gate_counts(self) -> dict[str, int]:
        """Action 0 answers so far: opened (cold trials, priced, audits) and refused."""
        refused = self.ledger.gate["refused"]
        return {"opened": sum(self.ledger.gate.values()) - refused, "refused": refused}

    # -- helpers ---------------------------------------------------------------------------------

    def _stats(self, branch_class: str) -> ClassStats:
        st = self.stats.get(branch_class)
        if st is None:
            st = self.stats[branch_class] = ClassStats()
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

    def selection_estimate(self, st: ClassStats, rank: int, probability: float,
                           visit: int = 0, tied: bool = False) -> float:
        """π̃_sel: the ``selection_quantile`` (None: the mean) of the Beta posterior of the
        candidate's ``selection_key``, whose prior is the predictor's probability, calibrated
        for its rank (``calibrated``), as ``prior_weight`` pseudo-counts (no uniform floor)."""
        beta = st.selection.get(selection_key(rank, probability, visit, tied), Beta())
        w = self.settings.prior_weight
        p = min(max(self.calibrated(st, rank, probability, visit, tied), 1e-3), 1.0 - 1e-3)
        a = w * p + beta.success
        b = w * (1.0 - p) + beta.failure
        q = self.settings.selection_quantile
        return a / (a + b) if q is None else float(betaincinv(a, b, q))

    def calibrated(self, st: ClassStats, rank: int, probability: float,
                   visit: int = 0, tied: bool = False) -> float:
        """The predictor's probability scaled by how often its rank's candidates were selected
        at this visit (``calibration_key``) against what it predicted for them (shrunk towards 1
        by ``calibration_weight`` pseudo-counts): the prior of each probability bin's posterior.
        A predictor whose runners-up are chosen half as often as it says gets half the prior
        there, at once, rather than after each bin has seen enough branches of its own.

        The calibration leaves out the bin's own observations (``SelectionCalibration.without``):
        they are already the posterior's counts, and counted in its prior as well they counted
        twice. A rank whose candidates mostly fall in one bin (HCI's menus: three options at
        0.2-0.5) then had every failure lower the prior's mean and add to the failures beside
        it, and a few unselected branches priced a candidate at a tenth of its selection rate
        (issue 37: a cold controller left 8 candidates out on idle engines; rank 2 priced at
        0.45x its useful rate)."""
        if probability <= 0:
            return probability
        cal = st.calibration.get(calibration_key(rank, visit, tied))
        if cal is None:
            return probability
        w = self.settings.calibration_weight
        selected, predicted = cal.without(selection_key(rank, probability, visit, tied))
        return probability * (selected + w) / (predicted + w)

    def usability_mean(self, st: ClassStats) -> float:
        """π̄_use: the posterior mean of timely use given selection."""
        a0, b0 = self.settings.usability_prior
        a, b = a0 + st.usability.success, b0 + st.usability.failure
        return a / (a + b) if a + b > 0 else 0.5

    def _gain_ms(self, st: ClassStats, proposal: Proposal) -> float:
        """Ĝ: the gateway's projection corrected by the class's realised/projected ratio (its
        mean shrunk towards 1 by ``gain_prior_weight`` pseudo-observations), else the class's
        realised mean, else the prior."""
        key = proposal.pricing_class
        if proposal.est_gain_s > 0:
            ratio = st.gain_ratio.get(key, Mean())
            w = self.settings.gain_prior_weight  # the projection taken at its word, w times
            shrunk = (ratio.total + w) / (ratio.n + w) if ratio.n + w > 0 else 1.0
            return proposal.est_gain_s * 1000.0 * shrunk
        learned = st.gain_ms.get(key, Mean()).mean
        return learned if learned is not None else self.settings.default_gain_ms

    def _pending_credit_ms(self, st: ClassStats, b: _Branch, outcome: BranchOutcome) -> float:
        """What a provisional report credits a branch whose selected candidate was admitted
        but not yet consumed: its expected gain (usability mean × gain). The final report
        replaces this with the measured return."""
        if outcome.final or outcome.selected not in b.admitted:
            return 0.0
        proposal = next((p for p in b.proposals if p.candidate == outcome.selected), None)
        gain = (self._gain_ms(st, proposal) if proposal is not None
                else self.settings.default_gain_ms)
        return self.usability_mean(st) * gain

    def _footprint(self, st: ClassStats, p: Proposal, view: LoadSnapshot) -> Footprint:
        learned = st.cost_s.get(p.pricing_class, Mean()).mean
        slot_s = p.est_exec_s if p.est_exec_s > 0 else (
            learned if learned is not None else self.settings.default_exec_s)
        blocks = (math.ceil(p.peak_tokens / max(view.block_size, 1)) if p.peak_tokens > 0
                  else self.settings.fill_kv_blocks)
        return Footprint(slot_s, blocks, p.prompt_tokens)

    def view(self, model: str, now: float) -> LoadSnapshot:
        """V_H for a model now."""
        return self.tracker.snapshot(model, now)

    # -- Action 0 -------------------------------------------------------------------------------

    def open_branch(self, branch_id: str, coordinate: str, branch_class: str, model: str,
                    now: float) -> GateDecision:
        """The generation gate for one branch (registered as a trial when it opens)."""
        cls = branch_class or coordinate
        v = self.view(model, now)
        self._stats(cls)
        x = context(v.canonical, v.pressure * v.slots_per_engine,
                    max(v.pressure - 1.0, 0.0) * v.slots_per_engine)
        decision = self.gate.decide(cls, branch_id, x)
        if decision.kind != "known":
            self.ledger.opened(branch_id, cls, decision.kind, self.gate.classes[cls].n, now)
        if decision.open:
            self._branch(branch_id, coordinate, cls, model).bounded = decision.bounded
        return decision

    # -- Action 1 -------------------------------------------------------------------------------

    def admit(self, branch_id: str, coordinate: str, proposals: Sequence[Proposal], model: str,
              now: float, branch_class: str = "", window_s: float = 0.0,
              visit: int = 0) -> Admission:
        """The fill gate at projected load; admitted fills are reserved until settled.

        ``window_s`` (engine seconds): > 0 caps each gain at the overlap the window leaves
        (Lemma A.6); < 0: the window has closed and nothing is admitted; 0: unknown, no cap.
        ``visit``: the branch's visit to its coordinate in its workflow (``selection_key``).
        """
        if window_s < 0:
            return Admission((), 0.0, "priced: the resolution window has closed")
        b = self.branches.get(branch_id)
        if b is None:  # admitted without Action 0 (e.g. a user-offered branch)
            b = self._branch(branch_id, coordinate, branch_class or coordinate, model)
        b.proposals = list(proposals)
        b.visit = visit
        st = self._stats(b.branch_class)
        v = self.view(model, now)
        pricing = LoadPricing(self.curves)
        use = self.usability_mean(st)
        cap = window_s * 1000.0 if window_s > 0 else math.inf
        tied = tied_ranks(proposals)
        sel = {p.candidate: self.selection_estimate(st, tied[p.candidate][0], p.probability,
                                                    visit, tied[p.candidate][1])
               for p in proposals}
        candidates = [FillCandidate(p.candidate, min(sel[p.candidate] * use, 1),
                                    min(self._gain_ms(st, p), cap), self._footprint(st, p, v))
                      for p in proposals if p.candidate not in b.admitted]
        decision: FillDecision[LoadSnapshot] = admit(
            candidates, v, pricing, audit_rate=self.settings.audit_rate, rng=self.rng)
        chosen = decision.admitted
        if b.bounded:  # a cold branch beyond the trials in flight: bounded fan-out
            chosen = chosen[: self.settings.cold_fanout]
        self.ledger.refused("infeasible", len(decision.infeasible))
        self.ledger.refused("priced_out", len(decision.refused) - len(decision.infeasible))
        self.ledger.refused("cold_bounded", len(decision.admitted) - len(chosen))
        if self.settings.max_snapshots and candidates and not any(a.audit for a in chosen):
            self.snapshots.append(Snapshot(tuple(candidates), v, pricing,
                                           tuple(a.name for a in chosen),
                                           sum(a.utility_ms for a in chosen)))
        names = tuple(a.name for a in chosen)
        ranks = {p.candidate: p.rank for p in proposals}
        by_name = {c.name: c for c in candidates}
        costs = {c.name: pricing.cost_ms(c, v) for c in candidates}  # C_s at the view it saw
        priced = tuple((c.name, Priced(ranks[c.name], c.p, c.gain_ms, costs[c.name],
                                       c.name in names, sel[c.name], use)) for c in candidates)
        for name, entry in priced:
            self.ledger.priced(branch_id, name, entry)
        for name in names:
            token = f"{branch_id}/{name}"
            self.tracker.reserve(model, token, LoadPricing.footprint(by_name[name]).kv_blocks)
            b.tokens.append(token)
            b.admitted[name] = costs[name]
            b.producers[name] = f"fill/{branch_id}/{name}/"  # recorded at admission
        price = self.curves.slot_price(v)
        return Admission(names, price,
                         f"priced: {len(names)} of {len(candidates)} at "
                         f"{v.canonical:.1f} co-resident, slot price {price:.0f} ms/s"
                         + (" (cold, bounded)" if b.bounded else ""), priced)

    # -- feedback ---------------------------------------------------------------------------------

    def report(self, outcome: BranchOutcome) -> bool:
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
            tied = tied_ranks(b.proposals)
            for p in b.proposals:
                rank, shared = tied[p.candidate]
                key = selection_key(rank, p.probability, b.visit, shared)
                beta = st.selection.setdefault(key, Beta())
                chosen = p.candidate == outcome.selected
                if chosen:
                    beta.success += 1
                else:
                    beta.failure += 1
                if p.probability > 0:
                    st.calibration.setdefault(calibration_key(rank, b.visit, shared),
                                              SelectionCalibration()).add(key, float(chosen),
                                                                          p.probability)
            self.settled[outcome.branch_id] = b
            while len(self.settled) > self.settings.max_branches:
                self.settled.popitem(last=False)
        elif outcome.branch_id not in self.settled:
            return False
        b = self.settled[outcome.branch_id]
        st = self._stats(b.branch_class)
        # Credit requires a consumed entry that names the producer recorded at admission.
        prefix = b.producers.get(outcome.selected, "")
        consumed = (bool(prefix) and outcome.saved_s > 0
                    and any(p.startswith(prefix) for p in outcome.consumed))
        self.ledger.settle(outcome.branch_id, outcome.selected, consumed, outcome.final)
        if outcome.final:
            del self.settled[outcome.branch_id]
            self._learn(st, b, outcome, consumed)
        # The selected fill is waste only once the final report says it was not consumed; fills
        # that did no engine work at all (final report, no cost) cost the engines nothing.
        selected_unused = outcome.final and not consumed
        idle = outcome.final and not outcome.fills_worked
        wasted = 0.0 if idle else sum(c for name, c in b.admitted.items()
                                      if name != outcome.selected or selected_unused)
        target = (outcome.saved_s * 1000.0 if consumed else self._pending_credit_ms(
            st, b, outcome)) - (outcome.setup_s + outcome.wait_s) * 1000.0 - wasted
        self.gate.settle(b.branch_class, outcome.branch_id, target)
        return True

    def _learn(self, st: ClassStats, b: _Branch, outcome: BranchOutcome, consumed: bool) -> None:
        """Usability, gain and cost from a final report."""
        proposal = next((p for p in b.proposals if p.candidate == outcome.selected), None)
        if outcome.selected in b.admitted:  # timely use of the selected candidate's fill
            if consumed:
                st.usability.success += 1
            else:  # late (still queued when its demand came), or not needed (the library had it)
                st.usability.failure += 1
        if consumed and proposal is not None:
            key = proposal.pricing_class
            st.gain_ms.setdefault(key, Mean()).add(outcome.saved_s * 1000.0)
            if proposal.est_gain_s > 0:
                st.gain_ratio.setdefault(key, Mean()).add(
                    min(outcome.saved_s / proposal.est_gain_s, 4.0))
        if b.admitted and outcome.fills_worked:
            per_fill = outcome.fill_cost_s / len(b.admitted)
            for p in b.proposals:
                if p.candidate in b.admitted:
                    st.cost_s.setdefault(p.pricing_class, Mean()).add(per_fill)

    def account(self) -> dict[str, Any]:
        """The per-branch figures of ``ledger`` (``Ledger.summary``)."""
        return self.ledger.summary()

    def decisions(self) -> list[tuple[float, bool, float | None]]:
        """Action 0's answers in order: (time, opened, mean break-even p*) (``Ledger``)."""
        return self.ledger.timeline()

    # -- learned state across restarts -----------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Everything learned (gate models, posteriors, gains, costs) as plain values."""
        return {"version": STATE_VERSION, "gate": self.gate.state(),
                "classes": class_records(self.stats)}

    def restore(self, state: dict[str, Any]) -> int:
        """Take what ``state`` produced (a restart keeps what was learned); the classes taken.
        A file of another version or shape is an ``InvalidArgument`` naming the part; older
        versions are taken in part (``learned.PARTIAL_VERSIONS``). Restored selection is a
        prior: scaled down to ``restored_selection`` observations per posterior and
        ``restored_calibration`` predicted probability per rank (``learned.discount``)."""
        dropped = dropped_parts(state)
        if "gate" not in dropped:
            self.gate.restore(state.get("gate", {}))
        for name, raw in state.get("classes", {}).items():
            self.stats[name] = read_class(name, raw, dropped)
            discount(self.stats[name], self.settings.restored_selection,
                     self.settings.restored_calibration)
        return len(state.get("classes", {}))


class AdmissionPolicy(Protocol):
    """What the admission servicer asks of any policy (priced or a baseline)."""

    name: str

    def open_branch(self, branch_id: str, coordinate: str, branch_class: str, model: str,
                    now: float) -> GateDecision:
        """Action 0."""
        ...

    def admit(self, branch_id: str, coordinate: str, proposals: Sequence[Proposal], model: str,
              now: float, branch_class: str = "", window_s: float = 0.0,
              visit: int = 0) -> Admission:
        """Action 1."""
        ...

    def report(self, outcome: BranchOutcome) -> bool:
        """Delayed feedback of a settled branch."""
        ...

    def account(self) -> dict[str, Any]:
        """The policy's own account of its decisions (what a run reports beside latency)."""
        ...


def proposal(candidate: str, rank: int, probability: float,
             fields: Mapping[str, float | int]) -> Proposal:
    """A ``Proposal`` from a candidate's estimate fields (proto ``Candidate.est_*``, ``stages``;
    ``client.estimate_fields``)."""
    return Proposal(candidate, rank, min(max(probability, 0.0), 1.0),
                    float(fields.get("est_exec_s", 0.0)), float(fields.get("est_gain_s", 0.0)),
                    int(fields.get("est_prompt_tokens", 0)), int(fields.get("est_peak_tokens", 0)),
                    max(int(fields.get("stages", 1)), 1))


def finite(value: float, name: str) -> float:
    """Refuse NaN and infinities in a report, naming the field."""
    if not math.isfinite(value) or value < 0:
        raise InvalidArgument(name, "must be a finite, non-negative number")
    return value


__all__ = [
    "Admission", "AdmissionPolicy", "BranchOutcome", "ControllerSettings", "PricedController",
    "Proposal", "Snapshot", "finite", "proposal", "tied_ranks",
]
