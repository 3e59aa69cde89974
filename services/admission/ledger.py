"""The priced controller's account of its own decisions, branch by branch: what Action 0 decided
and why, what Action 1 was offered and admitted, the price C beside the gain G of every
candidate, and what the branch realised (the selected candidate, whether its fill was used). A
run reads ``summary`` to judge the controller against outcomes: opened and refused (by reason),
admitted per opened branch, C against G, and p̃ against the event it estimates, by rank.

p̃_s = π̃_sel x π̄_use (dynbranch §3.4, Action 1) is the probability that a fill is *useful*: its
candidate is selected and the fill is used in time (consumed, saving time). Per rank the summary
sets each estimate beside its own realised rate, on the candidates where that event is observed:

- ``p_tilde`` against ``useful`` (selected and consumed): admitted candidates of branches with a
  final report (a fill never admitted has no use to observe);
- its factors, so a reader sees which one is off: ``pi_sel`` against ``selected`` over every
  offered candidate of a settled branch, and ``pi_use`` against ``used`` over admitted candidates
  that were selected (finally reported).

It does so over every settled branch, once a class has ``warm`` settled branches (the factor-2
check), and once it has ``WARM_STRICT`` (the factor-1.25 check of ranks 0–2: of the point
estimate, ``within``, and against the realised rate's 95% interval, ``consistent``, since a
rank selected a few times in a run gives a rate that varies by more than 1.25x by chance).
Candidates Action 1 did not admit are counted by why (``not_admitted``: priced out, infeasible,
or beyond a cold branch's bounded fan-out), and ``timeline`` gives each branch's time, verdict
and break-even p* = C / (G + C) averaged over its candidates (the paper's Fig. 15a). Bounded
(the oldest branches are forgotten).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

#: Settled branches a class needs before its p̃ is held to the strict check (factor 1.25 on
#: ranks 0–2), and the ranks that check covers.
WARM_STRICT = 48
STRICT_RANKS = (0, 1, 2)


@dataclass(frozen=True, slots=True)
class Priced:
    """One candidate as Action 1 priced it: p̃ and, when the pricer gives them, its factors
    π̃_sel and π̄_use (None: a pricer without them)."""

    rank: int
    p: float
    gain_ms: float
    cost_ms: float
    admitted: bool
    p_sel: float | None = None
    p_use: float | None = None

    @property
    def break_even(self) -> float | None:
        """p* = C / (G + C) (Eq. 7); None when G + C = 0."""
        total = self.gain_ms + self.cost_ms
        return self.cost_ms / total if total > 0 else None


@dataclass(slots=True)
class Entry:
    """One branch: Action 0's verdict, Action 1's candidates, and the realised outcome."""

    branch_class: str
    gate: str
    #: The class's settled-branch count when the branch opened (p̃ is judged once warm).
    settled_before: int = 0
    #: When Action 0 answered (the controller's clock).
    at_s: float = 0.0
    candidates: dict[str, Priced] = field(default_factory=dict)
    #: Name of the selected candidate (None: not settled yet; may name no candidate priced).
    selected: str | None = None
    #: The selected candidate's fill was consumed; known once ``final``.
    consumed: bool = False
    final: bool = False

    def useful(self, name: str) -> bool:
        """The candidate was selected and its fill consumed (the event p̃ estimates)."""
        return self.final and self.consumed and self.selected == name

    def break_even(self) -> float | None:
        """Mean over its priced candidates of p* = C / (G + C) (None: none priced)."""
        even = [p for c in self.candidates.values() if (p := c.break_even) is not None]
        return round(statistics.fmean(even), 4) if even else None


class Ledger:
    """Branch entries, bounded, and the counters that outlive them."""

    def __init__(self, max_entries: int = 100_000, warm: int = 24,
                 warm_strict: int = WARM_STRICT) -> None:
        self.entries: OrderedDict[str, Entry] = OrderedDict()
        self.max_entries, self.warm, self.warm_strict = max_entries, warm, warm_strict
        self.gate = Counter[str]()
        #: Candidates Action 1 priced but did not admit, by why.
        self.not_admitted = Counter[str]()

    def opened(self, branch_id: str, branch_class: str, kind: str, settled_before: int,
               at_s: float = 0.0) -> None:
        """Action 0 answered ``kind`` (``GateDecision.kind``) for a branch at ``at_s``;
        ``settled_before``: the class's settled branches so far as the controller counts them
        (restored state included)."""
        self.gate[kind] += 1
        self.entries[branch_id] = Entry(branch_class, kind, settled_before, at_s)
        while len(self.entries) > self.max_entries:
            self.entries.popitem(last=False)

    def priced(self, branch_id: str, name: str, candidate: Priced) -> None:
        """Action 1 priced (and maybe admitted) a candidate."""
        entry = self.entries.get(branch_id)
        if entry is not None:
            entry.candidates[name] = candidate

    def refused(self, cause: str, count: int = 1) -> None:
        """Action 1 left ``count`` candidates out for ``cause``."""
        if count > 0:
            self.not_admitted[cause] += count

    def timeline(self) -> list[tuple[float, bool, float | None]]:
        """Per branch Action 0 answered, in order: (time, opened, mean break-even p*)."""
        return [(e.at_s, e.gate != "refused", e.break_even()) for e in self.entries.values()]

    def settle(self, branch_id: str, selected: str, consumed: bool, final: bool = True) -> None:
        """The branch's selection is known; on the ``final`` report, its consumption too."""
        entry = self.entries.get(branch_id)
        if entry is None:
            return
        entry.selected = selected
        entry.consumed = entry.consumed or consumed
        entry.final = entry.final or final

    def summary(self) -> dict[str, object]:
        """The per-branch figures (see the module docstring)."""
        opened = [e for e in self.entries.values() if e.gate != "refused"]
        priced = [c for e in opened for c in e.candidates.values()]
        admitted = [c for c in priced if c.admitted]
        costs = [c.cost_ms for c in priced]
        gains = [c.gain_ms for c in priced]
        even = [p for c in priced if (p := c.break_even) is not None]
        settled = [e for e in opened if e.selected is not None and e.candidates]
        warm = by_rank([e for e in settled if e.settled_before >= self.warm])
        strict = by_rank([e for e in settled if e.settled_before >= self.warm_strict])

        def median(xs: list[float]) -> float | None:
            return round(statistics.median(xs), 2) if xs else None

        return {"branches": len(self.entries), "gate": dict(sorted(self.gate.items())),
                "not_admitted": dict(sorted(self.not_admitted.items())),
                "opened": len(opened), "offered": len(priced), "admitted": len(admitted),
                "admitted_per_opened": round(len(admitted) / len(opened), 3) if opened else None,
                "consumed": sum(e.consumed for e in opened),
                "cost_ms_median": median(costs), "gain_ms_median": median(gains),
                "break_even_median": round(statistics.median(even), 4) if even else None,
                "warm": self.warm, "warm_strict": self.warm_strict,
                "p_tilde_by_rank": by_rank(settled), "p_tilde_by_rank_warm": warm,
                "p_tilde_within_2x_warm": within(warm, 2.0),
                "p_tilde_by_rank_warm_strict": strict,
                "p_tilde_within_1_25x_warm_strict": within(strict, 1.25, STRICT_RANKS),
                "p_tilde_consistent_1_25x_warm_strict": consistent(strict, 1.25, STRICT_RANKS)}


def within(table: dict[str, dict[str, float | None]], factor: float,
           ranks: Iterable[int] | None = None) -> bool | None:
    """Whether p̃ is within ``factor`` of the realised useful rate for every rank (of ``ranks``,
    when given) with an admitted candidate; a rank never useful in n admissions counts as
    realised 1/n at most. None when no rank has one."""
    keep = None if ranks is None else {str(r) for r in ranks}
    rows = [r for k, r in table.items() if r["admitted"] and (keep is None or k in keep)]
    if not rows:
        return None

    def ok(r: dict[str, float | None]) -> bool:
        p, useful, n = r["p_tilde"] or 0.0, r["useful"] or 0.0, r["admitted"] or 1.0
        if useful > 0:
            return useful / factor <= p <= factor * useful
        return p <= factor / n
    return all(ok(r) for r in rows)


def consistent(table: dict[str, dict[str, float | None]], factor: float,
               ranks: Iterable[int] | None = None) -> bool | None:
    """Whether, for every rank (of ``ranks``) with an admitted candidate, p̃ within ``factor``
    is consistent with the realised useful rate: [p̃ / factor, factor x p̃] meets the rate's
    95% Wilson interval (``useful_ci95``). ``within`` asks it of the point estimate, which a
    rare event cannot answer: a rank-2 candidate useful 1 time in 14, admitted 50 times, is
    useful 3 or 5 times as often as 4 by chance alone, and either is outside 1.25x of 4/50.
    None when no rank has one."""
    keep = None if ranks is None else {str(r) for r in ranks}
    rows = [r for k, r in table.items() if r["admitted"] and (keep is None or k in keep)]
    if not rows:
        return None

    def ok(r: dict[str, float | None]) -> bool:
        n = int(r["admitted"] or 0)
        lo, hi = wilson(round((r["useful"] or 0.0) * n), n)
        p = r["p_tilde"] or 0.0
        return max(lo, p / factor) <= min(hi, p * factor)
    return all(ok(r) for r in rows)


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a rate of ``k`` in ``n`` (95% at the default ``z``)."""
    if n <= 0:
        return 0.0, 1.0
    rate, z2 = k / n, z * z
    centre = (rate + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(rate * (1 - rate) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def by_rank(entries: list[Entry]) -> dict[str, dict[str, float | None]]:
    """Per rank (see the module docstring): p̃ against the useful rate over admitted candidates
    of finally reported branches, π̃_sel against the selection rate over offered candidates,
    π̄_use against the use rate over admitted, selected ones. Counts beside each."""
    pairs = [(e, name, c) for e in entries for name, c in e.candidates.items()]
    out: dict[str, dict[str, float | None]] = {}
    for rank in sorted({c.rank for _, _, c in pairs}):
        offered = [(e, n, c) for e, n, c in pairs if c.rank == rank]
        admitted = [(e, n, c) for e, n, c in offered if c.admitted and e.final]
        chosen = [(e, n, c) for e, n, c in admitted if e.selected == n]
        out[str(rank)] = {
            "admitted": len(admitted), "p_tilde": _mean(c.p for _, _, c in admitted),
            "useful": _rate(admitted, lambda e, n: e.useful(n)),
            "offered": len(offered), "pi_sel": _mean(c.p_sel for _, _, c in offered),
            "selected": _rate(offered, lambda e, n: e.selected == n),
            "selected_admitted": len(chosen), "pi_use": _mean(c.p_use for _, _, c in chosen),
            "used": _rate(chosen, lambda e, n: e.useful(n))}
    return out


def _mean(values: Iterable[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return round(statistics.fmean(xs), 4) if xs else None


def _rate(rows: list[tuple[Entry, str, Priced]], event: Callable[[Entry, str], bool]
          ) -> float | None:
    return round(sum(event(e, n) for e, n, _ in rows) / len(rows), 4) if rows else None


__all__ = ["STRICT_RANKS", "WARM_STRICT", "Entry", "Ledger", "Priced", "by_rank", "consistent",
           "within", "wilson"]
