"""The priced controller's account of its own decisions, branch by branch: what Action 0 decided
and why, what Action 1 was offered and admitted, the price C beside the gain G of every
candidate, and what the branch realised (the selected rank, whether a fill was consumed). A run
reads ``summary`` to judge the controller against outcomes: opened and refused (by reason),
admitted per opened branch, C against G, and p̃ against the realised selection rate by rank over
every settled branch and once a class has ``warm`` settled branches. Bounded (the oldest branches
are forgotten).
"""

from __future__ import annotations

import statistics
from collections import Counter, OrderedDict
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Priced:
    """One candidate as Action 1 priced it."""

    rank: int
    p: float
    gain_ms: float
    cost_ms: float
    admitted: bool


@dataclass(slots=True)
class Entry:
    """One branch: Action 0's verdict, Action 1's candidates, and the realised outcome."""

    branch_class: str
    gate: str
    #: The class's settled-branch count when the branch opened (p̃ is judged once warm).
    settled_before: int = 0
    candidates: dict[str, Priced] = field(default_factory=dict)
    #: Rank of the selected candidate (-1: none of the predicted; None: not settled yet).
    selected_rank: int | None = None
    consumed: bool = False


class Ledger:
    """Branch entries, bounded, and the counters that outlive them."""

    def __init__(self, max_entries: int = 100_000, warm: int = 24) -> None:
        self.entries: OrderedDict[str, Entry] = OrderedDict()
        self.max_entries, self.warm = max_entries, warm
        self.gate = Counter[str]()

    def opened(self, branch_id: str, branch_class: str, kind: str, settled_before: int) -> None:
        """Action 0 answered ``kind`` (``GateDecision.kind``) for a branch; ``settled_before``:
        the class's settled branches so far as the controller counts them (restored state
        included)."""
        self.gate[kind] += 1
        self.entries[branch_id] = Entry(branch_class, kind, settled_before)
        while len(self.entries) > self.max_entries:
            self.entries.popitem(last=False)

    def priced(self, branch_id: str, name: str, candidate: Priced) -> None:
        """Action 1 priced (and maybe admitted) a candidate."""
        entry = self.entries.get(branch_id)
        if entry is not None:
            entry.candidates[name] = candidate

    def settle(self, branch_id: str, selected: str, consumed: bool) -> None:
        """The branch's selection is known (and, on the final report, its consumption)."""
        entry = self.entries.get(branch_id)
        if entry is None:
            return
        pick = entry.candidates.get(selected)
        entry.selected_rank = pick.rank if pick is not None else -1
        entry.consumed = entry.consumed or consumed

    def summary(self) -> dict[str, object]:
        """The per-branch figures (see the module docstring)."""
        opened = [e for e in self.entries.values() if e.gate != "refused"]
        priced = [c for e in opened for c in e.candidates.values()]
        admitted = [c for c in priced if c.admitted]
        costs = [c.cost_ms for c in priced]
        gains = [c.gain_ms for c in priced]
        even = [c.cost_ms / (c.gain_ms + c.cost_ms) for c in priced if c.gain_ms + c.cost_ms > 0]
        settled = [e for e in opened if e.selected_rank is not None and e.candidates]
        warm_by_rank = _by_rank([e for e in settled if e.settled_before >= self.warm])

        def median(xs: list[float]) -> float | None:
            return round(statistics.median(xs), 2) if xs else None

        return {"branches": len(self.entries), "gate": dict(sorted(self.gate.items())),
                "opened": len(opened), "offered": len(priced), "admitted": len(admitted),
                "admitted_per_opened": round(len(admitted) / len(opened), 3) if opened else None,
                "consumed": sum(e.consumed for e in opened),
                "cost_ms_median": median(costs), "gain_ms_median": median(gains),
                "break_even_median": round(statistics.median(even), 4) if even else None,
                "p_tilde_by_rank": _by_rank(settled), "p_tilde_by_rank_warm": warm_by_rank,
                "p_tilde_within_2x_warm": _within_2x(warm_by_rank)}


def _within_2x(by_rank: dict[str, dict[str, float]]) -> bool | None:
    """Whether p̃ is within a factor 2 of the realised selection rate for every rank (a rank
    never selected in n offers counts as realised 1/n at most); None before any warm entry."""
    if not by_rank:
        return None

    def ok(r: dict[str, float]) -> bool:
        if r["realised"] > 0:
            return r["realised"] / 2 <= r["p_tilde"] <= 2 * r["realised"]
        return r["p_tilde"] <= 2 / r["n"]
    return all(ok(r) for r in by_rank.values())


def _by_rank(entries: list[Entry]) -> dict[str, dict[str, float]]:
    """Per rank: how often it was offered, the mean p̃ it was priced at, and the share of those
    branches that selected it."""
    out: dict[str, dict[str, float]] = {}
    for rank in sorted({c.rank for e in entries for c in e.candidates.values()}):
        offered = [(e, c) for e in entries for c in e.candidates.values() if c.rank == rank]
        realised = sum(e.selected_rank == rank for e, _ in offered) / len(offered)
        out[str(rank)] = {"n": len(offered),
                          "p_tilde": round(statistics.fmean(c.p for _, c in offered), 4),
                          "realised": round(realised, 4)}
    return out


__all__ = ["Entry", "Ledger", "Priced"]
