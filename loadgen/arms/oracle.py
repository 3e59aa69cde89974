"""The oracle bound of a run, from the floor's trace (dynbranch §3.1 Eq. 1, §3.3 Eq. 2).

The bound is what the floor's workflows would save if every exact repeat were reused (C1,
Eq. 1) and every covered branch's selected subgraph were filled from the start of its
resolution window (C2, Eq. 2), computed as the *earliest finish* of every call on a replay of
the floor's trace: each call keeps its floor duration ``T`` and the gap before it (harness
time, a user's think time), and starts as soon as the call before it in its workflow ends.

- **Reuse.** A call whose exact request name (stage, version, model, full prompt, sampling)
  an earlier-started execution already produced — in this run, or in the warm-up that ran on
  the same mesh (``prior``) — is free once that execution has ended. A repeat that arrives
  while the execution is still running can take only what a join takes: it ends when that
  execution ends, so it saves at most the part already done (``T`` less the remaining time),
  never all of ``T``.
- **Overlap.** A branch is a call without a candidate (the decider) followed by calls that carry
  one (the selected subgraph). When the selection is in the decider's offered list (an
  open-vocabulary decider, e.g. ReAct's entity, counts as covered: the oracle predictor's case),
  a fill runs the subgraph's calls back to back from the start of the window: the decider's
  start for a model-decided branch (its decode), its end for a user-wait branch (``window:
  user``, HCI: fills render the offer's text). Each demand of the subgraph ends at the sooner of
  its fill step and its own way (run, or reuse as above); a fill step reuses like any call. On
  one branch this hides ``min(T_gen, T_exec)`` (Eq. 2), ``T_exec`` less what reuse already saves.

The replay is one pass over the run's calls in time order (a heap), so a result made earlier by
a fill or by a faster workflow is available earlier to every later call: C2 moving a C1 hit
earlier is inside the bound. The bound is ``Σ (T − T')`` over the calls the reported latency
counts (with post-click latency, HCI, only post-click calls), ``T'`` each call's replayed
duration, split into the part reuse alone gives (``reuse_s``) and what fills add
(``overlap_s``). Every end in the replay is monotone in its call's start and in the ends it
waits on, so starting everything as early as the rules allow gives the earliest end: no arm
whose calls each take at least their floor time, with the floor's gaps between them, can finish
a workflow sooner, and its ``oracle_share`` (saving against the floor over the bound) is at
most 1. What the bound leaves out is the load dividend: an arm that removes work can make its
remaining calls faster than the floor's (less contention on the engines); at the loads the
bench runs this stays inside the slack (``tests/loadgen/test_oracle_share.py``).

A bound is computed over one run's workflows, on one mesh and one clock (``CallRecord.start_s``):
a run of several seeds puts each seed on a fresh mesh (no library carries over), so its bound is
the sum of the per-seed bounds (``summed``), never one bound over the merged calls, where a call
repeated in another seed would count as a hit no arm can take.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from loadgen.arms.recording import CallRecord


@dataclass(frozen=True, slots=True)
class OracleBound:
    """The bound and its two terms, in simulated seconds summed over the run's workflows."""

    reuse_s: float
    overlap_s: float
    #: Counted calls reuse makes free (their original had ended, or came from the warm-up).
    hits: int
    branches: int
    covered: int
    #: Counted calls that arrived while their original still ran: a join took part of them.
    joins: int = 0

    @property
    def total_s(self) -> float:
        """Reuse plus overlap."""
        return self.reuse_s + self.overlap_s

    def as_json(self) -> dict[str, float | int]:
        """Rounded figures for ``--json``."""
        return {"bound_s": round(self.total_s, 3), "reuse_s": round(self.reuse_s, 3),
                "overlap_s": round(self.overlap_s, 3), "hits": self.hits, "joins": self.joins,
                "branches": self.branches, "covered": self.covered}


@dataclass(frozen=True, slots=True)
class _CoveredBranch:
    """A covered branch: where its fill starts and the subgraph calls it runs, in order."""

    decider: int
    subgraph: tuple[int, ...]
    user_window: bool


def _branches(calls: Sequence[CallRecord]) -> tuple[list[_CoveredBranch], int]:
    """The covered branches of one workflow, and how many branches it has in all."""
    found, total = [], 0
    for i, decider in enumerate(calls):
        if decider.candidate or i + 1 >= len(calls) or not calls[i + 1].candidate:
            continue
        total += 1
        selection = calls[i + 1].candidate
        j = i + 1
        while j < len(calls) and calls[j].candidate == selection:
            j += 1
        if not decider.offered or selection in decider.offered:
            found.append(_CoveredBranch(i, tuple(range(i + 1, j)), decider.user_window))
    return found, total


def _gaps(calls: Sequence[CallRecord]) -> list[float]:
    """The floor's time between each call's end and the next call's start (0 before the first;
    never negative)."""
    return [0.0] + [max(0.0, b.start_s - (a.start_s + a.latency_s))
                    for a, b in zip(calls, calls[1:], strict=False)]


@dataclass(slots=True)
class _Totals:
    reuse_s: float = 0.0
    overlap_s: float = 0.0
    hits: int = 0
    joins: int = 0


#: Event kinds in the replay's heap: at equal times a fill step goes before a demand, so a
#: demand arriving as its fill step starts finds it.
_FILL, _CALL = 0, 1


@dataclass(slots=True)
class _Replay:
    """The earliest-finish replay of one run (module docstring)."""

    workflows: Sequence[Sequence[CallRecord]]
    prior: Collection[str]
    post_click_only: bool
    #: Per request name, the ends of the executions started so far, each with its (workflow,
    #: call): a demand reuses any but its own fill (which the overlap term counts).
    ready: dict[str, list[tuple[float, tuple[int, int]]]] = field(default_factory=dict)
    #: (workflow, call) of a subgraph call → its branch's next call index (None: last).
    fill_next: dict[tuple[int, int], int | None] = field(default_factory=dict)
    #: (workflow, call) → when its fill step is due, and when it ended once run.
    fill_due: dict[tuple[int, int], float] = field(default_factory=dict)
    fill_end: dict[tuple[int, int], float] = field(default_factory=dict)
    window_of: dict[tuple[int, int], _CoveredBranch] = field(default_factory=dict)
    heap: list[tuple[float, int, int, int, int]] = field(default_factory=list)
    gaps: list[list[float]] = field(default_factory=list)
    totals: _Totals = field(default_factory=_Totals)
    branches: int = 0
    covered: int = 0
    _seq: int = 0

    def run(self) -> OracleBound:
        """Replay every call in time order; the bound."""
        for w, calls in enumerate(self.workflows):
            self.gaps.append(_gaps(calls))
            found, total = _branches(calls)
            self.branches += total
            self.covered += len(found)
            for branch in found:
                self.window_of[(w, branch.decider)] = branch
                steps = branch.subgraph
                for a, b in zip(steps, (*steps[1:], None), strict=True):
                    self.fill_next[(w, a)] = b
            if calls:
                self._push(calls[0].start_s, _CALL, w, 0)
        while self.heap:
            t, kind, _, w, k = heapq.heappop(self.heap)
            if kind == _FILL:
                self._fill_step(t, w, k)
            else:
                self._demand(t, w, k)
        s = self.totals
        return OracleBound(s.reuse_s, s.overlap_s, s.hits, self.branches, self.covered, s.joins)

    def _push(self, t: float, kind: int, w: int, k: int) -> None:
        self._seq += 1
        heapq.heappush(self.heap, (t, kind, self._seq, w, k))

    def _reused_end(self, name: str, t: float, duration: float, key: tuple[int, int]) -> float:
        """When call ``key`` of ``name``, started at ``t``, ends without its own fill: at once
        if another execution already ended, at that one's end if sooner than running (a
        join), else when it has run."""
        if name in self.prior:
            return t
        done = min((end for end, by in self.ready.get(name, ()) if by != key), default=math.inf)
        return min(t + duration, max(t, done))

    def _executed(self, name: str, end: float, key: tuple[int, int]) -> None:
        self.ready.setdefault(name, []).append((end, key))

    def _schedule_fill(self, t: float, w: int, k: int) -> None:
        """Fill step ``k`` may start at ``t`` (its input is known then), unless it is due sooner
        or has run."""
        if (w, k) in self.fill_end or self.fill_due.get((w, k), math.inf) <= t:
            return
        self.fill_due[(w, k)] = t
        self._push(t, _FILL, w, k)

    def _fill_step(self, t: float, w: int, k: int) -> None:
        if (w, k) in self.fill_end or self.fill_due.get((w, k)) != t:
            return  # ran already, or superseded by a sooner start
        call = self.workflows[w][k]
        end = self._reused_end(call.name, t, call.latency_s, (w, k))
        self.fill_end[(w, k)] = end
        self._executed(call.name, end, (w, k))
        following = self.fill_next[(w, k)]
        if following is not None:
            self._schedule_fill(end, w, following)

    def _demand(self, t: float, w: int, k: int) -> None:
        calls = self.workflows[w]
        call = calls[k]
        own = self._reused_end(call.name, t, call.latency_s, (w, k))
        self._executed(call.name, own, (w, k))
        filled = self.fill_end.get((w, k))
        end = own if filled is None else min(own, max(t, filled))
        following = self.fill_next.get((w, k))
        if following is not None:  # the fill goes on from whichever ended first
            self._schedule_fill(min(end, filled if filled is not None else math.inf), w,
                                following)
        branch = self.window_of.get((w, k))
        if branch is not None:
            self._schedule_fill(end if branch.user_window else t, w, branch.subgraph[0])
        if call.post_click or not self.post_click_only:
            self._count(call.latency_s, own - t, end - t)
        if k + 1 < len(calls):
            self._push(end + self.gaps[w][k + 1], _CALL, w, k + 1)

    def _count(self, floor_s: float, reused_s: float, replayed_s: float) -> None:
        s = self.totals
        s.reuse_s += floor_s - reused_s
        s.overlap_s += reused_s - replayed_s
        if reused_s <= 0.0 < floor_s:
            s.hits += 1
        elif reused_s < floor_s:
            s.joins += 1


def oracle_bound(workflows: Sequence[Sequence[CallRecord]], *, post_click_only: bool = False,
                 prior: Collection[str] = frozenset()) -> OracleBound:
    """The bound over one run's ``workflows`` (each one's calls, in order, timed on the run's
    clock); ``prior``: request names the mesh already held when the run began (its warm-up)."""
    return _Replay(workflows, frozenset(prior), post_click_only).run()


def summed(bounds: Iterable[OracleBound]) -> OracleBound:
    """The bound of several independent runs (one per seed, each on its own mesh): their sum."""
    parts = list(bounds)
    return OracleBound(sum(b.reuse_s for b in parts), sum(b.overlap_s for b in parts),
                       sum(b.hits for b in parts), sum(b.branches for b in parts),
                       sum(b.covered for b in parts), sum(b.joins for b in parts))


def oracle_share(saving_s: float, bound: OracleBound) -> float | None:
    """``saving_s / bound`` (None for an empty bound)."""
    return round(saving_s / bound.total_s, 3) if bound.total_s > 0 else None


__all__ = ["OracleBound", "oracle_bound", "oracle_share", "summed"]
