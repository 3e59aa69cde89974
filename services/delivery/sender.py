"""The delivery sender: one inventory, paced link and lease book per engine, one asyncio loop.

Whenever an engine's transport window has room and its inventory holds a frame, the sender asks
the engine's policy for the next frame, commits it to the link (s_i), and schedules its complete
receipt at c_i, when ``receive`` gets the frame (LADS §2.1). The loop sleeps on an event set by
submissions, records, completions and receipts, and on a timer while a policy holds; it never
polls. Timestamps come from the injected ``clock`` and waiting from ``asyncio.sleep``, so a
virtual clock (``clock=loop.time``) replays a run exactly.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from services.common.values.leases import (
    BudgetRecord,
    InventoryEntry,
    InventoryView,
    LeaseRecord,
    ResultKey,
)
from services.delivery.frames import Frame, Inventory
from services.delivery.link import DEFAULT_FRAMING_BYTES, DEFAULT_WINDOW, PacedLink
from services.delivery.policies import Choice, DecisionView, DeliveryPolicy, make_policy
from services.delivery.records import RecordBook

log = logging.getLogger(__name__)

Receive = Callable[[Frame], Awaitable[None]]
InventoryListener = Callable[[InventoryView], None]
PolicyFactory = Callable[[], DeliveryPolicy]

#: Margin past a budget's staleness time before a held engine is re-decided: timers may fire up
#: to one clock resolution early, and a re-check that still sees the budget fresh would re-arm.
HOLD_MARGIN_S = 0.002


@dataclass(frozen=True, slots=True)
class FrameTimes:
    """One frame's delivery timestamps: ready r_i, commit s_i, complete receipt c_i, and whether
    its commitment was a quota-turnover promotion."""

    ready: float
    commit: float
    receipt: float
    promoted: bool = False


@dataclass(frozen=True, slots=True)
class LaneStats:
    """Per-engine counters: commitments, promotions, holds, receive errors, decision CPU."""

    committed: int = 0
    promotions: int = 0
    holds: int = 0
    receive_errors: int = 0
    decision_cpu_s: float = 0.0


class _Lane:
    """One engine's inventory, link, lease book, policy and counters."""

    __slots__ = ("engine_id", "inventory", "link", "book", "policy", "sequence", "stats")

    def __init__(self, engine_id: str, link: PacedLink, book: RecordBook,
                 policy: DeliveryPolicy) -> None:
        self.engine_id = engine_id
        self.inventory = Inventory()
        self.link = link
        self.book = book
        self.policy = policy
        self.sequence = 0
        self.stats = LaneStats()

    def count(self, **deltas: float) -> None:
        """Add ``deltas`` to the named counters."""
        s = self.stats
        self.stats = replace(s, **{f: getattr(s, f) + d for f, d in deltas.items()})


class Sender:
    """Orders ready tool-result frames onto per-engine paced links (LADS §3)."""

    def __init__(self, policy: str | PolicyFactory, *, link_bytes_per_s: float,
                 receive: Receive, framing_bytes: int = DEFAULT_FRAMING_BYTES,
                 window: int = DEFAULT_WINDOW, clock: Callable[[], float] = time.time,
                 inventory_listener: InventoryListener | None = None,
                 max_record_age_s: float = 1.0) -> None:
        self._factory: PolicyFactory = ((lambda: make_policy(policy)) if isinstance(policy, str)
                                        else policy)
        probe = self._factory()
        self.policy_name: str = probe.name
        self.leases: str = probe.leases  # the engine-side lease mode the policy needs
        PacedLink(link_bytes_per_s, framing_bytes, window)  # fail fast, naming the bad field
        RecordBook("", max_age_s=max_record_age_s, clock=clock)
        self._link_args = (link_bytes_per_s, framing_bytes, window)
        self._max_age = max_record_age_s
        self._clock = clock
        self._receive = receive
        self._listener = inventory_listener
        self._lanes: dict[str, _Lane] = {}
        self._pending: dict[ResultKey, str] = {}  # uncommitted key -> engine
        self._running: dict[ResultKey, str] = {}  # committed, continuation not completed
        self.timeline: dict[ResultKey, FrameTimes] = {}
        self._floor = -math.inf  # latest receipt processed: time never runs behind it
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._receipts: set[asyncio.Task[None]] = set()
        self._closed = False

    # -- inputs ----------------------------------------------------------------------------

    def submit(self, frame: Frame) -> bool:
        """Add a ready frame; False if it is already held, committed or the sender is closed."""
        if self._closed or frame.key in self.timeline:
            return False
        engine = self._pending.get(frame.key)
        if engine is not None and engine != frame.engine_id:
            raise ValueError(f"engine_id {frame.engine_id!r} differs from {engine!r} for "
                             f"{frame.key}")
        lane = self._lane(frame.engine_id)
        if not lane.inventory.add(frame):
            return False
        self._pending[frame.key] = frame.engine_id
        self._changed(lane)
        return True

    def withdraw(self, key: ResultKey) -> bool:
        """Drop an uncommitted frame (its result was cancelled); False if none is held."""
        engine = self._pending.pop(key, None)
        if engine is None:
            return False
        lane = self._lanes[engine]
        lane.inventory.remove(key)
        lane.book.forget(key)
        self._changed(lane)
        return True

    def observe(self, record: LeaseRecord | BudgetRecord) -> bool:
        """Hand an engine's lease or budget record to its lease book; True if accepted."""
        book = self._lane(record.engine_id).book
        if isinstance(record, BudgetRecord):
            accepted = book.observe_budget(record)
        else:
            accepted = book.observe_lease(record)
        self._wake.set()
        return accepted

    def forget(self, key: ResultKey) -> FrameTimes | None:
        """Drop a delivered key's timestamps (so it may be submitted again); returns them."""
        return self.timeline.pop(key, None)

    def abandon(self, key: ResultKey) -> bool:
        """A committed key's continuation failed: free its policy state without an output."""
        engine = self._running.pop(key, None)
        if engine is None:
            return False
        on_abandon = getattr(self._lanes[engine].policy, "on_abandon", None)
        if on_abandon is not None:
            on_abandon(key)
        self._wake.set()
        return True

    def completed(self, key: ResultKey, output_tokens: int) -> bool:
        """The continuation of committed ``key`` finished; False for an unknown key."""
        engine = self._running.pop(key, None)
        if engine is None:
            return False
        self._lanes[engine].policy.on_complete(key, output_tokens)
        self._wake.set()
        return True

    # -- views -----------------------------------------------------------------------------

    def inventory_view(self, engine_id: str) -> InventoryView:
        """The causal inventory the engine's lease provider replenishes from."""
        lane = self._lane(engine_id)
        now = self._now()
        entries = [InventoryEntry(f.key, f.ready_at, f.size, False) for f in lane.inventory]
        entries += [InventoryEntry(t.frame.key, t.frame.ready_at, t.frame.size, True)
                    for t in lane.link.in_flight(now)]
        entries.sort(key=lambda e: (e.ready_at, e.key))
        return InventoryView(engine_id, lane.sequence, self._clock(), tuple(entries),
                             math.ceil(lane.link.backlog_bytes(now)), lane.link.bytes_per_s,
                             lane.link.framing_bytes)

    @property
    def stats(self) -> dict[str, LaneStats]:
        """Per-engine counters."""
        return {engine: lane.stats for engine, lane in self._lanes.items()}

    @property
    def records_refused(self) -> dict[str, dict[str, int]]:
        """Per engine, its lease and budget records refused, by reason (``RecordBook``)."""
        return {engine: dict(lane.book.rejected) for engine, lane in self._lanes.items()}

    @property
    def queued(self) -> dict[str, int]:
        """Per engine, the ready frames not yet committed to its link."""
        return {engine: len(lane.inventory) for engine, lane in self._lanes.items()}

    def policy_of(self, engine_id: str) -> DeliveryPolicy:
        """The policy instance deciding for ``engine_id``'s link."""
        return self._lane(engine_id).policy

    # -- lifecycle -------------------------------------------------------------------------

    async def run(self) -> None:
        """Start the decision loop (an owned task); idempotent."""
        if self._closed:
            raise RuntimeError("sender is closed")
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="delivery-sender")
            self._task.add_done_callback(_log_crash)

    async def close(self) -> None:
        """Stop the loop and cancel pending receipts; idempotent."""
        self._closed = True
        tasks = [t for t in (self._task, *self._receipts) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._receipts.clear()

    async def __aenter__(self) -> Sender:
        await self.run()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- the loop --------------------------------------------------------------------------

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._wake.clear()
            expiry = self._dispatch()
            timer = None
            if expiry is not None:
                timer = loop.call_later(max(0.0, expiry - self._clock()), self._wake.set)
            try:
                await self._wake.wait()
            finally:
                if timer is not None:
                    timer.cancel()

    def _dispatch(self) -> float | None:
        """Commit on every engine with room; the earliest hold expiry, if any engine holds."""
        expiries = [e for lane in list(self._lanes.values())
                    if (e := self._drain(lane)) is not None]
        return min(expiries, default=None)

    def _drain(self, lane: _Lane) -> float | None:
        while lane.inventory and lane.link.has_room(now := self._now()):
            choice = self._decide(lane, now)
            if choice is None:
                lane.count(holds=1)
                return _hold_expiry(lane.book, now)
            self._commit(lane, choice, now)
        return None

    def _decide(self, lane: _Lane, now: float) -> Choice | None:
        view = DecisionView(now, lane.inventory.frames(), lane.link, lane.book)
        started = time.process_time()
        try:
            return lane.policy.choose(view)
        finally:
            lane.count(decision_cpu_s=time.process_time() - started)

    def _commit(self, lane: _Lane, choice: Choice, now: float) -> None:
        frame = choice.frame
        if lane.inventory.get(frame.key) is not frame:
            raise RuntimeError(f"policy {lane.policy.name} chose {frame.key}, not in inventory")
        lane.policy.on_commit(choice)
        receipt = lane.link.commit(frame, now)
        lane.inventory.remove(frame.key)
        lane.book.forget(frame.key)
        del self._pending[frame.key]
        self._running[frame.key] = lane.engine_id
        self.timeline[frame.key] = FrameTimes(frame.ready_at, now, receipt, choice.promoted)
        lane.count(committed=1, promotions=int(choice.promoted))
        self._changed(lane)
        task = asyncio.create_task(self._deliver(lane, frame, receipt),
                                   name=f"delivery-receipt-{frame.key}")
        self._receipts.add(task)
        task.add_done_callback(self._receipts.discard)

    async def _deliver(self, lane: _Lane, frame: Frame, receipt: float) -> None:
        delay = receipt - self._clock()
        if delay > 0:
            await asyncio.sleep(delay)
        self._floor = max(self._floor, receipt)
        self._changed(lane)
        try:
            await self._receive(frame)
        except Exception:  # a receiver fault loses this frame, never the loop
            lane.count(receive_errors=1)
            log.exception("receive failed for %s", frame.key,
                          extra={"engine_id": lane.engine_id, "key": str(frame.key)})

    # -- helpers ---------------------------------------------------------------------------

    def _now(self) -> float:
        # A receipt timer may fire a hair before c_i on the loop's clock; the frame has still
        # been received, so decisions never see time run behind the last processed receipt.
        return max(self._clock(), self._floor)

    def _lane(self, engine_id: str) -> _Lane:
        lane = self._lanes.get(engine_id)
        if lane is None:
            rate, framing, window = self._link_args
            book = RecordBook(engine_id, max_age_s=self._max_age, clock=self._clock)
            lane = _Lane(engine_id, PacedLink(rate, framing, window), book, self._factory())
            self._lanes[engine_id] = lane
        return lane

    def _changed(self, lane: _Lane) -> None:
        lane.sequence += 1
        self._wake.set()
        if self._listener is not None:
            try:
                self._listener(self.inventory_view(lane.engine_id))
            except Exception:
                log.exception("inventory listener failed", extra={"engine_id": lane.engine_id})


def _hold_expiry(book: RecordBook, now: float) -> float | None:
    """When a hold lifts by itself: the budget record that justified it goes stale."""
    expiry = book.budget_expiry()
    if expiry is None or expiry + HOLD_MARGIN_S <= now:
        return None  # nothing will change on its own: wait for the next event
    return expiry + HOLD_MARGIN_S


def _log_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("delivery sender loop crashed", exc_info=task.exception())


__all__ = ["HOLD_MARGIN_S", "FrameTimes", "LaneStats", "Sender"]
