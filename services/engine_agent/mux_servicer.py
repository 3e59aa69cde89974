"""The server side of GenerateMux: answer-only generations multiplexed on one stream.

A unary gateway call needs only a generation's answer; as a Generate call of its own it pays a
call's setup on both sides (measured on loopback: about 0.25 ms of CPU per side for a
unary-stream call against about 0.1 ms for a message each way on an open stream). One session
runs the generations its stream starts as owned tasks and queues exactly one result per start.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
from opentelemetry import context as otel_context

from services.common.pb import engine_pb2
from services.common.runtime.grpc_errors import status_for
from services.common.values.errors import (
    AlreadyExists,
    DeadlineExceeded,
    DynbranchError,
    InvalidArgument,
    ResourceExhausted,
    quoted,
)
from services.common.values.generation import GenerationRequest
from services.common.values.tracing import incoming_context

METHOD = "/dynbranch.v1.EngineAgent/GenerateMux"
#: The longest wait a start message may ask for (its timeout_s).
MAX_TIMEOUT_S = 3600.0
#: Validates a start message's generation (the servicer's own check, as Generate runs it).
Validate = Callable[[engine_pb2.GenerateRequest], GenerationRequest]
#: Runs one generation to its end: its Finished message.
Answer = Callable[[GenerationRequest, otel_context.Context], Awaitable[engine_pb2.Finished]]
#: What the session queues for its stream: a result, the error that ends the stream, or None
#: for its clean end.
Outgoing = engine_pb2.GenerateMuxResult | Exception | None
#: Neither an error nor the end (a batch of results only).
_GOING = object()
#: The trace context of a start that carries none (most: tracing is off): no extraction.
_NO_TRACE = otel_context.Context()


class MuxSession:
    """One GenerateMux stream's generations; ``close`` cancels every one still running."""

    def __init__(self, validate: Validate, answer: Answer, max_running: int) -> None:
        self._validate = validate
        self._answer = answer
        self._max_running = max_running
        self._running: dict[str, asyncio.Task[None]] = {}
        self._cancelled: set[str] = set()
        self._reader: asyncio.Task[None] | None = None
        self.results: asyncio.Queue[Outgoing] = asyncio.Queue()

    async def stream(self, requests: AsyncIterator[engine_pb2.GenerateMuxRequest]
                     ) -> AsyncIterator[engine_pb2.GenerateMuxResponse]:
        """The results of the generations ``requests`` start as they finish, those ready at
        once sent as one message."""
        self._reader = asyncio.create_task(self._read(requests), name="generate-mux-read")
        try:
            while True:
                batch = [await self.results.get()]
                while not self.results.empty():
                    batch.append(self.results.get_nowait())
                results = [r for r in batch if isinstance(r, engine_pb2.GenerateMuxResult)]
                if results:
                    yield engine_pb2.GenerateMuxResponse(results=results)
                end = next((r for r in batch if not isinstance(r, engine_pb2.GenerateMuxResult)),
                           _GOING)
                if isinstance(end, Exception):
                    raise end
                if end is None:
                    return
        finally:
            await self.close()

    async def _read(self, requests: AsyncIterator[engine_pb2.GenerateMuxRequest]) -> None:
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

    def _handle(self, message: engine_pb2.GenerateMuxRequest) -> None:
        for start in message.starts:
            self._start(start)
        for request_id in message.cancels:
            task = self._running.get(request_id)
            if task is not None:
                self._cancelled.add(request_id)
                task.cancel()

    def _start(self, start: engine_pb2.MuxStart) -> None:
        request_id = start.request.request_id
        try:
            request = self._admit(start)
        except DynbranchError as exc:
            self._error(request_id, exc)
            return
        trace = (incoming_context(start.trace_context.items()) if start.trace_context
                 else _NO_TRACE)
        task = asyncio.create_task(self._run(request, start.timeout_s, trace),
                                   name=f"generate-mux:{request_id}")
        self._running[request_id] = task
        task.add_done_callback(lambda done: self._forget(request_id, done))

    def _admit(self, start: engine_pb2.MuxStart) -> GenerationRequest:
        if not 0.0 < start.timeout_s <= MAX_TIMEOUT_S:
            raise InvalidArgument("starts.timeout_s", f"must be in (0, {MAX_TIMEOUT_S:.0f}] "
                                  f"seconds, got {start.timeout_s}")
        request = self._validate(start.request)
        if request.request_id in self._running:
            raise AlreadyExists(f"request {quoted(request.request_id)} is already running")
        if len(self._running) >= self._max_running:
            raise ResourceExhausted(f"{self._max_running} generations already run on this "
                                    "stream")
        return request

    def _forget(self, request_id: str, task: asyncio.Task[None]) -> None:
        # Answers a cancel message here, not in ``_run``: a task cancelled before it first ran
        # never enters its coroutine. A task cancelled by the stream closing is not answered.
        if self._running.get(request_id) is task:
            del self._running[request_id]
        if task.cancelled() and request_id in self._cancelled:
            self._refuse(request_id, grpc.StatusCode.CANCELLED, "cancelled by the caller")
        self._cancelled.discard(request_id)

    async def _run(self, request: GenerationRequest, timeout_s: float,
                   trace: otel_context.Context) -> None:
        result = engine_pb2.GenerateMuxResult(request_id=request.request_id)
        try:
            async with asyncio.timeout(timeout_s):
                result.finished.CopyFrom(await self._answer(request, trace))
        except TimeoutError:
            self._error(request.request_id, DeadlineExceeded(
                f"the generation did not finish within timeout_s ({timeout_s:g} s)"))
            return
        except Exception as exc:  # noqa: BLE001 - this generation's status, not the stream's
            self._error(request.request_id, exc)
            return
        self.results.put_nowait(result)

    def _error(self, request_id: str, exc: Exception) -> None:
        self._refuse(request_id, *status_for(exc, METHOD))

    def _refuse(self, request_id: str, code: grpc.StatusCode, message: str) -> None:
        self.results.put_nowait(engine_pb2.GenerateMuxResult(
            request_id=request_id, error=engine_pb2.MuxError(code=code.value[0],
                                                             message=message)))

    async def close(self) -> None:
        """Cancel the reader and every running generation, and wait for them; idempotent."""
        tasks = [*self._running.values(), *([self._reader] if self._reader else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


__all__ = ["MAX_TIMEOUT_S", "MuxSession"]
