"""Early fill (C2): branch lifecycle from opening to settlement (dynbranch §3.3, DESIGN.md §4).

A demand for a decision-point stage opens a branch: admission's generation gate (Action 0), the
predictor's ranked candidates, the fill gate (Action 1) (``opening.py``), then one fill per
admitted candidate that runs the candidate's downstream chain with fill priority, storing each
step as a shadow.
The branch resolves when a demand for a first downstream stage of the same workflow arrives: the
candidate whose rendered name equals the demand's is the winner. An exclusive branch aborts every
loser's fill at once and discards its shadows; an independent one keeps them until their TTL.
A demand whose name matches exactly one promotable fill step promotes that step's shadow (exact
name and fresh read-set, checked atomically by the library; ``promotion.py`` says which steps
count: never a settled exclusive branch's loser), adopting the step while it still runs
(``adoption.py``: raised to canonical priority, waited for under a stated rule, no flat cap);
chained steps are promoted one demand at a time. Anything that goes wrong leaves
the demand to run normally (DESIGN.md §5.6). Across gateway replicas, the manager claims other
replicas' shadows and follows this gateway's held fills (its "across gateway replicas" part).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import itertools
import logging
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from opentelemetry.trace import Tracer

from services.common.values import clock
from services.common.values.errors import DeadlineExceeded
from services.common.values.reads import HoldEvent, HoldNotice, Served
from services.common.values.reuse_name import ReuseName
from services.common.values.tracing import maybe_span, run_in
from services.gateway.execution import Executor
from services.gateway.pace import DecodePace
from services.gateway.ports import AdmissionPort, LibraryPort
from services.gateway.reuse.freshness import Freshness
from services.gateway.reuse.naming import Naming
from services.gateway.reuse.single_flight import SingleFlight
from services.gateway.speculation.adoption import Adopter
from services.gateway.speculation.claims import Claims
from services.gateway.speculation.fills import FillRunner
from services.gateway.speculation.opening import Gates
from services.gateway.speculation.predictors import Predictor
from services.gateway.speculation.promotion import (
    DEADLINE,
    PROMOTION_COUNTERS,
    Promotion,
    Promotions,
)
from services.gateway.speculation.state import (
    Branch,
    BranchSettings,
    Fill,
    FillStep,
    Settlement,
    scope_of,
)
from services.gateway.templates import (
    DecisionPoint,
    Stage,
    Template,
    TemplateRegistry,
    Window,
)
from services.gateway.values import Demand, Features, TextStream

log = logging.getLogger(__name__)
#: Longest ``close`` waits for its tasks: each outcome report has its own deadline (1 s), an
#: aborted fill ends at once; within the launcher's stop (10 s) after the gRPC grace (5 s).
CLOSE_DRAIN_S = 3.0
#: The branch manager's counters, and what each counts (the HELP of the gateway's
#: ``dynbranch_gateway_branch_<key>`` metrics).
BRANCH_COUNTERS: dict[str, str] = {
    "opened": "Branches opened at a decision point (admission then decides whether to fill "
              "them)",
    "fills_issued": "Candidate fills started after admission admitted them",
    "fills_consumed": "Fills that served at least one demand by a promoted step",
    "stages_promoted": "Fill steps whose shadow was promoted to answer a demand, on this "
                       "gateway or on another replica",
    "fills_discarded": "Fills of exclusive branches discarded because another candidate won",
    "fills_aborted": "Fills cancelled while still running (a losing or unpicked candidate, a "
                     "branch settled elsewhere or retired, or a demand that ran anew)",
    "ambiguous": "Demands that matched promotable steps of more than one fill or branch, so "
                 "promoted none",
    "promoted_elsewhere": "Fill steps of this gateway's branches that another replica promoted",
    "claimed_elsewhere": "Demands served from a fill another replica ran, claimed through the "
                         "library",
    "skipped_library_down": "Branches left unfilled because the library was unreachable (no "
                            "fill could have been promoted)",
    "fill_steps_joined": "Fill steps that took the result of an identical canonical execution "
                         "running on this gateway instead of computing it again",
    **PROMOTION_COUNTERS,
}
#: The counters the manager keeps itself: its own, and the winners' (it keeps each branch's
#: outcome); the rest are its promotions', its fill runner's and its claims'.
_OWN_COUNTERS = (*(k for k in BRANCH_COUNTERS if k not in PROMOTION_COUNTERS
                   and k not in ("ambiguous", "fill_steps_joined", "claimed_elsewhere")),
                 *(k for k in PROMOTION_COUNTERS if k.startswith("winners_")))


class BranchManager:
    """Opens, fills, resolves and retires branches; every task it starts is owned and awaited.

    Its fills run stages through ``executor`` and name them as the canonical path would
    (``naming``; with C1 on they take a current library entry, ``freshness``, or an identical
    canonical execution running now, ``single_flight``); ``pace`` is the decode pace the
    executor learns, read for admission's estimates and the outcome reports."""

    def __init__(self, executor: Executor, library: LibraryPort, admission: AdmissionPort,
                 predictor: Predictor, settings: BranchSettings, tracer: Tracer, *,
                 registry: TemplateRegistry, naming: Naming, freshness: Freshness,
                 single_flight: SingleFlight, pace: DecodePace, features: Features) -> None:
        self.registry = registry
        self.pace = pace
        self.library = library
        self.admission = admission
        self.predictor = predictor
        self.settings = settings
        self.tracer = tracer
        self.branches: dict[str, Branch] = {}
        self._by_workflow: dict[tuple[str, str], list[Branch]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._by_request: dict[str, Branch] = {}
        #: The manager's own counters (``counters`` adds those of its promotions and fills).
        self._counts = dict.fromkeys(_OWN_COUNTERS, 0)
        self.promotions = Promotions(library, settings, tracer,
                                     adopter=Adopter(executor.engines, settings),
                                     join_confirmed=features.c1)
        self.fills = FillRunner(executor, library, settings, tracer, naming=naming,
                                freshness=freshness, single_flight=single_flight,
                                c1=features.c1, hold=self.hold)
        self.gates = Gates(admission, predictor, pace, self.fills, tracer)
        self.claims = Claims(library, registry, settings, self._spawn)

    @property
    def counters(self) -> dict[str, int]:
        """Every counter of ``BRANCH_COUNTERS`` now, in its order: the manager's own, its
        promotions', its fill runner's and its claims' (a snapshot)."""
        found = {**self._counts, **self.promotions.counters,
                 "fill_steps_joined": self.fills.joined, "claimed_elsewhere": self.claims.claimed}
        return {key: found.get(key, 0) for key in BRANCH_COUNTERS}

    # -- entry from the canonical path -------------------------------------------------------

    async def speculate(self, d: Demand, name: ReuseName | None, timeout_s: float,
                        stream: TextStream | None = None) -> BranchVerdict:
        """``SpeculationPort.speculate``: settle and open this demand's branches, promote a
        matching fill step (adopting it while it runs), and say whether another replica may
        hold its fill."""
        stage = d.stage
        if stage is None:
            return BranchVerdict(self, d, None, name)
        served = await self.handle(d, stage, name, timeout_s, stream)
        claimable = served is None and self.claims.claimable(
            d, stage, name, self._by_workflow.get((d.tenant, d.workflow_id), ()))
        return BranchVerdict(self, d, stage, name, served, claimable)

    def confirmed(self, name: ReuseName) -> None:
        """``SpeculationPort.confirmed``: demands adopting a fill under ``name`` stop waiting
        (the library answers them)."""
        self.promotions.confirmed(name)

    async def handle(self, d: Demand, stage: Stage, name: ReuseName | None,
                     timeout_s: float, stream: TextStream | None = None) -> Served | None:
        """Open a branch at a decision point; resolve and claim branches this demand matches."""
        self._retire_expired()
        served = None
        if d.workflow_id:
            branches = list(self._by_workflow.get((d.tenant, d.workflow_id), ()))
            for branch in branches:
                await self._settle_on(branch, d, name, timeout_s)
            # the records first (the match's steps, then the demand's passage), then the
            # manager acts on what they came to: counts it, sends the final reports now due
            promotion = Promotion()
            if name is not None:
                promotion = await self.promotions.serve(
                    [b for b in branches if b.template.id == d.template_id], name, timeout_s,
                    stream)
            if promotion.why != DEADLINE:  # a demand failed at its deadline passed no stage
                for branch in branches:
                    if branch.template.id == d.template_id:
                        branch.passed_by(d.stage_id)
            served = self._settle_promotion(promotion)
            for branch in branches:
                self._maybe_final(branch)
        template = self.registry.get(d.template_id)
        point = next((p for p in template.decisions if p.stage == stage.id), None)
        if point is not None and d.workflow_id:
            self._open(d, template, point)
        return served

    def _settle_promotion(self, promotion: Promotion) -> Served | None:
        """Count what a demand's match came to (its records took it already: the outcomes
        kept, the promoted step credited, the fill it gave up on to run anew aborted); the
        served result (``DeadlineExceeded`` when the deadline passed while it waited)."""
        for what in promotion.kept:
            self._count_winner(what)
        if promotion.promoted is not None and promotion.served is not None:
            self._credited(promotion.consumed)
        if promotion.aborted and promotion.abandoned is not None:
            self._aborted(promotion.abandoned, f"its demand runs anew ({promotion.why})")
        if promotion.why == DEADLINE:
            raise DeadlineExceeded("the deadline passed while the demand waited for the fill it "
                                   "adopted")
        return promotion.served

    def _count_winner(self, what: str) -> None:
        """Count what became of an admitted winner's first step ("promoted" or a refusal),
        kept once per branch: the bench reports admitted winners not promoted, and why."""
        key = "winners_promoted" if what == "promoted" else f"winners_lost_{what}"
        self._counts[key] = self._counts.get(key, 0) + 1

    def _credited(self, consumed: bool, elsewhere: bool = False) -> None:
        """Count one promotion credited to its fill and branch (``Branch.credit``; by a demand
        here, or on another replica: ``elsewhere``); ``consumed``: the fill's first."""
        if consumed:
            self._counts["fills_consumed"] += 1
        self._counts["stages_promoted"] += 1
        if elsewhere:
            self._counts["promoted_elsewhere"] += 1

    async def _settle_on(self, branch: Branch, d: Demand, name: ReuseName | None,
                         timeout_s: float) -> None:
        """Resolve ``branch`` when ``d`` is the first stage of its subgraph."""
        if branch.template.id != d.template_id:
            return
        if not branch.resolved and d.stage_id in branch.first_stages():
            await self._wait_ready(branch, timeout_s)
            match = branch.match(name) if name is not None else None
            if match is None and name is not None:  # a predicted candidate, not filled
                branch.select_predicted(name)
            self._resolve(branch, match[0].candidate if match else "")

    async def _wait_ready(self, branch: Branch, timeout_s: float) -> None:
        try:
            await asyncio.wait_for(branch.ready.wait(), min(self.settings.fill_wait_s, timeout_s))
        except TimeoutError:
            pass

    # -- across gateway replicas (dynbranch §3.3, DESIGN.md §4) --------------------------------
    # A workflow's demands may reach a replica other than the one that opened its branch; the
    # library links them through the workflow's scope. ``claims`` claims other replicas' shadows
    # for this gateway's demands; the manager holds this gateway's running fill steps'
    # placeholders and follows them to learn what other replicas did with its shadows.

    def hold(self, branch: Branch, fill: Fill, step: FillStep) -> None:
        """Hold a fill step's placeholder while its branch lives (the fill runner's ``hold``)."""
        if branch.retired:
            return
        step.held_by(self._spawn(self._follow_hold(branch, fill, step), f"hold:{branch.id}"))

    async def _follow_hold(self, branch: Branch, fill: Fill, step: FillStep) -> None:
        """Hold the step's placeholder; learn what other replicas did with its shadow."""
        assert step.name is not None
        events = self.library.hold(step.name, branch.id, fill.candidate,
                                   scope_of(branch.tenant, branch.workflow_id),
                                   self.settings.branch_ttl_s)
        async with contextlib.aclosing(events):
            async for notice in events:
                if notice.kind is HoldEvent.PROMOTED:
                    self._promoted_elsewhere(branch, fill, step)
                    return
                if notice.kind is HoldEvent.SETTLED and self._settled(branch, fill, notice):
                    return

    def _settled(self, branch: Branch, fill: Fill, notice: HoldNotice) -> bool:
        """Apply a settlement heard through the library; True when ``fill`` lost (its hold
        ends; an independent branch's loser keeps its shadow, and its hold, until expiry)."""
        if notice.stage_id:  # a replica demanded a first stage of this workflow
            if (branch.resolved or notice.template_id != branch.template.id
                    or notice.stage_id not in branch.first_stages()):
                return False
            keep = notice.keep_candidate if notice.keep_branch == branch.id else ""
            self._resolve(branch, keep)
            return branch.exclusive and keep != fill.candidate
        if not branch.resolved:  # the branch itself was settled against this candidate
            self._abort(fill, "settled by another gateway")
        return True

    def _promoted_elsewhere(self, branch: Branch, fill: Fill, step: FillStep) -> None:
        """Another replica's demand promoted the step: credit the fill, resolve the branch."""
        if step.claimed or step.claiming:
            return  # promoted by a demand on this gateway: counted there
        self._credited(branch.credit(fill, step, step.cost_s), elsewhere=True)
        if not branch.resolved and fill.steps and fill.steps[0] is step:
            self._resolve(branch, fill.candidate)
        if branch.record_outcome(fill, step, "promoted"):
            self._count_winner("promoted")

    # -- opening ------------------------------------------------------------------------------

    def _open(self, d: Demand, template: Template, point: DecisionPoint) -> None:
        if len(self.branches) >= self.settings.max_branches:
            self._retire(next(iter(self.branches.values())))  # the oldest: opening order
        visit = 0
        for old in self._by_workflow.get((d.tenant, d.workflow_id), ()):
            if old.point.coordinate == point.coordinate:
                visit += 1
                if old.exclusive and not old.resolved:
                    self._resolve(old, "")  # the workflow moved on: a new turn at the same point
        branch = Branch(id=f"b-{uuid.uuid4().hex[:16]}", tenant=d.tenant,
                        workflow_id=d.workflow_id, template=template, point=point,
                        inputs=dict(d.inputs), outputs=dict(d.outputs), model=d.model,
                        request_id=d.request_id, visit=visit)
        self.branches[branch.id] = branch
        self._by_workflow.setdefault((d.tenant, d.workflow_id), []).append(branch)
        self._by_request[d.request_id] = branch
        self._counts["opened"] += 1
        self._spawn(self._launch(branch, d), f"open:{branch.id}")

    def _siblings(self, branch: Branch) -> list[Branch]:
        """The branches of ``branch``'s workflow open now (itself among them)."""
        return self._by_workflow.get((branch.tenant, branch.workflow_id), [])

    def on_output(self, d: Demand, text: str) -> None:
        """The deciding stage of a branch answered: fills that read its output may start."""
        branch = self._by_request.pop(d.request_id, None)
        if branch is not None:
            branch.decide(text)

    async def _launch(self, branch: Branch, d: Demand) -> None:
        if branch.point.window is Window.USER:
            try:  # fills read the offer, so they start once it is out (the user's think time)
                await asyncio.wait_for(branch.decided.wait(), self.settings.branch_ttl_s)
            except TimeoutError:
                branch.ready.set()
                return
        if not self.library.available():  # nothing it ran could be promoted: run none
            self._counts["skipped_library_down"] += 1
            branch.ready.set()
            return
        start = clock.now()
        attrs = {"dynbranch.branch_id": branch.id, "dynbranch.coordinate": branch.point.coordinate}
        try:
            with maybe_span(self.tracer, "branch.open", attributes=attrs):
                admitted = await self.gates.admitted(branch, d, functools.partial(
                    self._siblings, branch))
            branch.set_up(clock.now() - start)
            if not branch.resolved and not branch.retired:
                for rank, candidate in admitted:
                    fill = Fill(candidate, rank)
                    branch.add_fill(fill)
                    fill.run_as(self._spawn(self.fills.run(branch, fill), f"fill:{branch.id}"))
                    assert fill.task is not None
                    fill.task.add_done_callback(functools.partial(self._final_after, branch))
                    self._counts["fills_issued"] += 1
        finally:
            branch.ready.set()

    # -- settlement ---------------------------------------------------------------------------

    def _resolve(self, branch: Branch, winner: str) -> None:
        """Settle ``branch`` for ``winner`` (``Branch.resolve``: its losers' fills stop), then
        act on what that came to under the settle span (``_act_on``)."""
        settlement = branch.resolve(winner)
        with maybe_span(self.tracer, "branch.settle", attributes={
                "dynbranch.branch_id": branch.id, "dynbranch.coordinate": branch.point.coordinate,
                "dynbranch.candidate": winner, "dynbranch.exclusive": branch.exclusive}):
            context = run_in(branch.trace)  # its tasks run in its workflow's trace
            per_wall = self.pace.engine_per_wall(branch.model)
            self._act_on(branch, settlement, context, per_wall)

    def _act_on(self, branch: Branch, settlement: Settlement, context: contextvars.Context | None,
                per_wall: float) -> None:
        """The manager's reactions to a settlement, in one place: count it and the fills it
        stopped, teach the predictor the winner, discard an exclusive branch's losing shadows,
        and report (the final report when due, else the selection: feedback starts now). Its
        tasks run in ``context`` (the branch's trace); ``per_wall``: the decode pace's engine
        seconds per wall second, read once for its reports."""
        winner = settlement.winner
        if settlement.admitted:
            self._counts["winners_admitted"] += 1
        self._counts["fills_discarded"] += settlement.discarded
        for fill in settlement.stopped:
            self._aborted(fill, "lost the branch" if branch.exclusive else "not picked")
        if winner:
            observe = getattr(self.predictor, "observe", None)
            if observe is not None:
                observe(branch.point.coordinate, winner)
        if branch.exclusive:
            self._spawn(self._discard(branch.id, winner), f"discard:{branch.id}", context)
        if settlement.final is not None:
            self._final(branch, *settlement.final, context, per_wall)
        if not branch.reported:  # the selection is known: feedback starts now
            self._report(branch, context, per_wall, final=False)

    def settle(self, tenant: str, workflow_id: str, coordinate: str, selected: str) -> int:
        """Resolve open branches of a workflow at ``coordinate`` explicitly (HCI picks)."""
        count = 0
        for branch in self._by_workflow.get((tenant, workflow_id), ()):
            if branch.point.coordinate == coordinate and not branch.resolved:
                self._resolve(branch, selected)
                count += 1
        return count

    async def _discard(self, branch_id: str, keep: str) -> None:
        await self.library.discard(branch_id, keep)

    def _abort(self, fill: Fill, why: str) -> None:
        if fill.abort():
            self._aborted(fill, why)

    def _aborted(self, fill: Fill, why: str) -> None:
        """Count a fill stopped while it ran."""
        self._counts["fills_aborted"] += 1
        log.debug("fill %s aborted: %s", fill.candidate, why)

    # -- retirement ---------------------------------------------------------------------------

    def _retire_expired(self) -> None:
        # ``branches`` is in opening order, so the expired ones are a prefix: this runs on every
        # demand and must not scan the live branches.
        horizon = clock.now() - self.settings.branch_ttl_s
        expired = list(itertools.takewhile(lambda b: b.opened_at < horizon,
                                           self.branches.values()))
        for branch in expired:
            self._retire(branch)

    def _retire(self, branch: Branch) -> None:
        if branch.retire():
            self._counts["winners_lost_unseen"] += 1
        self.branches.pop(branch.id, None)
        self._by_request.pop(branch.request_id, None)
        siblings = self._by_workflow.get((branch.tenant, branch.workflow_id), [])
        if branch in siblings:
            siblings.remove(branch)
        if not siblings:
            self._by_workflow.pop((branch.tenant, branch.workflow_id), None)
        for fill in branch.fills.values():
            self._abort(fill, "branch retired")
            for step in fill.steps:
                step.drop_hold()
        self._report(branch, run_in(branch.trace), self.pace.engine_per_wall(branch.model))

    def _maybe_final(self, branch: Branch) -> None:
        """Send the final report as soon as nothing more can change it: the branch resolved,
        every fill ended, and the winner's chain is promoted or can no longer be (feedback
        inside the run, not at expiry)."""
        if branch.reported or not branch.resolved:
            return
        self._final(branch, *branch.final_due(), run_in(branch.trace),
                    self.pace.engine_per_wall(branch.model))

    def _final(self, branch: Branch, due: bool, stopped: Fill | None,
               context: contextvars.Context | None, per_wall: float) -> None:
        """Act on ``Branch.final_due``: count the outrun winner it stopped, report if due."""
        if stopped is not None:
            self._aborted(stopped, "its workflow passed every stage of its chain")
        if due:
            self._report(branch, context, per_wall)

    def _report(self, branch: Branch, context: contextvars.Context | None, per_wall: float,
                final: bool = True) -> None:
        """Report the branch's outcome to admission (unless a final report went out), in
        ``context`` (its trace: ``run_in``); ``per_wall`` turns its setup and waits into
        engine seconds (``DecodePace.engine_per_wall``)."""
        if not branch.mark_reported(final):
            return
        cost = sum(f.cost_s for f in branch.fills.values())
        consumed = [p for f in branch.fills.values() for p in f.promoted]
        # G_s of Eq. 4: what the consumed fills saved, less what their demands still waited
        saved = max(branch.saved_s - branch.adopted_wait_s * per_wall, 0.0)
        self._spawn(self.admission.report(branch.id, branch.point.coordinate,
                                          branch.selected or branch.winner, saved,
                                          cost, branch.setup_s * per_wall, final, consumed,
                                          branch.wait_s * per_wall),
                    f"report:{branch.id}:{'final' if final else 'resolved'}", context)

    # -- tasks --------------------------------------------------------------------------------

    def _final_after(self, branch: Branch, _task: asyncio.Task[None]) -> None:
        self._maybe_final(branch)

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str,
               context: contextvars.Context | None = None) -> asyncio.Task[None]:
        """A tracked task, in a copy of ``context`` when given (``run_in``: a branch's own trace,
        not the caller's), else in a copy of the caller's (``create_task``'s default)."""
        task = asyncio.create_task(coro, name=name,
                                   context=None if context is None else context.copy())
        self._tasks.add(task)
        task.add_done_callback(self._reap)
        return task

    def _reap(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("branch task %s failed", task.get_name(), exc_info=task.exception())

    async def close(self, drain_s: float = CLOSE_DRAIN_S) -> int:
        """Retire every branch (aborting fills, reporting outcomes) and await every task for up
        to ``drain_s``; cancel what is left (a report to an admission that does not answer).
        Returns how many were cancelled."""
        for branch in list(self.branches.values()):
            self._retire(branch)
        deadline = asyncio.get_running_loop().time() + drain_s
        while self._tasks:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return await self._cancel_tasks()
            await asyncio.wait(list(self._tasks), timeout=left)
        return 0

    async def _cancel_tasks(self) -> int:
        """Cancel the tasks still running at the end of the drain; how many."""
        tasks = list(self._tasks)
        log.warning("closing with %d branch tasks still running after the drain (%s); cancelled",
                    len(tasks), ", ".join(sorted(t.get_name() for t in tasks)[:5]))
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return len(tasks)


@dataclass(slots=True)
class BranchVerdict:
    """``ports.Speculation``: what the branch manager holds for one demand."""

    manager: BranchManager
    demand: Demand
    stage: Stage | None
    name: ReuseName | None
    served: Served | None = None
    #: Whether another replica may hold this demand's fill (looked for after a library miss).
    claimable: bool = False

    async def claim_elsewhere(self, timeout_s: float) -> Served | None:
        """See ``ports.Speculation.claim_elsewhere``."""
        if not self.claimable or self.stage is None or self.name is None:
            return None
        with maybe_span(self.manager.tracer, "csl.claim", attributes={
                "dynbranch.reuse_name": str(self.name)}) as span:
            served = await self.manager.claims.claim_elsewhere(self.demand, self.stage,
                                                               self.name, timeout_s)
            span.set_attribute("dynbranch.promoted", served is not None)
        return served

    def answered(self, text: str) -> None:
        """See ``ports.Speculation.answered``: the branch this demand opened may start."""
        self.manager.on_output(self.demand, text)


__all__ = ["BRANCH_COUNTERS", "Branch", "BranchManager", "BranchSettings", "BranchVerdict", "Fill",
           "FillStep"]
