"""The generation gate (Action 0) of load-priced admission (dynbranch §3.4, Eq. 4–5, App. A).

Per branch class c (branches sharing a coordinate) a contextual ridge model keeps
A_c = I + Σ x_b x_bᵀ and q_c = w_0,c + Σ x_b y_b over trained branch returns y_b (Eq. 4: the
gains of consumed fills minus setup, enabled fill cost and waits), and opens a branch when

    U_0(c, x) = xᵀ A_c⁻¹ q_c + σ̂_c sqrt(xᵀ A_c⁻¹ x) > 0                                  (5)

with σ̂_c the observed root-mean-square of the class's targets. The class prior
w_0,c = ``prior`` x e_bias is configurable; an optimistic one (the controller's default) acts as
one pseudo-observation of that return, so a few small negative returns cannot shut a class: it
closes only once the evidence outweighs the prior (about prior / |loss| of them). Until ``n0``
trials of a class have *settled* the class is cold and every branch opens: the first ``n0``
(pending ones count, so a burst cannot overshoot) as full cold trials, the rest with a bounded
fan-out (``GateDecision.bounded``: the fill gate admits at most its cold fan-out), each
registered before expansion. A seeded audit opens a closed gate now and then so a class can
recover. Delayed feedback revises a trial's target without adding a sample: A_c and the count
stay, q_c moves by x Δy. ``state`` / ``restore`` carry the learned models across restarts.
Protocol-free; the context vector is built by the caller (``context``).
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from services.common.values.errors import InvalidArgument

#: Context dimension: bias, horizon load, transient, backlog.
DIM = 4
#: Co-resident requests per engine that make one unit of a load feature (features stay O(1)
#: where the engines run, whatever their slot count).
LOAD_UNIT = 32.0


def context(canonical_h: float, canonical_now: float, waiting: float) -> np.ndarray:
    """x: what Action 0 conditions on, with a bias term: horizon pressure (co-resident canonical
    requests per engine at ρ̄_H), whether a low reading is transient (ρ̄_H above ρ_t), and queue
    backlog (per engine), in units of ``LOAD_UNIT`` requests and capped at 4.

    Only load the gate does not cause. Fills running and recent fill consumption are the gate's
    own doing: a closed gate drives both to what closing shows, so a model that learned a
    positive weight on them (more fills running, higher return) predicts a lower return once it
    closes and stays closed (issue 37: on ReAct a warm gate refused 1,070 of 1,239 branches,
    and 5% audits could not reopen it)."""
    def unit(v: float) -> float:
        return min(max(v, 0.0) / LOAD_UNIT, 4.0)
    return np.array([1.0, unit(canonical_h), unit(canonical_h - canonical_now), unit(waiting)],
                    dtype=float)


@dataclass(slots=True)
class Trial:
    """One opened branch: its context and its (revisable) target once settled."""

    x: np.ndarray
    target: float | None = None


@dataclass(slots=True)
class BranchClass:
    """The ridge model and counters of one branch class."""

    a: np.ndarray
    q: np.ndarray
    n: int = 0
    pending: int = 0
    sum_sq: float = 0.0
    trials: OrderedDict[str, Trial] = field(default_factory=OrderedDict)

    @property
    def sigma(self) -> float:
        """σ̂_c: RMS of the observed targets (0 before any)."""
        return math.sqrt(self.sum_sq / self.n) if self.n else 0.0


@dataclass(frozen=True, slots=True)
class GateDecision:
    """Action 0's answer with its reason and score."""

    open: bool
    reason: str
    score: float = 0.0
    audit: bool = False
    #: A cold branch beyond the class's cold trials in flight: opened with a bounded fan-out.
    bounded: bool = False

    @property
    def kind(self) -> str:
        """What decided: "cold", "cold_bounded", "priced", "audit", "refused" or "known"."""
        if not self.open:
            return "refused"
        if self.audit:
            return "audit"
        if self.bounded:
            return "cold_bounded"
        return "cold" if self.reason.startswith("cold") else (
            "known" if self.reason == "already open" else "priced")


class GenerationGate:
    """Action 0 over branch classes, with cold trials, audits and delayed feedback."""

    def __init__(self, n0: int = 4, audit_rate: float = 0.05, prior: float = 0.0,
                 seed: int = 0, max_classes: int = 4096, max_trials: int = 1024,
                 exploration: float = 1.0) -> None:
        if n0 < 0 or not 0 <= audit_rate <= 1:
            raise InvalidArgument("n0", "n0 must be >= 0 and audit_rate in [0, 1]")
        self.n0, self.audit_rate, self.exploration = n0, audit_rate, exploration
        self.prior = prior  # w_0,c = prior * e_bias: an optimistic or pessimistic class prior
        self.rng = random.Random(seed)
        self.classes: OrderedDict[str, BranchClass] = OrderedDict()
        self.max_classes, self.max_trials = max_classes, max_trials

    def _class(self, name: str) -> BranchClass:
        c = self.classes.get(name)
        if c is None:
            q = np.zeros(DIM)
            q[0] = self.prior
            c = self.classes[name] = BranchClass(np.eye(DIM), q)
            while len(self.classes) > self.max_classes:
                self.classes.popitem(last=False)
        else:
            self.classes.move_to_end(name)
        return c

    def score(self, name: str, x: np.ndarray) -> float:
        """U_0(c, x) of Equation 5."""
        c = self._class(name)
        inv = np.linalg.inv(c.a)
        mean = float(x @ inv @ c.q)
        radius = self.exploration * c.sigma * math.sqrt(max(float(x @ inv @ x), 0.0))
        return mean + radius

    def decide(self, name: str, branch_id: str, x: np.ndarray) -> GateDecision:
        """Open or not; an opened branch is registered as a trial before expansion."""
        if x.shape != (DIM,):
            raise InvalidArgument("context", f"must have {DIM} entries")
        c = self._class(name)
        if branch_id in c.trials:
            return GateDecision(True, "already open")
        if c.n < self.n0:  # cold until n0 trials have settled: explore, bound the fan-out
            bounded = c.n + c.pending >= self.n0
            self._begin(c, branch_id, x)
            if bounded:
                return GateDecision(True, f"cold, fan-out bounded ({c.pending - 1} trials in "
                                          f"flight)", bounded=True)
            return GateDecision(True, f"cold trial {c.n + c.pending}/{self.n0}")
        u0 = self.score(name, x)
        if u0 > 0:
            self._begin(c, branch_id, x)
            return GateDecision(True, f"U0={u0:.1f} ms > 0", u0)
        if self.audit_rate and self.rng.random() < self.audit_rate:
            self._begin(c, branch_id, x)
            return GateDecision(True, f"audit (U0={u0:.1f} ms)", u0, audit=True)
        return GateDecision(False, f"U0={u0:.1f} ms <= 0", u0)

    def _begin(self, c: BranchClass, branch_id: str, x: np.ndarray) -> None:
        c.trials[branch_id] = Trial(x)
        c.pending += 1
        while len(c.trials) > self.max_trials:  # forget the oldest (settled or abandoned)
            _, old = c.trials.popitem(last=False)
            if old.target is None:
                c.pending -= 1

    def settle(self, name: str, branch_id: str, target: float) -> bool:
        """A branch's return y_b (Eq. 4) arrives: the first report adds a sample, a later one
        revises the target (q_c moves by x Δy; A_c and the count stay). False if unknown."""
        c = self.classes.get(name)
        trial = c.trials.get(branch_id) if c is not None else None
        if c is None or trial is None or not math.isfinite(target):
            return False
        if trial.target is None:
            c.a += np.outer(trial.x, trial.x)
            c.q += trial.x * target
            c.n += 1
            c.pending -= 1
            c.sum_sq += target * target
        else:
            c.q += trial.x * (target - trial.target)
            c.sum_sq += target * target - trial.target * trial.target
        trial.target = target
        return True


    # -- learned state across restarts -----------------------------------------------------

    def state(self) -> dict[str, dict[str, object]]:
        """The learned models (A_c, q_c, counts, target sums) as plain values; open trials are
        not kept (their branches end with the process)."""
        return {name: {"a": c.a.tolist(), "q": c.q.tolist(), "n": c.n, "sum_sq": c.sum_sq}
                for name, c in self.classes.items()}

    def restore(self, state: dict[str, dict[str, object]]) -> int:
        """Take models ``state`` produced; returns how many classes (a malformed one is an
        ``InvalidArgument`` naming it)."""
        for name, raw in state.items():
            try:
                a = np.asarray(raw["a"], dtype=float)
                q = np.asarray(raw["q"], dtype=float)
                if a.shape != (DIM, DIM) or q.shape != (DIM,):
                    raise ValueError("wrong shape")
                self.classes[name] = BranchClass(a, q, int(raw["n"]),  # type: ignore[call-overload]
                                                 sum_sq=float(raw["sum_sq"]))  # type: ignore[arg-type]
            except (KeyError, TypeError, ValueError) as exc:
                raise InvalidArgument(f"state.gate.{name}", f"not a gate model: {exc}") from None
        return len(state)


__all__ = ["DIM", "BranchClass", "GateDecision", "GenerationGate", "Trial", "context"]
