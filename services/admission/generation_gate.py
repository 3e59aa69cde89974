"""The generation gate (Action 0) of load-priced admission (dynbranch §3.4, Eq. 4–5, App. A).

Per branch class c (branches sharing a coordinate) a contextual ridge model keeps
A_c = I + Σ x_b x_bᵀ and q_c = w_0,c + Σ x_b y_b over trained branch returns y_b (Eq. 4: the
gains of consumed fills minus setup, enabled fill cost and waits), and opens a branch when

    U_0(c, x) = xᵀ A_c⁻¹ q_c + σ̂_c sqrt(xᵀ A_c⁻¹ x) > 0                                  (5)

with σ̂_c the observed root-mean-square of the class's targets. The first ``n0`` branches of a
class are cold trials (pending ones count, so a burst cannot overshoot), each registered before
expansion; a seeded audit opens a closed gate now and then so a class can recover. Delayed
feedback revises a trial's target without adding a sample: A_c and the count stay, q_c moves by
x Δy. Protocol-free; the context vector is built by the caller (``context``).
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from services.common.errors import InvalidArgument

#: Context dimension: bias, ρ̄_H, transient (ρ̄_H - ρ_t), recent consumption, backlog, fill load.
DIM = 6


def context(envelope: float, pressure: float, consumption: float, backlog: float,
            fill_occupancy: float) -> np.ndarray:
    """x: what Action 0 conditions on (horizon pressure, whether a low reading is transient,
    recent fill consumption, queue backlog, fill occupancy), with a bias term."""
    return np.array([1.0, envelope, max(envelope - pressure, 0.0), consumption, backlog,
                     fill_occupancy], dtype=float)


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
        if c.n < self.n0:
            if c.n + c.pending >= self.n0:
                return GateDecision(False, f"cold trials in flight ({c.pending})")
            self._begin(c, branch_id, x)
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


__all__ = ["DIM", "BranchClass", "GateDecision", "GenerationGate", "Trial", "context"]
