"""The engine-side LADS lease provider (``papers/lads.txt`` §3.4–3.7; DESIGN.md §3 engine_agent).

One per engine agent, over its backend's ``LeasePort``. It keeps the pending tool results of
that engine, and in ``lads`` mode protects their resident history prefixes with bounded leases:

* at readiness it evaluates the budget and tries a lease before the sender sees the descriptor;
* every ``interval_s`` (100 ms) it drains handoffs, expires leases at g_i + ℓ, revokes the newest
  leases while free blocks are below the headroom H, re-evaluates B(t), and replenishes: grants
  in ready-time, identity and version order, each for the whole resident prefix or not at all,
  only while U(t) + Δ_i ≤ B(t) and H blocks stay free;
* it publishes a budget record per evaluation and a record per live lease (versioned, stamped
  with the budget generation, E_i, g_i and d_i) to every listener.

``ttl`` mode is the Continuum baseline (Li et al. 2026, arXiv:2511.02230, §4 "KV cache
time-to-live"): pin a workflow's resident prefix when its tool call starts, for a TTL equal to a
per-tool moving average of the tool's duration, only when that estimate is under 2 s; no budget.
``none`` mode only answers the readiness lookup (the cache hint) and leases nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Sequence

from services.common.errors import FailedPrecondition, InvalidArgument, NotFound
from services.common.leases import (
    BudgetRecord,
    InventoryView,
    LeaseRecord,
    LeaseState,
    ResultKey,
)
from services.engine_agent.lease_budget import (
    Budget,
    Candidate,
    evaluate,
    exclusive_blocks,
    horizon,
    inventory_etas,
)
from services.engine_agent.lease_port import LeasePort, PoolState
from services.engine_agent.lease_state import (
    Descriptor,
    Lease,
    LeaseMode,
    LeaseSettings,
    LeaseStats,
    Pending,
    Tick,
    ToolTimes,
)

log = logging.getLogger(__name__)

Record = LeaseRecord | BudgetRecord
#: A lease within this of its deadline is ended now: early by at most a timer's resolution,
#: never late (a timer due sooner than the loop's clock resolution fires without time passing).
EXPIRY_SLACK_S = 2e-3


class LeaseProvider:
    """Prefix leases for one engine (module docstring)."""

    def __init__(self, port: LeasePort, *, engine_id: str, tokenize: Callable[[str], list[int]],
                 settings: LeaseSettings | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.port, self.engine_id, self.settings = port, engine_id, settings or LeaseSettings()
        self._tokenize, self._clock = tokenize, clock
        self._pending: dict[ResultKey, Pending] = {}
        self._by_lease: dict[str, Pending] = {}
        self._outstanding: dict[str, int] = {}  # lease id -> references not yet released
        self._view: InventoryView | None = None
        self._tools = ToolTimes(self.settings.ttl_alpha)
        self._listeners: list[Callable[[Record], None]] = []
        self._lock = asyncio.Lock()
        self._ids = itertools.count(1)
        self._generation = 0
        self._budget = Budget(0, 0, 0, 0)
        self._tick = Tick()
        self._task: asyncio.Task[None] | None = None
        self.stats = LeaseStats()
        self.last_budget: BudgetRecord | None = None

    # --- lifecycle ---------------------------------------------------------------------------
    def subscribe(self, listener: Callable[[Record], None]) -> Callable[[], None]:
        """Call ``listener`` with every record published; returns the unsubscribe function."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    async def start(self) -> None:
        """Start the periodic evaluation; idempotent."""
        if self._task is None:  # in every mode: budget records carry the engine's feedback
            self._tick.at = self._clock()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="leases")

    async def close(self) -> None:
        """Stop evaluating and release every lease this provider holds; idempotent."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task])
        async with self._lock:
            await self._drain_handoffs()
            for pending in list(self._pending.values()):
                await self._end_lease(pending, LeaseState.RELEASED)
            self._pending.clear()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._next_wait())
            try:
                await self.evaluate()
            except Exception:  # one bad evaluation must not end protection for good
                log.exception("lease evaluation failed")

    def _next_wait(self) -> float:
        """The evaluation interval, or less: a lease ends at its deadline, not up to 100 ms late."""
        deadlines = [p.lease.deadline for p in self._pending.values() if p.held and p.lease]
        wait = self.settings.interval_s
        if deadlines:
            wait = min(wait, max(0.0, min(deadlines) - self._clock()))
        return wait

    # --- the result lifecycle ----------------------------------------------------------------
    async def lookup(self, key: ResultKey, history: str) -> Descriptor:
        """Describe a history's resident prefix without tracking or leasing (a late resubmission
        of a result whose continuation the engine already has)."""
        prefix = await self.port.resident(tuple(self._tokenize(history)))
        size = self.port.lease_block_size
        return Descriptor(key, prefix.blocks, prefix.blocks * size, prefix.digest, None)

    async def tool_started(self, key: ResultKey, history: str, tool: str) -> bool:
        """A tool call began (``ttl`` mode pins now when the tool is expected under 2 s)."""
        self._tools.started(key, tool, self._clock())
        expected = self._tools.expected(tool)
        if self.settings.mode != "ttl" or expected is None:
            return False
        if expected >= self.settings.ttl_max_expected_s or key in self._pending:
            return False
        async with self._lock:
            pending = await self._track(key, history, "")
            return await self._grant(pending, ttl_s=expected)

    async def ready(self, key: ResultKey, history: str, payload_digest: str) -> Descriptor:
        """The tool result is ready: evaluate, try a lease, describe the prefix to the sender."""
        self._tools.finished(key, self._clock())
        async with self._lock:
            pending = self._pending.get(key)
            if pending is not None and pending.payload_digest not in ("", payload_digest):
                raise FailedPrecondition(f"result {key} is already pending with another payload")
            if pending is None:
                pending = await self._track(key, history, payload_digest)
            pending.payload_digest = payload_digest
            if self.settings.mode == "lads":
                await self._evaluate_locked()  # synchronously before a first offer
            return self._describe(pending)

    async def receipt(self, key: ResultKey, payload_digest: str, prefix_digest: str,
                      request_id: str) -> bool:
        """Complete receipt: bind the lease to the continuation's engine request.

        True when a held lease was bound; the continuation runs either way (never lost).
        """
        async with self._lock:
            pending = self._pending.get(key)
            if pending is None:
                raise NotFound(f"no pending result {key} on engine {self.engine_id}")
            if payload_digest != pending.payload_digest:
                raise FailedPrecondition(f"payload digest of {key} does not match its readiness")
            pending.request_id = request_id
            if not pending.held or prefix_digest != pending.prefix.digest:
                return False
            assert pending.lease is not None
            await self.port.bind(pending.lease.lease_id, request_id)
            return True

    async def allocated(self, key: ResultKey) -> None:
        """The continuation got its first allocation: the result is no longer pending."""
        async with self._lock:
            await self._drain_handoffs()
            pending = self._pending.get(key)
            if pending is None:
                return
            pending.allocated = True
            if not pending.held:
                self._forget(pending)

    async def withdraw(self, key: ResultKey) -> bool:
        """The result was cancelled (or its workflow died): release its lease, forget it."""
        async with self._lock:
            await self._drain_handoffs()
            pending = self._pending.get(key)
            if pending is None:
                return False
            await self._end_lease(pending, LeaseState.RELEASED)
            self._forget(pending)
            return True

    def sync_inventory(self, view: InventoryView) -> bool:
        """The sender's causal inventory (identity, phase, bytes); True when newer and taken."""
        if view.engine_id != self.engine_id:
            raise InvalidArgument("engine_id", f"inventory of {view.engine_id!r} sent to "
                                  f"{self.engine_id!r}")
        if self._view is not None and view.sequence <= self._view.sequence:
            return False
        self._view = view
        return True

    # --- evaluation --------------------------------------------------------------------------
    async def evaluate(self) -> BudgetRecord:
        """One periodic evaluation (handoffs, expiry, revocation, target, replenishment)."""
        async with self._lock:
            return await self._evaluate_locked()

    async def _evaluate_locked(self) -> BudgetRecord:
        cpu0 = time.process_time()
        now = self._clock()
        self._integrate(now)
        await self._drain_handoffs()
        await self._expire(now)
        state = await self.port.pool_state()
        if self.settings.mode == "lads":
            revoked = self.stats.revocations
            state = await self._revoke_for_headroom(state)
            await self._refresh_prefixes()
            self._budget = self._evaluate_budget(now, state)
            if self.stats.revocations == revoked and not self._short(state):
                state = await self._replenish(now, state)  # never grant what was just revoked
        record = self._publish(now, state)
        self.stats.cpu_s += time.process_time() - cpu0
        self.stats.evaluations += 1
        return record

    def _evaluate_budget(self, now: float, state: PoolState) -> Budget:
        etas = inventory_etas(self._view, waiting=state.waiting, running=state.running,
                              max_running=state.max_running, kappa_s=state.kappa_s)
        candidates = [self._candidate(p, now, etas) for p in self._pending.values()
                      if p.held or not (p.cold or p.allocated)]
        return evaluate(candidates, free_blocks=state.free_blocks, protected=self.protected,
                        headroom=self.settings.headroom_blocks)

    def _candidate(self, p: Pending, now: float, etas: dict[ResultKey, float]) -> Candidate:
        g = p.lease.granted_at if p.lease is not None else None
        blocks = p.lease.blocks if p.held and p.lease is not None else frozenset(
            p.prefix.block_ids)
        return Candidate(p.key, blocks, horizon(now, self.settings.lifetime_s, g),
                         etas.get(p.key, 0.0))

    async def _replenish(self, now: float, state: PoolState) -> PoolState:
        """FIFO grants under B(t) and the headroom; budget denials are recorded as evidence."""
        self._tick.denied = []
        free = state.free_blocks
        for p in sorted(self._pending.values(), key=lambda p: (p.ready_at, p.key, p.seq)):
            if p.held or p.cold or p.allocated or not p.prefix.block_ids:
                continue
            if p.lease is not None and (p.lease.state.final
                                        or p.lease.deadline <= now + EXPIRY_SLACK_S):
                continue
            blocks = frozenset(p.prefix.block_ids)
            protected = self._protected_blocks()  # once per candidate: grants change it
            delta = len(blocks - protected)
            takes = len((blocks & p.prefix.free) - protected)
            if len(protected) + delta > self._budget.target:
                self._tick.denied.append(p.key)
                self.stats.denials += 1
                continue
            if free - takes < self.settings.headroom_blocks:
                continue  # a headroom rejection: no denial evidence
            if await self._grant(p):
                free -= takes
                if p.request_id is not None and p.lease is not None:
                    await self.port.bind(p.lease.lease_id, p.request_id)
        return PoolState(free, state.total_blocks, state.waiting, state.running,
                         state.max_running, state.kappa_s)

    async def _grant(self, p: Pending, ttl_s: float | None = None) -> bool:
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
        if self.settings.mode == "lads" and self.protected > self._budget.target:
            self.stats.grants_over_target += 1
        self._emit_lease(p, now)
        return True

    async def _drain_handoffs(self) -> None:
        for handoff in await self.port.handoffs():
            if not handoff.owned:
                self.stats.handoffs_unowned += 1
                continue
            self.stats.handoffs += 1
            self._account_release(handoff.lease_id)
            p = self._by_lease.get(handoff.lease_id)
            if p is not None and p.lease is not None and p.lease.lease_id == handoff.lease_id:
                self._retire(p, LeaseState.HANDED_OFF)
                self._forget(p)

    def _account_release(self, lease_id: str) -> None:
        """Count a lease's references as released once, whichever path released them."""
        self.stats.released_refs += self._outstanding.pop(lease_id, 0)

    async def _expire(self, now: float) -> None:
        """End leases at g_i + ℓ (or the TTL); forget results that are over or abandoned."""
        for p in list(self._pending.values()):
            due = p.lease is not None and p.lease.deadline <= now + EXPIRY_SLACK_S
            if due and p.lease is not None and not p.lease.state.final:
                if p.held and await self.port.release(p.lease.lease_id):
                    self._account_release(p.lease.lease_id)
                self._retire(p, LeaseState.EXPIRED)
                self.stats.expiries += 1
            over = p.allocated and not p.held
            if over or now - p.ready_at > self.settings.max_pending_s:
                await self._end_lease(p, LeaseState.RELEASED)
                self._forget(p)

    async def _revoke_for_headroom(self, state: PoolState) -> PoolState:
        """Revoke the newest leases while work waits on memory (only the leases' own refs).

        Work waits on memory when the engine's last admission lacked blocks, or when fewer than
        H blocks are free while requests wait.
        """
        live = sorted((p for p in self._pending.values() if p.held),
                      key=lambda p: p.lease.granted_at, reverse=True)  # type: ignore[union-attr]
        for p in live:
            if not self._short(state):
                break
            await self._end_lease(p, LeaseState.REVOKED)
            self.stats.revocations += 1
            state = await self.port.pool_state()
            if state.blocked_blocks and self._freed_enough(state):
                break
        return state

    def _short(self, state: PoolState) -> bool:
        return state.blocked_blocks > 0 or (
            state.waiting > 0 and state.free_blocks < self.settings.headroom_blocks)

    @staticmethod
    def _freed_enough(state: PoolState) -> bool:
        return state.free_blocks >= state.blocked_blocks

    async def _refresh_prefixes(self) -> None:
        for p in self._pending.values():
            if not (p.held or p.cold or p.allocated):
                p.prefix = await self.port.resident(p.token_ids)

    # --- helpers -----------------------------------------------------------------------------
    @property
    def protected(self) -> int:
        """U(t): distinct blocks referenced by live leases."""
        return len(self._protected_blocks())

    def _protected_blocks(self) -> frozenset[int]:
        held = [p.lease.blocks for p in self._pending.values() if p.held and p.lease]
        return frozenset().union(*held) if held else frozenset()

    async def _track(self, key: ResultKey, history: str, payload_digest: str) -> Pending:
        if not history:
            raise InvalidArgument("history", "must not be empty")
        ids = tuple(self._tokenize(history))
        prefix = await self.port.resident(ids)
        pending = Pending(key, self._clock(), next(self._ids), ids, payload_digest, prefix,
                           cold=not prefix.block_ids)
        self._pending[key] = pending
        return pending

    def _describe(self, p: Pending) -> Descriptor:
        lease = self._lease_record(p, self._clock(), self._exclusive()) if p.held else None
        size = self.port.lease_block_size
        return Descriptor(p.key, p.prefix.blocks, p.prefix.blocks * size, p.prefix.digest, lease)

    async def _end_lease(self, p: Pending, state: LeaseState) -> None:
        if p.held and p.lease is not None:
            if await self.port.release(p.lease.lease_id):
                self._account_release(p.lease.lease_id)
            self._retire(p, state)

    def _retire(self, p: Pending, state: LeaseState) -> None:
        assert p.lease is not None
        p.lease.state = state
        self._emit_lease(p, self._clock())

    def _forget(self, p: Pending) -> None:
        self._pending.pop(p.key, None)
        self._tools.forget(p.key)
        if p.lease is not None:
            self._by_lease.pop(p.lease.lease_id, None)

    def _integrate(self, now: float) -> None:
        tick = self._tick
        self.stats.protection_block_s += tick.protected * max(0.0, now - tick.at)
        tick.at = now
        tick.protected = self.protected

    def _publish(self, now: float, state: PoolState) -> BudgetRecord:
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
        self._integrate(now)
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

    def pending_keys(self) -> Sequence[ResultKey]:
        """Keys of the results this provider still tracks (diagnostics and tests)."""
        return list(self._pending)

    async def live_refs(self) -> dict[str, int]:
        """Blocks each live lease references, from the engine itself."""
        return await self.port.lease_refs()


__all__ = ["Descriptor", "LeaseMode", "LeaseProvider", "LeaseSettings", "LeaseStats"]
