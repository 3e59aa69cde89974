"""What the gateway's core needs from other services, as protocols (adapters live at the edge).

Every adapter degrades instead of failing the demand (DESIGN.md §5.6): a lost library answers a
miss and refuses stores, a lost admission service opens no branch, a lost engine raises
``Unavailable`` for canonical work and simply ends a fill.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from services.common.values.candidates import FillEstimate, RankedCandidate
from services.common.values.chat import ToolCall
from services.common.values.generation import (
    FinishReason,
    GenerationRequest,
    Progress,
    Timings,
    Usage,
)
from services.common.values.reads import Claimed, HoldNotice, ReadSet, Served, Shadow
from services.common.values.reuse_name import ReuseName
from services.gateway.values import Demand, TextStream


@dataclass(frozen=True, slots=True)
class Execution:
    """A finished engine generation."""

    text: str
    finish_reason: FinishReason
    usage: Usage
    timings: Timings
    engine_id: str
    tool_calls: tuple[ToolCall, ...] = ()
    #: The stop string that ended it ("" when none did, or the engine does not say).
    stop_string: str = ""


@dataclass(frozen=True, slots=True)
class Room:
    """Where a canonical generation of a running fill's model could start now, as the load
    views say (``EnginePort.room``): what the adoption rule weighs against waiting."""

    #: On the fill's own engine, besides the fill itself.
    here: bool
    #: On another healthy engine serving the model.
    elsewhere: bool


@dataclass(frozen=True, slots=True)
class AppliedWrite:
    """A record write the library numbered and applied where it must (``LibraryPort.
    apply_records``): its versions, final; acknowledge it to anyone only once ``settled``
    returns (a sharded library's commit wait runs meanwhile, ``adapters/shard_repair.py``)."""

    versions: tuple[int, ...]
    #: Done when the write may be acknowledged (None: at once).
    settlement: asyncio.Future[None] | None = None

    async def settled(self) -> None:
        """Return once the write may be acknowledged; a caller that gives up leaves the
        settlement running (it ends on its own)."""
        if self.settlement is not None:
            await asyncio.shield(self.settlement)


class LibraryPort(Protocol):
    """The Completed-Subgraph Library (C1) as the gateway uses it."""

    def available(self) -> bool:
        """False while the library is known to be unreachable (a call just failed on the
        transport): lookups and stores miss at once, and fills, which it alone can promote, are
        not worth running; True again after a short back-off, when the next call probes it."""

    async def lookup(self, name: ReuseName) -> Served | None:
        """A fresh confirmed entry, or None (a miss, also when the library is unreachable)."""

    async def put(self, name: ReuseName, result: bytes, read_set: ReadSet, cost_s: float) -> bool:
        """Store a canonical result; False when refused or unreachable."""

    async def put_shadow(self, shadow: Shadow, ttl_s: float) -> bool:
        """Store a fill's result as a shadow; False when refused or unreachable."""

    async def promote(self, name: ReuseName, branch_id: str) -> Served | None:
        """Promote the branch's shadow under ``name``; None when it cannot."""

    async def claim(self, name: ReuseName, scope: str, wait_s: float) -> Claimed | None:
        """Promote the one shadow under ``name`` whose fill is held in ``scope`` (the demand's
        workflow), whatever branch it belongs to (a fill another gateway replica runs), waiting
        up to ``wait_s`` while it still runs; None on a miss."""

    def hold(self, name: ReuseName, branch_id: str, candidate: str, scope: str,
             timeout_s: float) -> AsyncGenerator[HoldNotice, None]:
        """Hold a running fill step's placeholder while iterating; yields what happens to the
        step (promoted by any replica, its branch or workflow settled). Ends early when the
        library is lost."""

    async def settle_scope(self, scope: str, template_id: str, stage_id: str,
                           keep_branch: str = "", keep_candidate: str = "") -> int:
        """Tell the fills held in a workflow (by any replica) that a first stage of their
        branch was demanded here, keeping the claimed candidate (if any)."""

    async def discard(self, branch_id: str, keep_candidate: str = "") -> int:
        """Drop a branch's shadows (all but ``keep_candidate``)."""

    async def write_records(self, tenant: str, record_ids: Sequence[str],
                            floors: Sequence[int] = ()) -> tuple[int, ...]:
        """Bump record versions, invalidating readers; returns the new versions, each above
        the record's ``floors`` entry (the writer's own current version)."""

    async def apply_records(self, tenant: str, record_ids: Sequence[str],
                            floors: Sequence[int] = ()) -> AppliedWrite:
        """``write_records`` up to the point where its versions are final: the caller may act
        on them (commit the corpus) while the write settles, and acknowledges it after
        ``AppliedWrite.settled``. Raises as ``write_records`` does."""

    async def write_seq(self) -> int:
        """The last version the library handed out (raises when unreachable)."""

    #: Times the library came back from a loss that may have lost writes (a csl restart: its
    #: name feed resubscribed); the core reconciles the corpus when it moves. 0 when the port
    #: repairs itself (the sharded library) or cannot be lost (in-process).
    resyncs: int


class EnginePort(Protocol):
    """Engine agents as the gateway uses them."""

    async def generate(self, request: GenerationRequest, timeout_s: float,
                       prefix_key: str = "",
                       on_delta: Callable[[str], None] | None = None) -> Execution:
        """Run a generation to completion on a routed engine; cancelling aborts it.

        ``on_delta`` receives streamed text as it arrives (SSE streaming fronts).
        """

    def adopt(self, request_id: str, text: bool, timeout_s: float) -> AsyncIterator[Progress]:
        """Adopt the fill this gateway runs as ``request_id`` (EngineAgent.Adopt): raised to
        canonical priority where its backend can, its progress until it ends (``text``: with
        its text, the first event everything so far). Closing the iterator gives the fill up
        (it runs on at fill priority). ``NotFound`` when the fill is not (or not yet) running
        on its engine; ``Unavailable`` when the engine cannot be reached."""

    def room(self, request_id: str) -> Room | None:
        """Where a canonical generation of the running fill ``request_id``'s model could
        start now; None when no such fill runs through this gateway."""

    def models(self) -> set[str]:
        """Models served by at least one engine."""

    def max_model_len(self, model: str) -> int:
        """Context limit of ``model`` (the smallest over its engines)."""

    async def locate_history(self, affinity_key: str, model: str, history: str,
                             timeout_s: float = 0.5) -> str:
        """The engine id holding a workflow's history (where a returning tool result should
        continue): the one that ran its last canonical call, else the one whose prefix cache
        holds most of ``history``."""


class Speculation(Protocol):
    """What early fill (C2) holds for one demand (``SpeculationPort.speculate``'s answer): a
    promoted fill step's result now, another replica's fill to claim after a library miss, and
    where the demand's answer goes (fills that read the deciding stage's output start then)."""

    #: A matching fill step's result, promoted for this demand; None when there is none.
    served: Served | None

    async def claim_elsewhere(self, timeout_s: float) -> Served | None:
        """Promote another gateway replica's fill under the demand's name (waiting a bounded
        interval while it still runs); None when there is none (or the demand is not one
        another replica could hold)."""

    def answered(self, text: str) -> None:
        """The demand was answered with ``text``."""


class SpeculationPort(Protocol):
    """Early fill (C2) as the demand path calls it: once per demand, before the library."""

    async def speculate(self, d: Demand, name: ReuseName | None, timeout_s: float,
                        stream: TextStream | None = None) -> Speculation:
        """Settle and open this demand's branches; promote a matching fill step, adopting it
        while it still runs (``stream``: a streamed demand gets the fill's text as it is
        decoded)."""

    def confirmed(self, name: ReuseName) -> None:
        """A demand's execution under ``name`` was stored in the library: demands adopting a
        fill under the same name stop waiting for it (the library answers them)."""


class AdmissionPort(Protocol):
    """The admission service (C3) as the gateway uses it."""

    async def open_branch(self, branch_id: str, coordinate: str, branch_class: str,
                          model: str) -> bool:
        """Action 0; False (no speculation) when admission is unreachable."""

    async def admit(self, branch_id: str, coordinate: str, candidates: Sequence[RankedCandidate],
                    model: str, window_s: float = 0.0,
                    estimates: Mapping[str, FillEstimate] | None = None,
                    visit: int = 0) -> list[str]:
        """Action 1; the admitted candidates ([] when admission is unreachable). ``window_s``:
        the decision's remaining resolution window (engine s; 0 unknown, < 0 closed);
        ``estimates``: each candidate's projected fill cost (absent: unknown); ``visit``: how
        many branches of the workflow this gateway opened at the coordinate before this one."""

    async def report(self, branch_id: str, coordinate: str, selected: str, saved_s: float,
                     fill_cost_s: float, setup_s: float, final: bool = True,
                     consumed: Sequence[str] = (), wait_s: float = 0.0) -> None:
        """Feedback of a branch (best effort; engine seconds): provisional at resolution when
        the winner's chain is not yet settled (the selection is known), ``final`` once every
        fill has ended and the winner's chain is promoted or can no longer be (or at
        retirement): what its fills saved, cost, and the waits that did not pay."""


__all__ = ["AdmissionPort", "AppliedWrite", "EnginePort", "Execution", "LibraryPort", "Room",
           "Speculation", "SpeculationPort"]
