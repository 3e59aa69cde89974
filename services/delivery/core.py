"""The delivery core: tool results in, continuations' outputs back (DESIGN.md §4, LADS §2.1).

``DeliveryCore`` turns a submitted tool result into a frame for the ``Sender`` and the sender's
receipt into the engine's ``ReceiveResult``. It is idempotent by result key: the first submission
asks the engine to describe the history's resident prefix (which may lease it) and hands the
frame to the sender; a resubmission with the same payload waits for that same delivery and never
runs the continuation twice; another payload for the same key is refused. Finished deliveries are
remembered (bounded) so a resubmission after completion gets the same answer. A delivery that
fails (the engine unreachable, a deadline) is forgotten, so the harness, which still holds its
observation, can submit it again. No gRPC here: the engines sit behind ``ResultEnginePort``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from opentelemetry.context import Context

from services.common.values.errors import (
    DynbranchError,
    FailedPrecondition,
    InvalidArgument,
    ResourceExhausted,
    Unavailable,
    quoted,
)
from services.common.values.generation import FinishReason, GenerationRequest, Timings, Usage
from services.common.values.leases import (
    BudgetRecord,
    InventoryView,
    LeaseRecord,
    ResultKey,
    digest,
)
from services.common.values.tracing import current_trace, within
from services.delivery.frames import Frame
from services.delivery.sender import InventoryListener, Receive, Sender

log = logging.getLogger(__name__)

#: Finished deliveries remembered for resubmissions (the engine remembers as many receipts).
MAX_REMEMBERED = 4096
#: Results pending at once by default (``DeliverySettings.max_pending_results``).
MAX_PENDING = 4096

Observe = Callable[[LeaseRecord | BudgetRecord], bool]
SenderFactory = Callable[..., Sender]  # called with receive= and inventory_listener=


@dataclass(frozen=True, slots=True)
class Readiness:
    """What the engine said at readiness: the cache hint, and the continuation's prompt size."""

    resident_blocks: int
    resident_tokens: int
    prefix_digest: str
    prompt_tokens: int


@dataclass(frozen=True, slots=True)
class Received:
    """The continuation's end as the engine reported it at complete receipt."""

    text: str
    reason: FinishReason
    usage: Usage
    timings: Timings
    bound: bool
    receipt_to_allocation_s: float


@dataclass(frozen=True, slots=True)
class ToolCompletion:
    """One completed tool result and the continuation it resumes."""

    key: ResultKey
    engine_id: str  # empty: the only engine
    history: str
    observation: bytes = field(repr=False)
    tool: str
    continuation: GenerationRequest = field(repr=False)


@dataclass(frozen=True, slots=True)
class Delivered:
    """A delivery's answer: the continuation's end and where its time went (LADS §2.1)."""

    received: Received
    engine_id: str
    sender_wait_s: float  # s − r
    transfer_s: float  # c − s
    promoted: bool = False  # its commitment departed from Cache-first (quota turnover)


class ResultEnginePort(Protocol):
    """One engine agent's LADS calls, as the core needs them (``EngineLink`` over gRPC)."""

    engine_id: str

    def start(self, observe: Observe) -> None:
        """Follow the engine's lease records into ``observe``."""
        ...

    def push_inventory(self, view: InventoryView) -> None:
        """The sender's inventory changed; send the newest view soon."""
        ...

    async def check(self, continuation: GenerationRequest) -> None:
        """Refuse a continuation the engine would refuse (model, output limit)."""
        ...

    async def tool_started(self, key: ResultKey, history: str, tool: str) -> bool:
        """ToolStarted; True when the engine pinned the prefix."""
        ...

    async def result_ready(self, key: ResultKey, history: str, payload_digest: str,
                           prompt: str) -> Readiness:
        """ResultReady (may lease the prefix) and the continuation prompt's size."""
        ...

    async def receive(self, key: ResultKey, payload_digest: str, prefix_digest: str,
                      continuation: GenerationRequest) -> Received:
        """ReceiveResult: register the continuation and wait for its end."""
        ...

    async def withdraw(self, key: ResultKey) -> bool:
        """WithdrawResult: release the pending result's lease."""
        ...


@dataclass(slots=True)
class _Entry:
    payload_digest: str
    engine_id: str
    future: asyncio.Future[Delivered]
    task: asyncio.Task[None] | None = None  # set while the engine describes the prefix
    #: The submitting call's trace context: the sender's receipt runs ReceiveResult in it.
    trace: Context | None = None


class DeliveryCore:
    """Idempotent tool-result delivery over a ``Sender`` and one ``ResultEnginePort`` per engine."""

    def __init__(self, engines: Mapping[str, ResultEnginePort], make_sender: SenderFactory, *,
                 remember: int = MAX_REMEMBERED, max_pending: int = MAX_PENDING) -> None:
        self.engines = dict(engines)
        receive: Receive = self._receive
        listener: InventoryListener = self._inventory_changed
        self.sender = make_sender(receive=receive, inventory_listener=listener)
        self._remember = remember
        #: Results held at once (readiness, inventory, link, running continuation); one more
        #: is refused with ``ResourceExhausted``, never queued.
        self.max_pending = max_pending
        self._pending: dict[ResultKey, _Entry] = {}
        self._done: OrderedDict[ResultKey, tuple[str, str, Delivered]] = OrderedDict()
        self._closed = False
        #: Results delivered (their continuation ran), failed (withdrawn, refused by the
        #: engine, or cut off by a stop), and refused at once because ``max_pending`` were held.
        self.counters = {"delivered": 0, "failed": 0, "overloaded": 0}

    @property
    def pending(self) -> int:
        """Results held now (bounded by ``max_pending``)."""
        return len(self._pending)

    async def start(self) -> None:
        """Start the sender's loop and every engine's record stream."""
        await self.sender.run()
        for port in self.engines.values():
            port.start(self.sender.observe)

    async def close(self) -> None:
        """Stop the sender and fail what is still pending (retryable); idempotent."""
        self._closed = True
        await self.sender.close()
        tasks = [e.task for e in self._pending.values() if e.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for key in list(self._pending):
            self._fail(key, Unavailable("delivery is shutting down; submit again"))

    # -- the three calls -------------------------------------------------------------------

    def engine(self, engine_id: str) -> ResultEnginePort:
        """The engine named ``engine_id``, or the only one when it is empty."""
        if not self.engines:
            raise FailedPrecondition("no engine agents are configured (setting engines)")
        if not engine_id:
            if len(self.engines) > 1:
                raise InvalidArgument("engine_id", f"required with {len(self.engines)} engines")
            return next(iter(self.engines.values()))
        port = self.engines.get(engine_id)
        if port is None:
            raise InvalidArgument("engine_id", f"unknown engine {quoted(engine_id)}; known: "
                                  f"{', '.join(sorted(self.engines))}")
        return port

    async def start_tool(self, key: ResultKey, engine_id: str, history: str, tool: str) -> bool:
        """A tool call started: the engine may pin the history's prefix (the ttl_* baselines)."""
        return await self.engine(engine_id).tool_started(key, history, tool)

    async def deliver(self, result: ToolCompletion) -> Delivered:
        """Deliver ``result`` and return its continuation's end; idempotent by key."""
        port = self.engine(result.engine_id)
        identity = (digest(result.observation), port.engine_id)
        if (done := self._answered(result.key, identity)) is not None:
            return done
        if result.key not in self._pending:
            await port.check(result.continuation)
            if (done := self._answered(result.key, identity)) is not None:
                return done  # finished while the engine was asked
        entry = self._pending.get(result.key) or self._begin(result, port, identity[0])
        _same(result.key, (entry.payload_digest, entry.engine_id), identity)
        return await asyncio.shield(entry.future)

    def _answered(self, key: ResultKey, identity: tuple[str, str]) -> Delivered | None:
        """The remembered answer of a finished ``key`` (refused for another identity)."""
        done = self._done.get(key)
        if done is None:
            return None
        _same(key, done[:2], identity)
        return done[2]

    async def withdraw(self, key: ResultKey) -> bool:
        """Cancel a result not yet committed to the link; False once its frame left (or for a
        key not pending here)."""
        entry = self._pending.get(key)
        if entry is None:
            return False
        if entry.task is not None:
            entry.task.cancel()  # still at readiness: the frame never reaches the sender
        elif not self.sender.withdraw(key):
            return False  # on the link or running: the continuation can no longer be stopped
        self._fail(key, FailedPrecondition(f"result {key} was withdrawn"))
        await _quietly(self.engines[entry.engine_id].withdraw(key))
        return True

    # -- the flow --------------------------------------------------------------------------

    def _begin(self, result: ToolCompletion, port: ResultEnginePort, payload_digest: str) -> _Entry:
        if self._closed:
            raise Unavailable("delivery is shutting down")
        if len(self._pending) >= self.max_pending:
            self.counters["overloaded"] += 1
            raise ResourceExhausted(f"delivery overloaded: {self.max_pending} results pending "
                                    "(max_pending_results); retry later")
        future: asyncio.Future[Delivered] = asyncio.get_running_loop().create_future()
        future.add_done_callback(_retrieve)
        entry = _Entry(payload_digest, port.engine_id, future, trace=current_trace())
        self._pending[result.key] = entry
        entry.task = asyncio.create_task(self._ready(result, port, entry),
                                         name=f"delivery-ready-{result.key}")
        return entry

    async def _ready(self, result: ToolCompletion, port: ResultEnginePort, entry: _Entry) -> None:
        """ResultReady on the engine, then the frame into the sender's inventory."""
        try:
            ready = await port.result_ready(result.key, result.history, entry.payload_digest,
                                            result.continuation.prompt)
        except DynbranchError as exc:
            self._fail(result.key, exc)
            return
        frame = Frame.build(result.key, port.engine_id, result.observation,
                            ready_at=time.time(), prompt_tokens=ready.prompt_tokens,
                            resident_blocks=ready.resident_blocks,
                            prefix_digest=ready.prefix_digest, tool=result.tool,
                            continuation=result.continuation)
        entry.task = None
        if not self.sender.submit(frame):
            self._fail(result.key, Unavailable("delivery is shutting down; submit again"))

    async def _receive(self, frame: Frame) -> None:
        """The sender's complete receipt: ReceiveResult on the engine, then answer the caller."""
        times = self.sender.forget(frame.key)  # taken: the key may be submitted again later
        assert times is not None
        continuation = frame.continuation
        assert isinstance(continuation, GenerationRequest)
        port = self.engines[frame.engine_id]
        entry = self._pending.get(frame.key)
        try:
            with within(entry.trace if entry is not None else None):
                received = await port.receive(frame.key, frame.payload_digest,
                                              frame.prefix_digest, continuation)
        except Exception as exc:
            self.sender.abandon(frame.key)  # frees tail_aware's ledger slot, no output
            if isinstance(exc, (InvalidArgument, FailedPrecondition)):
                await _quietly(port.withdraw(frame.key))  # refused: its lease is useless
            self._fail(frame.key, exc)
            raise  # the sender counts and logs receive errors
        self.sender.completed(frame.key, received.usage.completion_tokens)
        delivered = Delivered(received, frame.engine_id, times.commit - times.ready,
                              times.receipt - times.commit, times.promoted)
        self._finish(frame.key, frame.payload_digest, delivered)

    def _finish(self, key: ResultKey, payload_digest: str, delivered: Delivered) -> None:
        entry = self._pending.pop(key, None)
        self.counters["delivered"] += 1
        self._done[key] = (payload_digest, delivered.engine_id, delivered)
        while len(self._done) > self._remember:
            self._done.popitem(last=False)
        if entry is not None and not entry.future.done():
            entry.future.set_result(delivered)

    def _fail(self, key: ResultKey, exc: BaseException) -> None:
        """Forget ``key`` (a resubmission starts over) and fail its waiters with ``exc``."""
        entry = self._pending.pop(key, None)
        if entry is not None and not entry.future.done():
            self.counters["failed"] += 1
            entry.future.set_exception(exc)

    def _inventory_changed(self, view: InventoryView) -> None:
        port = self.engines.get(view.engine_id)
        if port is not None:
            port.push_inventory(view)


def _same(key: ResultKey, held: tuple[str, str], given: tuple[str, str]) -> None:
    """One result identity has one payload and one engine."""
    if held[0] != given[0]:
        raise FailedPrecondition(f"result {key} was submitted with another observation")
    if held[1] != given[1]:
        raise FailedPrecondition(f"result {key} was submitted for engine {held[1]!r}")


def _retrieve(future: asyncio.Future[Delivered]) -> None:
    # A failed delivery whose callers went away must not log "exception never retrieved".
    if not future.cancelled():
        future.exception()


async def _quietly(withdrawal: Awaitable[bool]) -> None:
    """An engine withdrawal that may fail: the lease still ends at its lifetime ℓ."""
    try:
        await withdrawal
    except DynbranchError as exc:
        log.info("engine withdrawal failed: %s", exc)


__all__ = ["MAX_PENDING", "MAX_REMEMBERED", "Delivered", "DeliveryCore", "ResultEnginePort",
           "Readiness", "Received", "ToolCompletion"]
