"""Placeholders of running fill steps, shared by every gateway replica.

A gateway that starts a fill step holds a placeholder under the step's reuse name for as long as
its ``HoldFill`` stream is open. Another replica whose demand derives that name (its branch was
opened elsewhere) finds no shadow yet, sees the placeholder and waits for the shadow instead of
running the stage again. The holder is told when its step's shadow is promoted (by any replica:
it credits the fill and resolves its branch) or when its branch is settled against the step's
candidate (it aborts the fill). Nothing here is persisted: a placeholder lives exactly as long as
its holder's stream, so a crashed holder leaves none behind and waiters fall back to a miss.

Plain asyncio, no gRPC: the servicer maps a stream onto :meth:`HoldRegistry.open` and
:meth:`HoldRegistry.close`; the library facade reports shadows, promotions and settlements.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from services.common.values.errors import ResourceExhausted
from services.common.values.reads import HoldEvent, HoldNotice


@dataclass(slots=True, eq=False)
class Hold:
    """One held placeholder."""

    key: bytes
    branch_id: str
    candidate: str
    #: The branch's workflow: only demands of the same scope may claim the step.
    scope: str
    #: Events for the holder's stream.
    events: asyncio.Queue[HoldNotice] = field(default_factory=asyncio.Queue)
    #: The step's shadow is stored (waiters may claim it now).
    landed: bool = False
    #: Set when the shadow lands, the hold loses its branch or ends: wakes waiters.
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    #: Its branch was settled against its candidate: it answers no demand from then on, even
    #: before its holder closes the stream (it takes no part in the ambiguity rule).
    lost: bool = False


class HoldRegistry:
    """Placeholders by name key and by branch, bounded in number."""

    def __init__(self, max_holds: int = 100_000) -> None:
        self.max_holds = max_holds
        self._by_key: dict[bytes, dict[str, Hold]] = {}
        # insertion-ordered (dicts as sets): who is told first must not follow hash order
        self._by_branch: dict[str, dict[bytes, None]] = {}
        self._by_scope: dict[str, dict[Hold, None]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def open(self, key: bytes, branch_id: str, candidate: str, scope: str) -> Hold:
        """Register a placeholder; a second hold of the same name and branch replaces the
        first (whose waiters are woken)."""
        if self._count >= self.max_holds:
            raise ResourceExhausted(f"csl holds {self.max_holds} fill placeholders; retry later")
        old = self._by_key.get(key, {}).get(branch_id)
        if old is not None:
            self.close(old)
        hold = Hold(key, branch_id, candidate, scope)
        self._by_key.setdefault(key, {})[branch_id] = hold
        self._by_branch.setdefault(branch_id, {})[key] = None
        self._by_scope.setdefault(scope, {})[hold] = None
        self._count += 1
        return hold

    def close(self, hold: Hold) -> None:
        """Drop a placeholder (its stream ended) and wake its waiters; idempotent."""
        holds = self._by_key.get(hold.key)
        if holds is None or holds.get(hold.branch_id) is not hold:
            return
        del holds[hold.branch_id]
        if not holds:
            del self._by_key[hold.key]
        keys = self._by_branch[hold.branch_id]
        keys.pop(hold.key, None)
        if not keys:
            del self._by_branch[hold.branch_id]
        scoped = self._by_scope[hold.scope]
        scoped.pop(hold, None)
        if not scoped:
            del self._by_scope[hold.scope]
        self._count -= 1
        hold.changed.set()

    def branches(self, key: bytes, scope: str) -> set[str]:
        """Branches holding a placeholder under ``key`` in ``scope`` (settled losers excluded)."""
        return {b for b, h in self._by_key.get(key, {}).items()
                if h.scope == scope and not h.lost}

    def running(self, key: bytes, scope: str) -> Hold | None:
        """The one placeholder under ``key`` in ``scope`` whose shadow has not landed; None when
        there is none, or when several branches hold the name there (ambiguous: a miss)."""
        holds = [h for h in self._by_key.get(key, {}).values()
                 if h.scope == scope and not h.lost]
        if len(holds) != 1 or holds[0].landed:
            return None
        return holds[0]

    def landed(self, key: bytes, branch_id: str) -> None:
        """The step's shadow is stored: wake the waiters so they claim it."""
        hold = self._by_key.get(key, {}).get(branch_id)
        if hold is not None:
            hold.landed = True
            hold.changed.set()

    def promoted(self, key: bytes, branch_id: str) -> None:
        """The step's shadow was promoted: tell its holder."""
        hold = self._by_key.get(key, {}).get(branch_id)
        if hold is not None:
            hold.events.put_nowait(HoldNotice(HoldEvent.PROMOTED))

    def settled(self, branch_id: str, keep_candidate: str) -> int:
        """The branch was settled: tell every holder of a candidate other than the kept one;
        returns how many were told."""
        told = 0
        for key in list(self._by_branch.get(branch_id, ())):
            hold = self._by_key[key][branch_id]
            if not keep_candidate or hold.candidate != keep_candidate:
                hold.lost = True
                hold.changed.set()
                hold.events.put_nowait(HoldNotice(HoldEvent.SETTLED, keep_branch=branch_id,
                                                  keep_candidate=keep_candidate))
                told += 1
        return told

    def settle_scope(self, scope: str, template_id: str, stage_id: str, keep_branch: str,
                     keep_candidate: str) -> int:
        """A first stage of the scope's workflow was demanded on a replica that did not open
        its branch: tell every holder in the scope (each decides whether the stage resolves its
        branch); returns how many were told."""
        notice = HoldNotice(HoldEvent.SETTLED, template_id, stage_id, keep_branch,
                            keep_candidate)
        holds = self._by_scope.get(scope, {})
        for hold in holds:
            hold.events.put_nowait(notice)
        return len(holds)


__all__ = ["Hold", "HoldEvent", "HoldRegistry"]
