"""Early fill across gateway replicas (dynbranch §3.3, DESIGN.md §4).

A workflow's demands may reach a replica other than the one that opened its branch. The library
links them: each running fill step's placeholder is held in the workflow's scope, another
replica's demand claims the step's shadow through that scope, and a demand for a first stage of
the branch's subgraph settles the scope. ``ReplicaLink`` is both sides of that exchange for one
gateway's ``BranchManager``: it claims other replicas' shadows for this gateway's demands, and
follows this gateway's holds to learn what other replicas did with its shadows.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from services.common.values.reads import HoldEvent, HoldNotice, Served
from services.common.values.reuse_name import ReuseName
from services.gateway.execution import Executor
from services.gateway.ports import LibraryPort
from services.gateway.speculation.state import Branch, BranchSettings, Fill, FillStep, scope_of
from services.gateway.templates import DecisionPoint, Stage
from services.gateway.values import Demand

#: Starts a task owned (and awaited at close) by the branch manager.
_Spawn = Callable[[Coroutine[Any, Any, None], str], asyncio.Task[None]]


class ReplicaLink:
    """One gateway's branches as the other replicas see them (module docstring).

    The manager's branch table (``workflows``) and ``counters`` are shared with it; ``resolve``,
    ``abort`` and ``spawn`` are the manager's own settlement and task ownership, ``outcome``
    records what became of an admitted winner's first step.
    """

    def __init__(self, executor: Executor, library: LibraryPort, settings: BranchSettings,
                 workflows: Mapping[tuple[str, str], list[Branch]], counters: dict[str, int], *,
                 resolve: Callable[[Branch, str], None], abort: Callable[[Fill, str], None],
                 spawn: _Spawn, outcome: Callable[[Branch, Fill, FillStep, str], None]) -> None:
        self.executor = executor
        self.library = library
        self.settings = settings
        self._by_workflow = workflows
        self.counters = counters
        self._resolve, self._abort, self._spawn = resolve, abort, spawn
        self._outcome = outcome

    def claimable(self, d: Demand, stage: Stage, name: ReuseName | None) -> bool:
        """Whether another replica may hold the branch this demand belongs to: a stage that a
        decision point of its template fills, in a workflow with no branch here at such a
        point (a branch here is this workflow's: its fills were matched locally)."""
        if name is None or not d.workflow_id:
            return False
        points = [p for p in self.executor.registry.get(d.template_id).decisions
                  if _fills(p, stage.id)]
        if not points:
            return False
        return not any(b.template.id == d.template_id and _fills(b.point, stage.id)
                       for b in self._by_workflow.get((d.tenant, d.workflow_id), ()))

    async def claim_elsewhere(self, d: Demand, stage: Stage, name: ReuseName,
                              timeout_s: float) -> Served | None:
        """Promote another replica's shadow under ``name`` for this demand's workflow, waiting
        a bounded interval while its fill still runs (its placeholder is held in the library);
        None on a miss. A first stage of a branch's subgraph also settles the workflow's held
        fills, so the replica that opened the branch resolves it and aborts its losers."""
        claimed = await self.library.claim(name, scope_of(d.tenant, d.workflow_id),
                                           min(self.settings.fill_wait_s, timeout_s))
        if claimed is not None:
            self.counters["claimed_elsewhere"] += 1
        template = self.executor.registry.get(d.template_id)
        if any(_starts(p, stage.id) for p in template.decisions):
            keep = (claimed.branch_id, claimed.candidate) if claimed is not None else ("", "")
            self._spawn(self._settle_scope(d, stage, *keep), f"settle:{d.workflow_id}")
        return Served(claimed.result, claimed.cost_s) if claimed is not None else None

    async def _settle_scope(self, d: Demand, stage: Stage, keep_branch: str,
                            keep_candidate: str) -> None:
        await self.library.settle_scope(scope_of(d.tenant, d.workflow_id), d.template_id,
                                        stage.id, keep_branch, keep_candidate)

    def hold(self, branch: Branch, fill: Fill, step: FillStep) -> None:
        """Hold a fill step's placeholder while its branch lives (the fill runner's ``hold``)."""
        if branch.retired:
            return
        step.hold = self._spawn(self._follow_hold(branch, fill, step), f"hold:{branch.id}")

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
        step.claimed = True
        fill.promoted.append(step.producer)
        branch.saved_s += step.cost_s
        self.counters["stages_promoted"] += 1
        self.counters["promoted_elsewhere"] += 1
        if not fill.consumed:
            fill.consumed = True
            self.counters["fills_consumed"] += 1
        if not branch.resolved and fill.steps and fill.steps[0] is step:
            self._resolve(branch, fill.candidate)
        self._outcome(branch, fill, step, "promoted")


def _fills(point: DecisionPoint, stage_id: str) -> bool:
    """Whether a candidate chain of ``point`` runs ``stage_id``."""
    chains = (point.subgraph, *(c for _, c in point.per_candidate))
    return any(step.stage == stage_id for chain in chains for step in chain)


def _starts(point: DecisionPoint, stage_id: str) -> bool:
    """Whether ``stage_id`` starts a candidate chain of ``point`` (its demand resolves it)."""
    chains = (point.subgraph, *(c for _, c in point.per_candidate))
    return any(chain and chain[0].stage == stage_id for chain in chains)


__all__ = ["ReplicaLink"]
