"""State of open branches and their fills (dynbranch §3.3): plain values the branch manager
and the fill runner share."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from services.common.reuse_name import ReuseName
from services.gateway.templates import DecisionPoint, Semantics, Template


@dataclass(frozen=True, slots=True)
class BranchSettings:
    """Knobs of the branch lifecycle."""

    #: Longest a demand waits for a matching fill step that is still running.
    fill_wait_s: float = 1.0
    #: Deadline of one fill step on an engine.
    fill_timeout_s: float = 120.0
    #: Seconds an unclaimed shadow lives (independent branches keep theirs this long).
    shadow_ttl_s: float = 60.0
    #: Seconds a branch is remembered after opening.
    branch_ttl_s: float = 300.0
    #: Open branches kept at most (older ones retire first).
    max_branches: int = 10_000


@dataclass(slots=True)
class FillStep:
    """One stage of a fill's chain."""

    stage_id: str
    name: ReuseName | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    #: A shadow is stored under ``name`` (or a confirmed entry already existed: ``confirmed``).
    ok: bool = False
    confirmed: bool = False
    claimed: bool = False
    #: The producer identity of its shadow (``producer_id``), once stored.
    producer: str = ""
    #: Engine seconds the step cost (what its promotion saves).
    cost_s: float = 0.0
    #: A demand on this gateway is promoting the step (its library event is not news).
    claiming: bool = False
    #: The task holding the step's placeholder in the library (other replicas wait on it).
    hold: asyncio.Task[None] | None = None


@dataclass(slots=True)
class Fill:
    """The speculative run of one candidate's chain."""

    candidate: str
    rank: int
    steps: list[FillStep] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    cost_s: float = 0.0
    #: At least one step was promoted to answer a demand.
    consumed: bool = False
    #: Producer identities of the promoted steps' shadows (what admission credits).
    promoted: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Branch:
    """One open branch of one workflow."""

    id: str
    tenant: str
    workflow_id: str
    template: Template
    point: DecisionPoint
    inputs: dict[str, str]
    outputs: dict[str, str]
    model: str
    #: Request id of the demand that opened the branch (its answer feeds ``window: user``).
    request_id: str = ""
    opened_at: float = field(default_factory=time.monotonic)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    #: Set when the deciding stage's output is known (fills of a user window read it).
    decided: asyncio.Event = field(default_factory=asyncio.Event)
    fills: dict[str, Fill] = field(default_factory=dict)
    resolved: bool = False
    winner: str = ""
    setup_s: float = 0.0
    saved_s: float = 0.0
    reported: bool = False
    #: Retired: no fill starts and no placeholder is held for it any more.
    retired: bool = False

    @property
    def exclusive(self) -> bool:
        """Whether one winner excludes the other candidates."""
        return self.point.semantics is Semantics.EXCLUSIVE

    def first_stages(self) -> set[str]:
        """Stage ids that start a candidate's chain: a demand for one resolves the branch."""
        chains = [self.point.subgraph, *(c for _, c in self.point.per_candidate)]
        return {chain[0].stage for chain in chains if chain}

    def matches(self, name: ReuseName) -> list[tuple[Fill, FillStep]]:
        """Every fill step whose name equals ``name``."""
        return [(fill, step) for fill in self.fills.values() for step in fill.steps
                if step.name == name]

    def match(self, name: ReuseName) -> tuple[Fill, FillStep] | None:
        """The one fill step whose name equals ``name``; None when none does, and when several
        do: an ambiguous match is a miss (dynbranch §3.3), never a guess."""
        found = self.matches(name)
        return found[0] if len(found) == 1 else None


def scope_of(tenant: str, workflow_id: str) -> str:
    """The library scope of a workflow's fills: claims and settlements never cross it, so a
    shadow stays invisible to other workflows and tenants (DESIGN.md §5.2)."""
    return f"{tenant}\x1f{workflow_id}"


def producer_id(branch_id: str, candidate: str, step: int) -> str:
    """The producer identity of a fill step's shadow: what admission credits when consumed."""
    return f"fill/{branch_id}/{candidate}/{step}"


def span_attrs(branch: Branch, fill: Fill, name: ReuseName) -> dict[str, str | int]:
    """Trace attributes of one fill step."""
    return {"dynbranch.branch_id": branch.id, "dynbranch.coordinate": branch.point.coordinate,
            "dynbranch.candidate": fill.candidate, "dynbranch.rank": fill.rank,
            "dynbranch.reuse_name": str(name)}


__all__ = ["Branch", "BranchSettings", "Fill", "FillStep", "producer_id", "scope_of",
           "span_attrs"]
