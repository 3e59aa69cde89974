"""Promotion of fill shadows to answer demands (dynbranch §3.3, DESIGN.md §4), and the account
of every promotion refused.

A demand's exact reuse name is matched against the steps of its workflow's branches that could
still answer it (``Branch.promotable``): steps of live fills (every fill of an open branch; only
the winner's once an exclusive branch is settled: its losers are aborted and their shadows
discarded, so from the pick on they match nothing; every fill of an independent branch) that
are neither promoted already, nor ended without a shadow, nor cut short by an abort. Exactly
one such step is promoted; while it still runs, the demand adopts it (``adoption``: raised to
canonical priority, waited for under the adoption rule, its text streamed to a streamed
demand). A demand matching more than one (of one fill or several branches) promotes none:
ambiguity is a miss, never a guess. Each refusal is counted under its reason
(``promotion_refused_*``). What a match came to is applied at once to its records, through
their own methods: the promoted step is credited to its fill and branch (an adopted fill's wait
is the part of its execution it did not hide: ``Branch.adopted_wait_s``), a fill its demand gave
up on is aborted, and what became of each admitted winner's first step is kept; the
``Promotion`` returned says what each did, and the branch manager counts it
(``winners_promoted`` / ``winners_lost_*``). How long each matched step still ran when its
demand arrived is kept here (``remaining_s``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import OrderedDict, deque
from dataclasses import dataclass

from opentelemetry.trace import Tracer

from services.common.values import clock
from services.common.values.reads import Served
from services.common.values.reuse_name import ReuseName
from services.common.values.tracing import maybe_span
from services.gateway.ports import LibraryPort
from services.gateway.speculation.adoption import CONFIRMED, DEADLINE, RUNS_ANEW, Adopter
from services.gateway.speculation.state import (
    REFUSALS,
    Branch,
    BranchSettings,
    Fill,
    FillStep,
    span_attrs,
)
from services.gateway.values import TextStream, charge_wait

#: The counters of promotions and their winners, and what each counts (the HELP of its
#: ``dynbranch_gateway_branch_<key>`` metric); the refusals' reasons are ``REFUSALS``'s.
#: ``Promotions`` counts adoptions and refusals (``Promotions.counters``); the branch manager,
#: which keeps each branch's outcome, counts the winners.
PROMOTION_COUNTERS: dict[str, str] = {
    "winners_admitted": "Settled branches whose selected candidate had an admitted fill",
    "winners_promoted": "Admitted winners whose first fill step was promoted to answer its "
                        "demand",
    "adoptions": "Demands that adopted a fill step still running (waited for it under the "
                 "adoption rule)",
    "adoptions_served": "Demands that adopted a running fill step and were served by it",
    **{f"promotion_refused_{why}": "Demands that matched a fill step and were not served by "
       f"promoting it, because {text}" for why, text in REFUSALS.items()},
    **{f"winners_lost_{why}": "Admitted winners whose first fill step was not promoted, because "
       f"{text}" for why, text in REFUSALS.items()},
    "winners_lost_unseen": "Admitted winners whose first stage this gateway never saw asked for "
                           "before the branch retired (served on another replica, or not at all)",
}


#: Remaining times kept for the bench (the most recent).
MAX_REMAINING = 100_000
#: Names confirmed on this gateway whose time is kept (the most recent): a demand that arrives
#: after the confirmation, at a fill step that was running then, goes to the library without
#: adopting it.
MAX_CONFIRMED = 4096


@dataclass(frozen=True, slots=True)
class Promotion:
    """What one demand's match came to (``Promotions.serve``): the result that serves it, what
    became of the steps it matched, and what that did to their records."""

    served: Served | None = None
    #: The step whose shadow served the demand, with its fill and branch: credited to them.
    promoted: tuple[Branch, Fill, FillStep] | None = None
    #: How long the demand waited for the adopted step that served it (run's clock).
    waited_s: float = 0.0
    #: A fill whose demand gave up on it and runs anew in its place: aborted.
    abandoned: Fill | None = None
    #: "promoted", or why not (a ``REFUSALS`` key; "" when nothing matched): ``DEADLINE`` fails
    #: the demand.
    why: str = ""
    #: What became of each matched step ("promoted" or a refusal): kept as its branch's outcome
    #: when the step is an admitted winner's first (``Branch.record_outcome``).
    outcomes: tuple[tuple[Branch, Fill, FillStep, str], ...] = ()
    #: The outcomes kept as admitted winners': the manager counts them.
    kept: tuple[str, ...] = ()
    #: The promoted step was its fill's first (the fill is consumed from now on).
    consumed: bool = False
    #: The abandoned fill was still running, and is cancelled now.
    aborted: bool = False


#: Counters ``Promotions`` keeps itself (the others of ``PROMOTION_COUNTERS`` are the manager's).
_OWN_COUNTERS = ("ambiguous", "adoptions", "adoptions_served",
                 *(f"promotion_refused_{why}" for why in REFUSALS))


class Promotions:
    """Matches demands to promotable fill steps and promotes them for the branch manager
    (``adopter`` waits for a step still running); what a match came to is returned
    (``Promotion``), and only this object's own counters are written here."""

    def __init__(self, library: LibraryPort, settings: BranchSettings, tracer: Tracer, *,
                 adopter: Adopter, join_confirmed: bool = True) -> None:
        self.library = library
        self.settings = settings
        self.tracer = tracer
        self.counters = dict.fromkeys(_OWN_COUNTERS, 0)
        self.adopter = adopter
        #: With C1 on, an adopting demand stops waiting once another demand confirms its name
        #: (``confirmed``): the library answers it.
        self.join_confirmed = join_confirmed
        self._adopting: dict[ReuseName, dict[asyncio.Event, None]] = {}  # woken in order
        self._confirmed_at: OrderedDict[ReuseName, float] = OrderedDict()
        #: Per matched step that ended with a shadow: how long it still ran when its demand
        #: arrived (run's clock; 0 when it had already ended): how far fills outlast windows.
        self.remaining_s: deque[float] = deque(maxlen=MAX_REMAINING)

    async def serve(self, branches: list[Branch], name: ReuseName, timeout_s: float,
                    stream: TextStream | None = None) -> Promotion:
        """Promote the one promotable fill step under ``name`` among this workflow's branches,
        adopting it while it runs (why ``DEADLINE`` when the deadline passes meanwhile); it
        applies what that came to to their records at once.

        Only steps that could still answer count (``Branch.promotable``): a settled exclusive
        branch's losers never do, from the pick on. A demand matching promotable steps of more
        than one fill or branch promotes none (a miss, dynbranch §3.3)."""
        p = await self._match(branches, name, timeout_s, stream)
        # its records take it through their own methods, before anything else runs (nothing
        # here awaits): each matched step's outcome is kept, the promoted step credited, the
        # abandoned fill aborted
        kept = tuple(what for branch, fill, step, what in p.outcomes
                     if branch.record_outcome(fill, step, what))
        consumed = (p.promoted is not None and p.served is not None
                    and p.promoted[0].credit(*p.promoted[1:], p.served.cost_s, p.waited_s))
        aborted = p.abandoned is not None and p.abandoned.abort()
        return dataclasses.replace(p, kept=kept, consumed=consumed, aborted=aborted)

    async def _match(self, branches: list[Branch], name: ReuseName, timeout_s: float,
                     stream: TextStream | None) -> Promotion:
        found = [(b, f, s) for b in branches for f, s in b.promotable(name)]
        if len(found) == 1:
            branch, fill, step = found[0]
            promotion = await self._claim(branch, fill, step, name, clock.now() + timeout_s,
                                          stream)
            return dataclasses.replace(promotion,
                                       outcomes=((branch, fill, step, promotion.why),))
        if found:
            self.counters["ambiguous"] += 1
            self._refused("ambiguous")
            return Promotion(why="ambiguous",
                             outcomes=tuple((b, f, s, "ambiguous") for b, f, s in found))
        outcomes = tuple((b, f, s, "confirmed" if s.confirmed else "fill_failed")
                         for b in branches for f, s in b.matches(name) if not s.claimed)
        if not outcomes:  # no promotable step: say why a matching one was not (once)
            return Promotion()
        why = "fill_failed" if any(o[3] == "fill_failed" for o in outcomes) else "confirmed"
        self._refused(why)
        return Promotion(why=why, outcomes=outcomes)

    def _refused(self, why: str) -> None:
        key = f"promotion_refused_{why}"
        self.counters[key] = self.counters.get(key, 0) + 1

    async def _claim(self, branch: Branch, fill: Fill, step: FillStep, name: ReuseName,
                     deadline: float, stream: TextStream | None) -> Promotion:
        """Promote ``step``'s shadow, adopting it while it runs: the served result and
        "promoted", or why not (a ``REFUSALS`` key, counted in ``promotion_refused_*``)."""
        arrival = waited = 0.0
        # a running step the canonical path answers: it waits on an identical canonical
        # execution (the demand joins that itself: single-flight), or identical work ended
        # while it ran (the library answers)
        if not step.done.is_set() and (step.confirmed or self._confirmed_since(step)):
            self._refused(CONFIRMED)
            return Promotion(why=CONFIRMED)
        if not step.done.is_set():
            arrival = clock.now()
            why = await self._adopt(branch, step, deadline, stream)
            waited = clock.now() - arrival
            if why is not None:
                return Promotion(why=why, abandoned=fill if why in RUNS_ANEW else None)
        if not step.ok or step.confirmed:  # a confirmed entry: the canonical path probes it
            why = "confirmed" if step.confirmed else "fill_failed"
            branch.waited(waited)  # a wait that did not pay (W_b)
            if stream is not None:
                stream.restart()
            self._refused(why)
            return Promotion(why=why)
        if step.done_at is not None:
            self.remaining_s.append(max(step.done_at - arrival, 0.0) if arrival else 0.0)
        step.promoting(True)
        try:
            with maybe_span(self.tracer, "branch.promote", attributes=span_attrs(
                    branch, fill, name)) as span:
                served = await self.library.promote(name, branch.id)
                span.set_attribute("dynbranch.promoted", served is not None)
        finally:
            step.promoting(False)
        if served is None:
            self._refused("library_refused")
            return Promotion(why="library_refused")
        self.confirmed(name)
        self.counters["adoptions_served"] += 1 if arrival else 0
        # credited (the claim, the fill's consumption, the branch's saving) before anything else
        # runs: nothing between here and its record in ``serve`` awaits
        return Promotion(served, (branch, fill, step), waited, why="promoted")

    def confirmed(self, name: ReuseName) -> None:
        """Another demand confirmed ``name`` in the library (promoted or stored it): demands
        adopting a fill under it stop waiting (``adoption``, identical work elsewhere), and
        so does one that comes later to adopt a fill step already running then."""
        self._confirmed_at[name] = clock.now()
        self._confirmed_at.move_to_end(name)
        if len(self._confirmed_at) > MAX_CONFIRMED:
            self._confirmed_at.popitem(last=False)
        for event in self._adopting.get(name, ()):
            event.set()

    def _confirmed_since(self, step: FillStep) -> bool:
        """Whether another demand confirmed ``step``'s name after the step was planned."""
        if not self.join_confirmed or step.name is None:
            return False
        confirmed_at = self._confirmed_at.get(step.name)
        return confirmed_at is not None and confirmed_at >= step.created_at

    async def _adopt(self, branch: Branch, step: FillStep, deadline: float,
                     stream: TextStream | None) -> str | None:
        """Wait for the running ``step`` under the adoption rule; None once it ended, else why
        the demand stopped waiting (counted; when the demand runs anew in its place,
        ``RUNS_ANEW``, the manager aborts the fill; it is given back when the deadline passed or
        the library answers it)."""
        self.counters["adoptions"] += 1
        waiting = clock.now()
        why, elsewhere = None, asyncio.Event()
        if self.join_confirmed and step.name is not None:
            self._adopting.setdefault(step.name, {})[elsewhere] = None
        try:
            why = await self.adopter.wait(step, deadline, stream, elsewhere)
        finally:
            waited = clock.now() - waiting
            charge_wait(waited)
            self._forget(step.name, elsewhere)
            if why is not None or not step.done.is_set():  # gave up, or was cancelled
                branch.waited(waited)  # a wait that did not pay (W_b)
        if why is None:
            return None
        self._refused(why)
        if why in RUNS_ANEW and stream is not None:  # else a library answer continues it
            stream.restart()
        return why

    def _forget(self, name: ReuseName | None, event: asyncio.Event) -> None:
        waiting = self._adopting.get(name) if name is not None else None
        if waiting is not None:
            waiting.pop(event, None)
            if not waiting:
                del self._adopting[name]  # type: ignore[arg-type]



__all__ = ["DEADLINE", "PROMOTION_COUNTERS", "Promotion", "Promotions"]
