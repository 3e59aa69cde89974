"""Claiming another gateway replica's fill for this gateway's demands (dynbranch §3.3,
DESIGN.md §4).

A workflow's demands may reach a replica other than the one that opened its branch. The library
links them: each running fill step's placeholder is held in the workflow's scope, and another
replica's demand claims the step's shadow through that scope. ``Claims`` is the claiming side:
whether a demand's fill may be held elsewhere (``claimable``: asked once per demand, after its
own branches), and the claim itself after a library miss (``claim_elsewhere``); a demand for a
first stage of a branch's subgraph also settles the scope, so the replica that opened the branch
resolves it. The other side (following this gateway's holds) is the branch manager's.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from services.common.values.reads import Served
from services.common.values.reuse_name import ReuseName
from services.gateway.ports import LibraryPort
from services.gateway.speculation.state import Branch, BranchSettings, scope_of
from services.gateway.templates import DecisionPoint, Stage, TemplateRegistry
from services.gateway.values import Demand

#: Starts a task the branch manager owns and awaits (``BranchManager._spawn``).
Spawn = Callable[[Coroutine[Any, Any, None], str], object]


class Claims:
    """Claims other replicas' shadows for this gateway's demands; counts what it claimed."""

    def __init__(self, library: LibraryPort, registry: TemplateRegistry,
                 settings: BranchSettings, spawn: Spawn) -> None:
        self.library = library
        self.registry = registry
        self.settings = settings
        self.spawn = spawn
        #: Demands served from a fill another replica ran (``claimed_elsewhere``).
        self.claimed = 0

    def claimable(self, d: Demand, stage: Stage, name: ReuseName | None,
                  here: Iterable[Branch]) -> bool:
        """Whether another replica may hold the branch this demand belongs to: a stage that a
        decision point of its template fills, in a workflow with no branch ``here`` at such a
        point (a branch here is this workflow's: its fills were matched locally)."""
        if name is None or not d.workflow_id:
            return False
        points = [p for p in self.registry.get(d.template_id).decisions
                  if runs(p, stage.id)]
        if not points:
            return False
        return not any(b.template.id == d.template_id and runs(b.point, stage.id)
                       for b in here)

    async def claim_elsewhere(self, d: Demand, stage: Stage, name: ReuseName,
                              timeout_s: float) -> Served | None:
        """Promote another replica's shadow under ``name`` for this demand's workflow, waiting
        a bounded interval while its fill still runs (its placeholder is held in the library);
        None on a miss. A first stage of a branch's subgraph also settles the workflow's held
        fills, so the replica that opened the branch resolves it and aborts its losers."""
        claimed = await self.library.claim(name, scope_of(d.tenant, d.workflow_id),
                                           min(self.settings.fill_wait_s, timeout_s))
        if claimed is not None:
            self.claimed += 1
        template = self.registry.get(d.template_id)
        if any(starts(p, stage.id) for p in template.decisions):
            keep = (claimed.branch_id, claimed.candidate) if claimed is not None else ("", "")
            self.spawn(self._settle_scope(d, stage, *keep), f"settle:{d.workflow_id}")
        return Served(claimed.result, claimed.cost_s) if claimed is not None else None

    async def _settle_scope(self, d: Demand, stage: Stage, keep_branch: str,
                            keep_candidate: str) -> None:
        await self.library.settle_scope(scope_of(d.tenant, d.workflow_id), d.template_id,
                                        stage.id, keep_branch, keep_candidate)


def runs(point: DecisionPoint, stage_id: str) -> bool:
    """Whether a candidate chain of ``point`` runs ``stage_id``."""
    chains = (point.subgraph, *(c for _, c in point.per_candidate))
    return any(step.stage == stage_id for chain in chains for step in chain)


def starts(point: DecisionPoint, stage_id: str) -> bool:
    """Whether ``stage_id`` starts a candidate chain of ``point`` (its demand resolves it)."""
    chains = (point.subgraph, *(c for _, c in point.per_candidate))
    return any(chain and chain[0].stage == stage_id for chain in chains)


__all__ = ["Claims", "runs", "starts"]
