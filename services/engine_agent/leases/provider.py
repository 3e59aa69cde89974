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

The TTL baselines pin without a budget. ``ttl`` is a simplified Continuum: pin a workflow's
resident prefix when its tool call starts, for the tool's moving-average duration (start to
readiness), only when that is under 2 s. ``continuum`` is Continuum as published
(``continuum.py`` says what we followed, file and function): pin at the call's finish (= the tool's
start) for τ* from its cost-benefit model over the tool's gaps from finish to the next request's
arrival at the engine, keep the pin while that request waits, end it at its allocation, and
under memory pressure with at most one request running release the pin with the latest
deadline; the engine's queue runs program-level FCFS (the sim's ``queue_policy: program``).
``fixed_ttl`` is the same with one fixed TTL (``ttl_s``, the sweep's). ``none`` mode only answers
the readiness lookup (the cache hint) and leases nothing.

This module holds the policy (when to grant, expire and revoke); its ``LeaseBook``
(``book.py``) holds the pending results, their leases and the records published about them.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Sequence

from services.common.values.errors import FailedPrecondition, InvalidArgument, NotFound, quoted
from services.common.values.leases import (
    KAPPA_CHUNK_TOKENS,
    BudgetRecord,
    InventoryView,
    LeaseState,
    ResultKey,
    engine_queue_delay,
)
from services.engine_agent.leases.book import LeaseBook, Record
from services.engine_agent.leases.budget import (
    Budget,
    Candidate,
    evaluate,
    horizon,
    inventory_etas,
)
from services.engine_agent.leases.continuum import MIN_PIN_S, GapBook, optimal_ttl, pin_price
from services.engine_agent.leases.port import LeasePort, PoolState
from services.engine_agent.leases.state import (
    Descriptor,
    LeaseMode,
    LeaseSettings,
    LeaseStats,
    Pending,
    Tokenize,
    token_ids,
)

log = logging.getLogger(__name__)

#: While evaluations keep failing (a lost engine), a line this often rather than every interval.
FAILURE_LOG_S = 30.0
#: A lease within this of its deadline is ended now: early by at most a timer's resolution,
#: never late (a timer due sooner than the loop's clock resolution fires without time passing).
EXPIRY_SLACK_S = 2e-3


class LeaseProvider:
    """Prefix leases for one engine (module docstring)."""

    def __init__(self, port: LeasePort, *, engine_id: str, tokenize: Tokenize,
                 settings: LeaseSettings | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.port, self.engine_id, self.settings = port, engine_id, settings or LeaseSettings()
        self._tokenize, self._clock = tokenize, clock
        self._book = LeaseBook(port, engine_id=engine_id, tokenize=tokenize,
                               settings=self.settings, clock=clock)
        self._view: InventoryView | None = None
        self._gaps = GapBook()  # Continuum's gap samples (finish to next arrival), per tool
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    # --- lifecycle ---------------------------------------------------------------------------
    def subscribe(self, listener: Callable[[Record], None]) -> Callable[[], None]:
        """Call ``listener`` with every record published; returns the unsubscribe function."""
        return self._book.subscribe(listener)

    async def start(self) -> None:
        """Start the periodic evaluation; idempotent."""
        if self._task is None:  # in every mode: budget records carry the engine's feedback
            self._book.start(self._clock())
            self._task = asyncio.get_running_loop().create_task(self._run(), name="leases")

    async def close(self) -> None:
        """Stop evaluating and release every lease this provider holds; idempotent."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task])
        async with self._lock:
            await self._book.release_all()

    async def _run(self) -> None:
        failing_since: float | None = None
        last_log = -math.inf
        while True:
            await asyncio.sleep(self._next_wait())
            try:
                await self.evaluate()
            except Exception as exc:  # one bad evaluation must not end protection for good
                now = time.monotonic()
                if failing_since is None:
                    failing_since = now
                    log.exception("lease evaluation failed (retrying every %.2f s)",
                                  self.settings.interval_s)
                elif now - last_log >= FAILURE_LOG_S:  # a lost engine: one line a while
                    log.warning("lease evaluation still failing after %.0f s: %s",
                                now - failing_since, exc)
                else:
                    continue
                last_log = now
            else:
                if failing_since is not None:
                    log.info("lease evaluation recovered after %.1f s",
                             time.monotonic() - failing_since)
                failing_since = None

    def _next_wait(self) -> float:
        """The evaluation interval, or less: a lease ends at its deadline, not up to 100 ms late."""
        deadlines = [p.lease.deadline for p in self._book.pending.values()
                     if p.held and p.lease and not self._postponed(p)]
        wait = self.settings.interval_s
        if deadlines:
            wait = min(wait, max(0.0, min(deadlines) - self._clock()))
        return wait

    # --- the result lifecycle ----------------------------------------------------------------
    async def lookup(self, key: ResultKey, history: str) -> Descriptor:
        """Describe a history's resident prefix without tracking or leasing (a late resubmission
        of a result whose continuation the engine already has)."""
        prefix = await self.port.resident(await token_ids(self._tokenize, history))
        size = self.port.lease_block_size
        return Descriptor(key, prefix.blocks, prefix.blocks * size, prefix.digest, None)

    async def tool_started(self, key: ResultKey, history: str, tool: str) -> bool:
        """A tool call began (its model call finished): the TTL modes may pin now."""
        now = self._clock()
        self._book.tools.started(key, tool, now)
        if self.settings.spec.pins:
            self._gaps.finished(key, tool, now)
            async with self._lock:
                return await self._pin(key, history, tool)
        expected = self._book.tools.expected(tool)
        if not self.settings.spec.expected_ttl or expected is None:
            return False
        if expected >= self.settings.ttl_max_expected_s or key in self._book.pending:
            return False
        async with self._lock:
            pending = await self._book.track(key, history, "")
            return await self._book.grant(pending, ttl_s=expected)

    async def _pin(self, key: ResultKey, history: str, tool: str) -> bool:
        """Continuum's pin (``continuum``: τ*; ``fixed_ttl``: ``ttl_s``); True when pinned."""
        if key in self._book.pending:
            return False
        pending = await self._book.track(key, history, "")
        tau = self.settings.ttl_s
        if self.settings.spec.optimal_ttl:
            state = await self.port.pool_state()
            price = pin_price(
                prefix_blocks=pending.prefix.blocks, block_size=self.port.lease_block_size,
                pool_blocks=state.total_blocks, waiting=state.waiting, running=state.running,
                kappa_s=state.kappa_s, chunk_tokens=KAPPA_CHUNK_TOKENS,
                queue_s=engine_queue_delay(state.waiting, state.running, state.max_running,
                                           state.kappa_s))
            tau = optimal_ttl(self._gaps.gaps(tool), price, max_ttl_s=self.settings.ttl_max_s)
        self.stats.pin_decisions += 1
        if tau <= MIN_PIN_S or not await self._book.grant(pending, ttl_s=tau):
            self._book.forget(pending)  # tracked again at readiness
            return False
        self.stats.pinned_ttl_s += tau
        return True

    async def ready(self, key: ResultKey, history: str, payload_digest: str) -> Descriptor:
        """The tool result is ready: evaluate, try a lease, describe the prefix to the sender."""
        self._book.tools.finished(key, self._clock())
        async with self._lock:
            pending = self._book.get(key)
            if pending is not None and pending.payload_digest not in ("", payload_digest):
                raise FailedPrecondition(f"result {key} is already pending with another payload")
            if pending is None:
                pending = await self._book.track(key, history, payload_digest)
            pending.payload_digest = payload_digest
            if self.settings.spec.budgeted:
                await self._evaluate_locked()  # synchronously before a first offer
            return self._book.describe(pending)

    async def receipt(self, key: ResultKey, payload_digest: str, prefix_digest: str,
                      request_id: str) -> bool:
        """Complete receipt: bind the lease to the continuation's engine request.

        True when a held lease was bound; the continuation runs either way (never lost).
        """
        async with self._lock:
            pending = self._book.get(key)
            if pending is None:
                raise NotFound(f"no pending result {key} on engine {self.engine_id}")
            if payload_digest != pending.payload_digest:
                raise FailedPrecondition(f"payload digest of {key} does not match its readiness")
            pending.request_id = request_id
            if self.settings.spec.pins:
                self._gaps.arrived(key, self._clock())
                self.stats.pins_reused += pending.held
            if not pending.held or prefix_digest != pending.prefix.digest:
                return False
            assert pending.lease is not None
            await self.port.bind(pending.lease.lease_id, request_id)
            return True

    async def allocated(self, key: ResultKey) -> None:
        """The continuation got its first allocation: the result is no longer pending."""
        async with self._lock:
            await self._book.drain_handoffs()
            pending = self._book.get(key)
            if pending is None:
                return
            pending.allocated = True
            if not pending.held:
                self._book.forget(pending)

    async def withdraw(self, key: ResultKey) -> bool:
        """The result was cancelled (or its workflow died): release its lease, forget it."""
        async with self._lock:
            await self._book.drain_handoffs()
            pending = self._book.get(key)
            if pending is None:
                return False
            await self._book.end_lease(pending, LeaseState.RELEASED)
            self._book.forget(pending)
            return True

    def sync_inventory(self, view: InventoryView) -> bool:
        """The sender's causal inventory (identity, phase, bytes); True when newer and taken."""
        if view.engine_id != self.engine_id:
            raise InvalidArgument("engine_id", f"inventory of {quoted(view.engine_id)} sent to "
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
        self._book.integrate(now)
        await self._book.drain_handoffs()
        await self._expire(now)
        state = await self.port.pool_state()
        if self.settings.spec.pins:
            state = await self._unpin_for_memory(state)
        if self.settings.spec.budgeted:
            revoked = self.stats.revocations
            state = await self._revoke_for_headroom(state)
            await self._refresh_prefixes()
            self._book.set_budget(self._evaluate_budget(now, state))
            if self.stats.revocations == revoked and not self._short(state):
                state = await self._replenish(now, state)  # never grant what was just revoked
        record = self._book.publish(now, state)
        self.stats.cpu_s += time.process_time() - cpu0
        self.stats.evaluations += 1
        return record

    def _evaluate_budget(self, now: float, state: PoolState) -> Budget:
        etas = inventory_etas(self._view, waiting=state.waiting, running=state.running,
                              max_running=state.max_running, kappa_s=state.kappa_s)
        candidates = [self._candidate(p, now, etas) for p in self._book.pending.values()
                      if p.held or not (p.cold or p.allocated)]
        budget = evaluate(candidates, free_blocks=state.free_blocks, protected=self.protected,
                          headroom=self.settings.headroom_blocks)
        if self.settings.unbudgeted:
            return Budget(budget.demand, budget.safe, state.total_blocks, state.total_blocks)
        return budget

    def _candidate(self, p: Pending, now: float, etas: dict[ResultKey, float]) -> Candidate:
        g = p.lease.granted_at if p.lease is not None else None
        blocks = p.lease.blocks if p.held and p.lease is not None else frozenset(
            p.prefix.block_ids)
        return Candidate(p.key, blocks, horizon(now, self.settings.lifetime_s, g),
                         etas.get(p.key, 0.0))

    async def _replenish(self, now: float, state: PoolState) -> PoolState:
        """FIFO grants under B(t) and the headroom; budget denials are recorded as evidence."""
        self._book.begin_denials()
        free = state.free_blocks
        for p in sorted(self._book.pending.values(), key=lambda p: (p.ready_at, p.key, p.seq)):
            if p.held or p.cold or p.allocated or not p.prefix.block_ids:
                continue
            if p.lease is not None and (p.lease.state.final
                                        or p.lease.deadline <= now + EXPIRY_SLACK_S):
                continue
            blocks = frozenset(p.prefix.block_ids)
            protected = self._book.protected_blocks()  # once per candidate: grants change it
            delta = len(blocks - protected)
            takes = len((blocks & p.prefix.free) - protected)
            if len(protected) + delta > self._book.budget.target:
                self._book.deny(p.key)
                self.stats.denials += 1
                continue
            if free - takes < self.settings.headroom_blocks:
                continue  # a headroom rejection: no denial evidence
            if await self._book.grant(p):
                free -= takes
                if p.request_id is not None and p.lease is not None:
                    await self.port.bind(p.lease.lease_id, p.request_id)
        return PoolState(free, state.total_blocks, state.waiting, state.running,
                         state.max_running, state.kappa_s)

    async def _expire(self, now: float) -> None:
        """End leases at g_i + ℓ (or the TTL); forget results that are over or abandoned."""
        for p in list(self._book.pending.values()):
            due = p.lease is not None and p.lease.deadline <= now + EXPIRY_SLACK_S
            if due and self._postponed(p):
                due = False  # Continuum keeps a pin while its program's request waits
            if due and p.lease is not None and not p.lease.state.final:
                if p.held and await self.port.release(p.lease.lease_id):
                    self._book.account_release(p.lease.lease_id)
                self._book.retire(p, LeaseState.EXPIRED)
                self.stats.expiries += 1
            over = p.allocated and not p.held
            if over or now - p.ready_at > self.settings.max_pending_s:
                await self._book.end_lease(p, LeaseState.RELEASED)
                self._book.forget(p)

    async def _revoke_for_headroom(self, state: PoolState) -> PoolState:
        """Revoke the newest leases while work waits on memory (only the leases' own refs).

        Work waits on memory when the engine's last admission lacked blocks, or when fewer than
        H blocks are free while requests wait.
        """
        live = sorted((p for p in self._book.pending.values() if p.held),
                      key=lambda p: p.lease.granted_at, reverse=True)  # type: ignore[union-attr]
        for p in live:
            if not self._short(state):
                break
            state = await self._revoke(p)
            if state.blocked_blocks and self._freed_enough(state):
                break
        return state

    async def _revoke(self, p: Pending) -> PoolState:
        """Revoke the live lease of ``p`` (only its own references); the pool after it."""
        await self._book.end_lease(p, LeaseState.REVOKED)
        self.stats.revocations += 1
        return await self.port.pool_state()

    def _postponed(self, p: Pending) -> bool:
        """A Continuum pin whose program's next request waits in the engine: it outlives its
        deadline until that request is allocated (or the pin is released for memory)."""
        return (self.settings.spec.pins and p.request_id is not None
                and not p.allocated)

    async def _unpin_for_memory(self, state: PoolState) -> PoolState:
        """Continuum under memory pressure: while waiting work lacks blocks and at most one
        request runs, release the pin with the latest deadline."""
        lacking, free = state.blocked_blocks, state.free_blocks  # as of the engine's last step
        live = sorted((p for p in self._book.pending.values() if p.held),
                      key=lambda p: p.lease.deadline, reverse=True)  # type: ignore[union-attr]
        for p in live:
            if not (lacking > 0 and state.running <= 1 and state.free_blocks - free < lacking):
                break
            state = await self._revoke(p)
        return state

    def _short(self, state: PoolState) -> bool:
        return state.blocked_blocks > 0 or (
            state.waiting > 0 and state.free_blocks < self.settings.headroom_blocks)

    @staticmethod
    def _freed_enough(state: PoolState) -> bool:
        return state.free_blocks >= state.blocked_blocks

    async def _refresh_prefixes(self) -> None:
        for p in self._book.pending.values():
            if not (p.held or p.cold or p.allocated):
                p.prefix = await self.port.resident(p.token_ids)

    # --- diagnostics -------------------------------------------------------------------------
    @property
    def protected(self) -> int:
        """U(t): distinct blocks referenced by live leases."""
        return self._book.protected

    @property
    def stats(self) -> LeaseStats:
        """The provider's counters."""
        return self._book.stats

    @property
    def last_budget(self) -> BudgetRecord | None:
        """The budget record of the last evaluation."""
        return self._book.last_budget

    def pending_keys(self) -> Sequence[ResultKey]:
        """Keys of the results this provider still tracks (diagnostics and tests)."""
        return list(self._book.pending)

    async def live_refs(self) -> dict[str, int]:
        """Blocks each live lease references, from the engine itself."""
        return await self.port.lease_refs()


__all__ = ["Descriptor", "LeaseMode", "LeaseProvider", "LeaseSettings", "LeaseStats"]
