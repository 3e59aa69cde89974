"""The server side of a multiplexed stream: many exchanges on one long-lived bidirectional
stream, a message each way instead of a call each (the engine agent's GenerateMux, the
gateway's CallMux; the client side is ``streams.MuxStream``).

Callers that make many small exchanges with one peer keep a stream open and send each exchange
as a start message: what queued together goes as one message, so under concurrency the
per-message cost (gRPC's C core, its poller thread, a write) is shared by several exchanges
(``dynbranch bench overhead``: at concurrency 8 a gateway miss costs the whole mesh 2.1× a unary
echo's CPU, against 6.1× as calls; one call at a time a message costs about what a call does).
One session runs the exchanges its stream starts as owned tasks, each under its own deadline
(the start's ``timeout_s``) and cancellable by a cancel message, and queues exactly one result
per start: the answer, or the status the exchange's own call would have ended with. A refused or
failed exchange never ends the stream. Results ready together go out as one message (at most
``streams.BATCH_BYTES`` each). A session told to ``drain`` (its server is shutting down)
refuses new starts UNAVAILABLE and ends its stream cleanly once the last running exchange is
answered, so the caller's next exchange opens a stream elsewhere and the server's grace period
is not spent waiting on a stream that would never end.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Hashable, Iterable
from typing import Any, Generic, TypeVar

import grpc
from opentelemetry import context as otel_context

from services.common.runtime.deadlines import Deadline, Deadlines
from services.common.runtime.grpc_errors import status_for
from services.common.runtime.streams import (
    MAX_EXCHANGE_BYTES,
    MAX_MESSAGE_BYTES,
    byte_size,
    sized_batches,
)
from services.common.values.errors import (
    AlreadyExists,
    DeadlineExceeded,
    DynbranchError,
    InvalidArgument,
    ResourceExhausted,
    Unavailable,
    quoted,
)
from services.common.values.tracing import incoming_context

#: The longest wait a start message may ask for (its timeout_s).
MAX_TIMEOUT_S = 3600.0
#: The trace context of a start that carries none (most: tracing is off): no extraction.
NO_TRACE = otel_context.Context()

Key = TypeVar("Key", bound=Hashable)
Work = TypeVar("Work")


class MuxSession(Generic[Key, Work]):
    """One stream's exchanges; ``close`` cancels every one still running.

    Subclasses say how a request message's starts and cancels are read, validate a start into
    its work, run the work to its answer and build result and response messages. A start
    message carries ``timeout_s`` and ``trace_context`` fields."""

    #: The stream's method, for the statuses of failed exchanges (``status_for``).
    method = ""
    #: What an exchange is called in errors ("request 'r-1' is already running").
    noun = "exchange"

    def __init__(self, max_running: int) -> None:
        self._max_running = max_running
        self._running: dict[Key, asyncio.Task[None]] = {}
        self._cancelled: set[Key] = set()
        #: Exchanges whose deadline passed (their timeout_s), until their task is done.
        self._expired: dict[Key, float] = {}
        #: The deadlines of the running exchanges (one timer for all).
        self._deadlines = Deadlines()
        self._reader: asyncio.Task[None] | None = None
        self._draining = False
        #: What goes out: ``(result, serialized bytes)``, the error that ends the stream, or None
        #: for its clean end.
        self.results: asyncio.Queue[tuple[Any, int] | Exception | None] = asyncio.Queue()

    # -- what a subclass says -----------------------------------------------------------------

    def starts(self, message: Any) -> Iterable[Any]:
        """The start messages ``message`` carries."""
        raise NotImplementedError

    def cancels(self, message: Any) -> Iterable[Key]:
        """The keys of the running exchanges ``message`` cancels."""
        raise NotImplementedError

    def key(self, start: Any) -> Key:
        """The key that names ``start``'s exchange on the stream."""
        raise NotImplementedError

    def admit(self, start: Any) -> Work:
        """``start``'s work, validated (raises the ``DynbranchError`` that refuses it)."""
        raise NotImplementedError

    def run(self, work: Work, trace: otel_context.Context) -> Awaitable[Any]:
        """Run ``work`` to its end: the answer's message."""
        raise NotImplementedError

    def answered(self, key: Key, answer: Any) -> Any:
        """The result message of an exchange that ran to its end."""
        raise NotImplementedError

    def refused(self, key: Key, code: grpc.StatusCode, message: str) -> Any:
        """The result message of an exchange refused or failed with ``code``."""
        raise NotImplementedError

    def response(self, results: list[Any]) -> Any:
        """The message that sends ``results``."""
        raise NotImplementedError

    # -- the session ----------------------------------------------------------------------------

    async def stream(self, requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """The results of the exchanges ``requests`` start as they finish, those ready at once
        sent as one message."""
        self._reader = asyncio.create_task(self._read(requests), name=f"{self.noun}-mux-read")
        try:
            while True:
                batch = [await self.results.get()]
                while not self.results.empty():
                    batch.append(self.results.get_nowait())
                results = [r for r in batch if isinstance(r, tuple)]
                for part in sized_batches(results):
                    yield self.response(part)
                if len(results) < len(batch):  # the stream's end: an error, or None
                    end = next(r for r in batch if not isinstance(r, tuple))
                    if end is not None:
                        raise end
                    return
        finally:
            await self.close()

    def drain(self) -> None:
        """Take no new exchanges; end the stream once those running are answered."""
        self._draining = True
        if not self._running:
            self.results.put_nowait(None)

    async def _read(self, requests: AsyncIterator[Any]) -> None:
        try:
            async for message in requests:
                self._handle(message)
            # The caller half-closed: it still waits for the answers of those running.
            while self._running:
                await asyncio.gather(*self._running.values(), return_exceptions=True)
            self.results.put_nowait(None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - ends the stream with its status
            self.results.put_nowait(exc)

    def _handle(self, message: Any) -> None:
        for start in self.starts(message):
            self._start(start)
        for key in self.cancels(message):
            task = self._running.get(key)
            if task is not None:
                self._cancelled.add(key)
                task.cancel()

    def _start(self, start: Any) -> None:
        key = self.key(start)
        try:
            work = self._admit(key, start)
        except DynbranchError as exc:
            self._error(key, exc)
            return
        trace = (incoming_context(start.trace_context.items()) if start.trace_context
                 else NO_TRACE)
        task = asyncio.create_task(self._run(key, work, trace), name=f"{self.noun}-mux:{key}")
        self._running[key] = task
        timeout_s = start.timeout_s
        deadline = self._deadlines.after(task.get_loop(), timeout_s,
                                         lambda: self._expire(key, task, timeout_s))
        task.add_done_callback(lambda done: self._forget(key, done, deadline))

    def _admit(self, key: Key, start: Any) -> Work:
        if not 0.0 < start.timeout_s <= MAX_TIMEOUT_S:
            raise InvalidArgument("starts.timeout_s", f"must be in (0, {MAX_TIMEOUT_S:.0f}] "
                                  f"seconds, got {start.timeout_s}")
        if self._draining:
            raise Unavailable("the server is shutting down: send it on a new stream")
        work = self.admit(start)
        if key in self._running:
            raise AlreadyExists(f"{self.noun} {quoted(key)} is already running")
        if len(self._running) >= self._max_running:
            raise ResourceExhausted(f"{self._max_running} {self.noun}s already run on this "
                                    "stream")
        return work

    def _expire(self, key: Key, task: asyncio.Task[None], timeout_s: float) -> None:
        # The exchange's deadline passed: its task is cancelled and answers DEADLINE_EXCEEDED
        # (in ``_run``, or in ``_forget`` for a task cancelled before it first ran).
        self._expired[key] = timeout_s
        task.cancel()

    def _late(self, key: Key) -> DeadlineExceeded:
        return DeadlineExceeded(f"the {self.noun} did not finish within timeout_s "
                                f"({self._expired[key]:g} s)")

    def _forget(self, key: Key, task: asyncio.Task[None], deadline: Deadline) -> None:
        # Answers a cancel message here, not in ``_run``: a task cancelled before it first ran
        # never enters its coroutine. A task cancelled by the stream closing is not answered.
        self._deadlines.cancel(deadline)
        if self._running.get(key) is task:
            del self._running[key]
        if task.cancelled() and key in self._cancelled:
            self._send(self.refused(key, grpc.StatusCode.CANCELLED, "cancelled by the caller"))
        elif task.cancelled() and key in self._expired and task.cancelling() == 1:
            self._error(key, self._late(key))  # only its deadline cancelled it, before it ran
        self._cancelled.discard(key)
        self._expired.pop(key, None)
        if self._draining and not self._running:
            self.results.put_nowait(None)  # the last one is answered: end the stream

    async def _run(self, key: Key, work: Work, trace: otel_context.Context) -> None:
        try:
            answer = await self.run(work, trace)
        except asyncio.CancelledError:
            # Its deadline's cancel is this session's own and is taken back (as
            # ``asyncio.timeout`` does); any other (a cancel message, the stream closing) goes on.
            task = asyncio.current_task()
            if key not in self._expired or task is None or task.uncancel() > 0:
                raise
            self._error(key, self._late(key))
            return
        except Exception as exc:  # noqa: BLE001 - this exchange's status, not the stream's
            self._error(key, exc)
            return
        result = self.answered(key, answer)
        size = byte_size(result)
        if size > MAX_EXCHANGE_BYTES:  # as one message it would end the stream for everyone
            self._send(self.refused(
                key, grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the answer is larger than a message may be ({MAX_MESSAGE_BYTES} bytes)"))
            return
        self.results.put_nowait((result, size))

    def _error(self, key: Key, exc: Exception) -> None:
        self._send(self.refused(key, *status_for(exc, self.method)))

    def _send(self, result: Any) -> None:
        self.results.put_nowait((result, byte_size(result)))

    async def close(self) -> None:
        """Cancel the reader and every running exchange, and wait for them; idempotent."""
        tasks = [*self._running.values(), *([self._reader] if self._reader else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class MuxSessions:
    """The open sessions of one servicer's multiplexed method; ``drain`` (at shutdown: see
    ``ServiceRuntime.on_drain``) drains every one, and any opened after."""

    def __init__(self) -> None:
        self._open: set[MuxSession[Any, Any]] = set()
        self.draining = False

    async def serve(self, session: MuxSession[Any, Any], requests: AsyncIterator[Any]
                    ) -> AsyncIterator[Any]:
        """``session.stream(requests)``, with ``session`` drained when this servicer is."""
        self._open.add(session)
        if self.draining:
            session.drain()
        try:
            async for response in session.stream(requests):
                yield response
        finally:
            self._open.discard(session)

    def drain(self) -> None:
        """Every open session takes no new exchanges and ends once its running ones are
        answered; sessions opened from now on too."""
        self.draining = True
        for session in self._open:
            session.drain()


__all__ = ["MAX_TIMEOUT_S", "NO_TRACE", "MuxSession", "MuxSessions"]
