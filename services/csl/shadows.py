"""Shadows: fill results held in memory, invisible to serving paths (dynbranch §3.3).

A shadow is addressed by ``(name key, branch id)`` and indexed by branch, so settling a branch
costs O(K_b) for its K_b shadows rather than a scan of all of them ("Reuse-path complexity").
Settling records which candidate (if any) the branch kept, so a loser's fill that completes after
settlement is refused. Unclaimed shadows and settlement records expire after a TTL; the total size
of held shadows is bounded, and a shadow that does not fit is refused (a missed speculation is
only a miss). Nothing here is persisted: shadows may be dropped on restart.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from services.common.values.reads import RecordKey, Shadow

_ShadowKey = tuple[bytes, str]  # (name key, branch id)


@dataclass(slots=True, eq=False)
class HeldShadow:
    """A shadow plus what the library resolved when it was stored."""

    sid: int
    key: bytes
    shadow: Shadow
    rkeys: tuple[RecordKey, ...]
    producers: tuple[int, ...]
    stored_seq: int
    expires_at: float
    size: int


class ShadowStore:
    """In-memory shadows with branch index, settlement records, TTL expiry and a byte bound."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self.bytes = 0
        self._held: dict[_ShadowKey, HeldShadow] = {}
        self._sids: set[int] = set()
        self._by_branch: dict[str, set[bytes]] = {}
        self._by_key: dict[bytes, set[str]] = {}
        self._settled: dict[str, tuple[str, float]] = {}
        self._expiry: list[tuple[float, int, bytes, str]] = []

    def __len__(self) -> int:
        return len(self._held)

    def get(self, key: bytes, branch_id: str) -> HeldShadow | None:
        """The shadow stored under a name for a branch."""
        return self._held.get((key, branch_id))

    def branches_of(self, key: bytes) -> list[str]:
        """Branches holding a shadow under a name key."""
        return list(self._by_key.get(key, ()))

    def holds(self, sid: int) -> bool:
        """True while the shadow with incarnation id ``sid`` is held."""
        return sid in self._sids

    def accepts(self, branch_id: str, candidate: str) -> bool:
        """False once the branch is settled, unless this is the candidate it kept."""
        settled = self._settled.get(branch_id)
        return settled is None or (settled[0] != "" and settled[0] == candidate)

    def add(self, held: HeldShadow) -> bool:
        """Hold a shadow; False when it does not fit the byte bound."""
        if self.bytes + held.size > self.budget_bytes:
            return False
        branch = held.shadow.branch_id
        self._held[(held.key, branch)] = held
        self._sids.add(held.sid)
        self._by_branch.setdefault(branch, set()).add(held.key)
        self._by_key.setdefault(held.key, set()).add(branch)
        heapq.heappush(self._expiry, (held.expires_at, held.sid, held.key, branch))
        self.bytes += held.size
        return True

    def take(self, key: bytes, branch_id: str) -> HeldShadow | None:
        """Remove and return a shadow."""
        held = self._held.pop((key, branch_id), None)
        if held is None:
            return None
        self._sids.discard(held.sid)
        keys = self._by_branch[branch_id]
        keys.discard(key)
        if not keys:
            del self._by_branch[branch_id]
        branches = self._by_key[key]
        branches.discard(branch_id)
        if not branches:
            del self._by_key[key]
        self.bytes -= held.size
        return held

    def settle(self, branch_id: str, keep_candidate: str, until: float) -> int:
        """Discard the branch's shadows except the kept candidate's; return how many."""
        self._settled[branch_id] = (keep_candidate, until)
        heapq.heappush(self._expiry, (until, -1, b"", branch_id))
        keys = list(self._by_branch.get(branch_id, ()))
        dropped = 0
        for key in keys:
            held = self._held[(key, branch_id)]
            if keep_candidate == "" or held.shadow.candidate != keep_candidate:
                self.take(key, branch_id)
                dropped += 1
        return dropped

    def expire(self, now: float) -> int:
        """Drop shadows and settlement records whose time has come; return shadows dropped."""
        dropped = 0
        heap = self._expiry
        while heap and heap[0][0] <= now:
            _, sid, key, branch = heapq.heappop(heap)
            if sid < 0:
                settled = self._settled.get(branch)
                if settled is not None and settled[1] <= now:
                    del self._settled[branch]
                continue
            held = self._held.get((key, branch))
            if held is not None and held.sid == sid:
                self.take(key, branch)
                dropped += 1
        return dropped

    def compact(self) -> None:
        """Drop expiry items of shadows already taken once they outnumber live ones."""
        if len(self._expiry) > 2 * (len(self._held) + len(self._settled)) + 64:
            live = [(h.expires_at, h.sid, h.key, b) for (_, b), h in self._held.items()]
            live += [(until, -1, b"", b) for b, (_, until) in self._settled.items()]
            heapq.heapify(live)
            self._expiry = live

    def clear(self) -> None:
        """Forget every shadow and settlement."""
        self.__init__(self.budget_bytes)  # type: ignore[misc]


__all__ = ["HeldShadow", "ShadowStore"]
