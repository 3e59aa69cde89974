"""The lease provider's book: the pending results of one engine, their leases, and the records
published about them (``papers/lads.txt`` §3.4–3.7; DESIGN.md §3 engine_agent).

Mechanism only: tracking a result, granting, ending and retiring a lease, draining handoffs,
counting references, and publishing budget and lease records to listeners. When to grant, expire
or revoke is the policy of ``provider.py``, which owns one book and calls down into it through
the methods below; the book's state is its own (``pending`` is a read-only view).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Mapping
from types import MappingProxyType

from services.common.values.errors import InvalidArgument
from services.common.values.leases import BudgetRecord, LeaseRecord, LeaseState, ResultKey
from services.engine_agent.leases.budget import Budget, exclusive_blocks
from services.engine_agent.leases.port import LeasePort, PoolState
from services.engine_agent.leases.state import (
    Descriptor,
    Lease,
    LeaseSettings,
    LeaseStats,
    Pending,
    Tick,
    Tokenize,
    ToolTimes,
    token_ids,
)

Record = LeaseRecord | BudgetRecord


class LeaseBook:
    """Pending results, their leases and the records about them, for one engine (no policy)."""

    def __init__(self, port: LeasePort, *, engine_id: str, tokenize: Tokenize,
                 settings: LeaseSettings, clock: Callable[[], float]) -> None:
        self.port, self.engine_id, self.settings = port, engine_id, settings
        self._tokenize, self._clock = tokenize, clock
        self._pending: dict[ResultKey, Pending] = {}
        self._by_lease: dict[str, Pending] = {}
        self._outstanding: dict[str, int] = {}  # lease id -> references not yet released
        self.tools = ToolTimes(settings.ttl_alpha)
        self._listeners: list[Callable[[Record], None]] = []
        self._ids = itertools.count(1)
        self._generation = 0
        self._budget = Budget(0, 0, 0, 0)  # B(t), set by the provider's evaluation
        self._tick = Tick()
        self.stats = LeaseStats()
        self.last_budget: BudgetRecord | None = None

    def subscribe(self, listener: Callable[[Record], None]) -> Callable[[], None]:
        """Call ``listener`` with every record published; returns the unsubscribe function."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    # --- the provider's evaluation ---------------------------------------------------------------

    @property
    def pending(self) -> Mapping[ResultKey, Pending]:
        """The pending results, by key (a read-only view)."""
        return MappingProxyType(self._pending)

    def get(self, key: ResultKey) -> Pending | None:
        """The pending result of ``key``, if tracked."""
        return self._pending.get(key)

    @property
    def budget(self) -> Budget:
        """B(t), as the provider's last evaluation set it."""
        return self._budget

    def set_budget(self, budget: Budget) -> None:
        """Take the provider's evaluation of B(t)."""
        self._budget = budget

    def start(self, now: float) -> None:
        """Start integrating the budget's time-weighted terms at ``now``."""
        self._tick.at = now

    def begin_denials(self) -> None:
        """Start a new replenishment: the denials of the last one are forgotten."""
        self._tick.denied = []

    def deny(self, key: ResultKey) -> None:
        """Record that B(t) denied ``key`` protection in this replenishment (evidence)."""
        self._tick.denied.append(key)

    async def release_all(self) -> None:
        """End every lease (released) and forget every pending result (shutdown)."""
        await self.drain_handoffs()
        for pending in list(self._pending.values()):
            await self.end_lease(pending, LeaseState.RELEASED)
        self._pending.clear()

    # --- results and leases ------------------------------------------------------------------
    @property
    def protected(self) -> int:
        """U(t): distinct blocks referenced by live leases."""
        return len(self.protected_blocks())

    def protected_blocks(self) -> frozenset[int]:
        """The blocks referenced by live leases."""
        held = [p.lease.blocks for p in self._pending.values() if p.held and p.lease]
        return frozenset().union(*held) if held else frozenset()

    async def track(self, key: ResultKey, history: str, payload_digest: str) -> Pending:
        """Start tracking a pending result with the resident prefix of its history."""
        if not history:
            raise InvalidArgument("history", "must not be empty")
        ids = await token_ids(self._tokenize, history)
        prefix = await self.port.resident(ids)
        pending = Pending(key, self._clock(), next(self._ids), ids, payload_digest, prefix,
                           cold=not prefix.block_ids)
        self._pending[key] = pending
        return pending

    def describe(self, p: Pending) -> Descriptor:
        """The sender's descriptor of a pending result (its live lease's record, if any)."""
        lease = self._lease_record(p, self._clock(), self._exclusive()) if p.held else None
        size = self.port.lease_block_size
        return Descriptor(p.key, p.prefix.blocks, p.prefix.blocks * size, p.prefix.digest, lease)

    async def grant(self, p: Pending, ttl_s: float | None = None) -> bool:
        """Lease the whole resident prefix of ``p`` or nothing; True when the engine took it."""
        lease_id = f"{self.engine_id}/{p.key}/{next(self._ids)}"
        if not p.prefix.block_ids or not await self.port.acquire(
                lease_id, p.prefix.block_ids, p.prefix.digest):
            return False
        now = self._clock()
        first = p.lease is None
        granted = now if first else p.lease.granted_at  # type: ignore[union-attr]
        deadline = now + ttl_s if ttl_s is not None else granted + self.settings.lifetime_s
        sequence = 0 if first else p.lease.sequence  # type: ignore[union-attr]
        p.lease = Lease(lease_id, frozenset(p.prefix.block_ids), p.prefix.block_ids, granted,
                         deadline, sequence=sequence)
        self._by_lease[lease_id] = p
        self.stats.grants += first
        self.stats.regrants += not first
        self.stats.added_refs += len(p.prefix.block_ids)
        self._outstanding[lease_id] = len(p.prefix.block_ids)
        if self.settings.spec.budgeted and self.protected > self._budget.target:
            self.stats.grants_over_target += 1
        self._emit_lease(p, now)
        return True

    async def drain_handoffs(self) -> None:
        """Retire and forget the results whose leases the engine handed to their continuation."""
        for handoff in await self.port.handoffs():
            if not handoff.owned:
                self.stats.handoffs_unowned += 1
                continue
            self.stats.handoffs += 1
            self.stats.handoffs_at_bind += handoff.at_bind
            self.account_release(handoff.lease_id)
            p = self._by_lease.get(handoff.lease_id)
            if p is not None and p.lease is not None and p.lease.lease_id == handoff.lease_id:
                self.retire(p, LeaseState.HANDED_OFF)
                self.forget(p)

    def account_release(self, lease_id: str) -> None:
        """Count a lease's references as released once, whichever path released them."""
        self.stats.released_refs += self._outstanding.pop(lease_id, 0)

    async def end_lease(self, p: Pending, state: LeaseState) -> None:
        """Release a live lease of ``p`` on the engine and retire it in ``state``."""
        if p.held and p.lease is not None:
            if await self.port.release(p.lease.lease_id):
                self.account_release(p.lease.lease_id)
            self.retire(p, state)

    def retire(self, p: Pending, state: LeaseState) -> None:
        """Mark the lease of ``p`` final in ``state`` and publish its record."""
        assert p.lease is not None
        p.lease.state = state
        self._emit_lease(p, self._clock())

    def forget(self, p: Pending) -> None:
        """Stop tracking ``p``."""
        self._pending.pop(p.key, None)
        self.tools.forget(p.key)
        if p.lease is not None:
            self._by_lease.pop(p.lease.lease_id, None)

    # --- records -----------------------------------------------------------------------------
    def integrate(self, now: float) -> None:
        """Add U(t) over the time since the last tick to the protection integral."""
        tick = self._tick
        self.stats.protection_block_s += tick.protected * max(0.0, now - tick.at)
        tick.at = now
        tick.protected = self.protected

    def publish(self, now: float, state: PoolState) -> BudgetRecord:
        """Publish a budget record for this evaluation and a record per live lease."""
        self._generation += 1
        protected = self._tick.protected = self.protected
        b = self._budget
        record = BudgetRecord(
            self.engine_id, self._generation, now, b.target, protected,
            max(b.target, protected), state.free_blocks, self.settings.headroom_blocks,
            b.demand, tuple(self._tick.denied), state.waiting, state.running, state.max_running,
            state.kappa_s)
        self.last_budget = record
        self._emit(record)
        exclusive = self._exclusive()
        for p in self._pending.values():
            if p.held:
                self._emit(self._lease_record(p, now, exclusive))
        return record

    def _emit_lease(self, p: Pending, now: float) -> None:
        self.integrate(now)
        self._emit(self._lease_record(p, now, self._exclusive()))

    def _exclusive(self) -> dict[str, int]:
        """E_i of every live lease."""
        return exclusive_blocks({q.lease.lease_id: q.lease.blocks for q in self._pending.values()
                                 if q.held and q.lease is not None})

    def _lease_record(self, p: Pending, now: float, exclusive: dict[str, int]) -> LeaseRecord:
        lease = p.lease
        assert lease is not None
        lease.sequence += 1
        return LeaseRecord(self.engine_id, p.key, lease.sequence, now, p.prefix.digest,
                           p.payload_digest, self._generation, lease.state, len(lease.blocks),
                           exclusive.get(lease.lease_id, 0), lease.granted_at, lease.deadline)

    def _emit(self, record: Record) -> None:
        for listener in list(self._listeners):
            with contextlib.suppress(Exception):
                listener(record)


__all__ = ["LeaseBook", "Record"]
