"""The fill gate (Action 1) of load-priced admission and its exact oracle (dynbranch §3.4,
Equations 6–7, Algorithm 1 lines 8–19, Proposition A.8, Appendix B).

For candidate s at projected load V, the utility of filling it is

    U_s(V) = p_s * G_s - (1 - p_s) * C_s(V)          (milliseconds of canonical delay)

with p_s the optimistic probability that the fill is used, G_s the execution its consumption
saves and C_s(V) the delay it imposes on canonical work when it is not used, priced at V.
``admit`` is the implemented sequential rule: admit the highest-utility candidate that passes
hard feasibility and atomic reservation, project the load it adds, re-price the rest, and stop
when no remaining utility is positive (a seeded audit may admit one refused candidate to keep
learning). ``oracle`` is the exact ordered-subset dynamic program of Appendix B: the largest
total utility any feasible admission order reaches, O(K 2^K) time; it scores recorded snapshots
against the implemented rule.

Prices and load projection are parameters (``Pricing``): this module is the decision, not the
price curves, which are fitted from a measured interference curve elsewhere.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

View = TypeVar("View")

#: Largest candidate set the exact oracle accepts (it is exponential in K).
MAX_ORACLE_CANDIDATES = 16


@dataclass(frozen=True, slots=True)
class FillCandidate:
    """One candidate fill as the gate sees it."""

    name: str
    #: Optimistic probability of useful service, in [0, 1] (selection x usability).
    p: float
    #: Execution its consumption saves after a C1 lookup, in milliseconds (>= 0).
    gain_ms: float
    #: Resource footprint, opaque here; priced and projected by ``Pricing``.
    footprint: object = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.p <= 1.0 or math.isnan(self.p):
            raise ValueError(f"candidate {self.name!r}: p must be in [0, 1], got {self.p}")
        if not self.gain_ms >= 0.0:
            raise ValueError(f"candidate {self.name!r}: gain_ms must be >= 0, got {self.gain_ms}")


class Pricing(Protocol[View]):
    """Prices and load projection at a load view; costs must not fall as load is projected."""

    def cost_ms(self, candidate: FillCandidate, view: View) -> float:
        """C_s(V): delay the fill imposes on canonical work when not used (>= 0)."""
        ...

    def feasible(self, candidate: FillCandidate, view: View) -> bool:
        """Hard constraints (fill slots, KV reservation budget) at the projected view."""
        ...

    def project(self, candidate: FillCandidate, view: View) -> View:
        """The view after admitting the candidate (occupancy only grows)."""
        ...


def utility(candidate: FillCandidate, cost_ms: float) -> float:
    """Equation 6: p G - (1 - p) C."""
    return candidate.p * candidate.gain_ms - (1.0 - candidate.p) * cost_ms


def break_even(candidate: FillCandidate, cost_ms: float) -> float | None:
    """Equation 7: the threshold p* = C / (G + C); None when G + C = 0 (undefined 0/0)."""
    total = candidate.gain_ms + cost_ms
    return cost_ms / total if total > 0 else None


@dataclass(frozen=True, slots=True)
class Admitted:
    """One admission: the candidate, its utility and expected waste at admission time."""

    name: str
    utility_ms: float
    #: (1 - p) C at admission: what the trial is charged if the fill is not used.
    expected_waste_ms: float
    audit: bool = False


@dataclass(slots=True)
class FillDecision(Generic[View]):
    """What Action 1 admitted, in order, and the projected view it ends at."""

    admitted: list[Admitted] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    #: The refused that failed hard feasibility or their reservation (the rest were priced out:
    #: no positive utility).
    infeasible: list[str] = field(default_factory=list)
    view: View | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """Admitted candidate names, in admission order."""
        return tuple(a.name for a in self.admitted)

    @property
    def total_utility_ms(self) -> float:
        """Sum of the utilities at admission time (the quantity the oracle maximizes)."""
        return sum(a.utility_ms for a in self.admitted)


def admit(candidates: Sequence[FillCandidate], view: View, pricing: Pricing[View], *,
          reserve: Callable[[FillCandidate], bool] | None = None,
          audit_rate: float = 0.0, rng: random.Random | None = None) -> FillDecision[View]:
    """Algorithm 1, lines 8–19: sequential re-pricing at projected load.

    ``reserve`` makes the atomic reservation (default: always succeeds); a failed one drops the
    candidate. With ``audit_rate`` > 0 and a seeded ``rng``, the first time the best remaining
    utility is not positive the gate admits that candidate anyway with that probability (a probe,
    flagged ``audit``) and then stops.
    """
    if audit_rate and rng is None:
        raise ValueError("audits need a seeded rng")
    remaining = list(candidates)
    if len({c.name for c in remaining}) != len(remaining):
        raise ValueError("candidate names must be distinct")
    decision: FillDecision[View] = FillDecision(view=view)
    current = view
    while remaining:
        scored = [(utility(c, pricing.cost_ms(c, current)), i) for i, c in enumerate(remaining)]
        best_u, best_i = max(scored, key=lambda ui: (ui[0], -ui[1]))
        chosen = remaining.pop(best_i)
        probe = False
        if best_u <= 0.0:
            if not (audit_rate and rng is not None and rng.random() < audit_rate):
                decision.refused += [chosen.name, *(c.name for c in remaining)]
                break
            probe = True
        if pricing.feasible(chosen, current) and (reserve is None or reserve(chosen)):
            cost = pricing.cost_ms(chosen, current)
            decision.admitted.append(Admitted(chosen.name, best_u, (1.0 - chosen.p) * cost,
                                              audit=probe))
            current = pricing.project(chosen, current)
        else:
            decision.refused.append(chosen.name)
            decision.infeasible.append(chosen.name)
        if probe:
            decision.refused += [c.name for c in remaining]
            break
    decision.view = current
    return decision


@dataclass(frozen=True, slots=True)
class OracleResult:
    """The best ordered subset: its total utility and one order that reaches it."""

    utility_ms: float
    order: tuple[str, ...]

    @property
    def names(self) -> frozenset[str]:
        """The oracle's admitted set."""
        return frozenset(self.order)


def oracle(candidates: Sequence[FillCandidate], view: View,
           pricing: Pricing[View]) -> OracleResult:
    """Exact ordered-subset DP (Appendix B): the largest total admission-time utility over every
    feasible admission order of every subset, each step priced at the load the earlier
    admissions projected. The empty set (utility 0) is always feasible.

    The projected view of a subset may depend on the order it was admitted in only through
    ``pricing``; the DP keys states by subset, so ``project`` must commute (occupancy adds up).
    """
    k = len(candidates)
    if k > MAX_ORACLE_CANDIDATES:
        raise ValueError(f"the exact oracle takes at most {MAX_ORACLE_CANDIDATES} candidates")
    best: dict[int, tuple[float, tuple[int, ...], View]] = {0: (0.0, (), view)}
    for size in range(k):
        layer = [(m, v) for m, v in best.items() if m.bit_count() == size]
        for mask, (value, order, state) in layer:
            for i in range(k):
                bit = 1 << i
                if mask & bit or not pricing.feasible(candidates[i], state):
                    continue
                gained = value + utility(candidates[i], pricing.cost_ms(candidates[i], state))
                nxt = mask | bit
                if nxt not in best or gained > best[nxt][0]:
                    best[nxt] = (gained, (*order, i), pricing.project(candidates[i], state))
    value, order, _ = max(best.values(), key=lambda entry: (entry[0], -len(entry[1])))
    return OracleResult(value, tuple(candidates[i].name for i in order))


__all__ = [
    "MAX_ORACLE_CANDIDATES", "Admitted", "FillCandidate", "FillDecision", "OracleResult",
    "Pricing", "admit", "break_even", "oracle", "utility",
]
