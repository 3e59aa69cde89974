"""The client side of GenerateMux: answer-only generations of one engine agent on a long-lived
stream, a message each way instead of a call each (see ``services.engine_agent.mux_servicer``).

Every generation keeps its own deadline and cancellation: a caller that stops waiting (its
deadline passed or its task was cancelled) sends a cancel message, and the engine aborts the
generation. A stream that fails fails only the generations it carried, each with the stream's
status, exactly as their own Generate calls would have failed; the next generation opens a new
stream. Streams are renewed before their own deadline: a stream older than ``max_age_s`` takes no
new generations and half-closes once its last one is answered.
"""

from __future__ import annotations

import asyncio
import time

import grpc

from services.common.pb import engine_pb2, engine_pb2_grpc
from services.common.runtime.clients import StreamCall
from services.common.values.errors import quoted

#: grpc.StatusCode by its numeric value (MuxError.code).
_CODES = {code.value[0]: code for code in grpc.StatusCode}
#: Tells a stream's writer to half-close.
_HALF_CLOSE = None
#: What a stream's writer sends: a start, a cancel (a request id) or the half-close.
_Outgoing = engine_pb2.MuxStart | str | None


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    """An error shaped like the one a failed call raises (callers map both the same way)."""
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class _Stream:
    """One open GenerateMux call, its writer and reader tasks and the generations it carries."""

    def __init__(self, stub: engine_pb2_grpc.EngineAgentStub, timeout_s: float) -> None:
        self.opened = time.monotonic()
        self.call = stub.GenerateMux(timeout=timeout_s)
        self.pending: dict[str, asyncio.Future[engine_pb2.GenerateMuxResult]] = {}
        self.error: grpc.aio.AioRpcError | None = None
        self.retired = False
        self._outbox: asyncio.Queue[_Outgoing] = asyncio.Queue()
        self._writer = asyncio.create_task(self._write(), name="generate-mux-write")
        self._reader = asyncio.create_task(self._read(), name="generate-mux-read")

    @property
    def broken(self) -> bool:
        """The stream failed or ended: it takes no more generations."""
        return self.error is not None or self._reader.done()

    async def answer(self, request: engine_pb2.GenerateRequest, timeout_s: float,
                     trace: dict[str, str]) -> engine_pb2.Finished:
        """Run one generation on this stream and return its Finished message."""
        if self.error is not None:
            raise self.error
        request_id = request.request_id
        if request_id in self.pending:
            raise rpc_error(grpc.StatusCode.ALREADY_EXISTS,
                            f"request {quoted(request_id)} is already running")
        future: asyncio.Future[engine_pb2.GenerateMuxResult] = (
            asyncio.get_running_loop().create_future())
        self.pending[request_id] = future
        self._outbox.put_nowait(engine_pb2.MuxStart(request=request, timeout_s=timeout_s,
                                                    trace_context=trace))
        try:
            async with asyncio.timeout(timeout_s):
                result = await future
        except TimeoutError:
            self._cancel(request_id)
            raise rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") from None
        except asyncio.CancelledError:
            self._cancel(request_id)
            raise
        finally:
            del self.pending[request_id]
            if self.retired and not self.pending:
                self._outbox.put_nowait(_HALF_CLOSE)
        if result.HasField("error"):
            raise rpc_error(_CODES.get(result.error.code, grpc.StatusCode.UNKNOWN),
                            result.error.message)
        return result.finished

    def _cancel(self, request_id: str) -> None:
        if self.error is None:
            self._outbox.put_nowait(request_id)

    def retire(self) -> None:
        """Take no new generations; half-close once the last one is answered."""
        self.retired = True
        if not self.pending:
            self._outbox.put_nowait(_HALF_CLOSE)

    async def _write(self) -> None:
        # The only writer: one write at a time, and a caller's cancellation never interrupts one.
        # What queued during a write goes out as the next message.
        try:
            while True:
                queued = [await self._outbox.get()]
                while not self._outbox.empty():
                    queued.append(self._outbox.get_nowait())
                message = engine_pb2.GenerateMuxRequest(
                    starts=[q for q in queued if isinstance(q, engine_pb2.MuxStart)],
                    cancels=[q for q in queued if isinstance(q, str)])
                if message.starts or message.cancels:
                    await self.call.write(message)
                if _HALF_CLOSE in queued:
                    break
            await self.call.done_writing()
        except grpc.aio.AioRpcError as err:
            self._fail(err)
        except asyncio.InvalidStateError:
            pass  # the call already ended; the reader reports how
        except asyncio.CancelledError:
            if _cancelling():
                raise

    async def _read(self) -> None:
        try:
            async for response in self.call:
                for result in response.results:
                    future = self.pending.get(result.request_id)
                    if future is not None and not future.done():
                        future.set_result(result)
            self._fail(rpc_error(grpc.StatusCode.UNAVAILABLE, "the engine ended the stream"))
        except grpc.aio.AioRpcError as err:
            self._fail(err)
        except asyncio.CancelledError:
            # The call was cancelled (gRPC raises this for a locally cancelled call), or this task.
            self._fail(rpc_error(grpc.StatusCode.CANCELLED, "the stream was cancelled"))
            if _cancelling():
                raise

    def _fail(self, err: grpc.aio.AioRpcError) -> None:
        if self.error is None:
            self.error = err
        for future in self.pending.values():
            if not future.done():
                future.set_exception(self.error)
        if asyncio.current_task() is not self._writer:
            self._writer.cancel()  # nothing more can be written on a failed call

    @property
    def ended(self) -> bool:
        """Both tasks are done: nothing of this stream is left running."""
        return self._reader.done() and self._writer.done()

    async def close(self) -> None:
        """Cancel the call and its tasks and wait for them; the generations still waiting fail
        CANCELLED. Idempotent."""
        self.call.cancel()
        self._fail(rpc_error(grpc.StatusCode.CANCELLED, "the engine client was closed"))
        self._reader.cancel()
        await asyncio.gather(self._writer, self._reader, return_exceptions=True)


class GenerationMux:
    """Answer-only generations of one engine agent on renewed GenerateMux streams; ``close``."""

    def __init__(self, stub: engine_pb2_grpc.EngineAgentStub, *, max_age_s: float = 300.0,
                 stream_timeout_s: float = 3600.0) -> None:
        self._stub = stub
        self.max_age_s = max_age_s
        self.stream_timeout_s = stream_timeout_s
        #: False once the agent answered UNIMPLEMENTED (an older agent): callers use Generate.
        self.supported = True
        self._current: _Stream | None = None
        self._draining: list[_Stream] = []

    def takes(self, timeout_s: float) -> bool:
        """Whether a generation waiting up to ``timeout_s`` can ride a stream: a stream lives
        ``stream_timeout_s`` and takes new generations for ``max_age_s`` of it."""
        return self.supported and timeout_s <= self.stream_timeout_s - self.max_age_s

    async def answer(self, request: engine_pb2.GenerateRequest, timeout_s: float,
                     trace: dict[str, str] | None = None) -> engine_pb2.Finished:
        """Run ``request`` (its final_only is implied) and return its Finished message; raises
        ``grpc.aio.AioRpcError`` with the status its own Generate call would have ended with.

        A wait longer than a stream takes, or an agent without GenerateMux, gets a Generate
        call of its own."""
        trace = trace or {}
        if not self.takes(timeout_s):
            return await self._call(request, timeout_s, trace)
        stream = self._stream()
        try:
            return await stream.answer(request, timeout_s, trace)
        except grpc.aio.AioRpcError as err:
            if err.code() != grpc.StatusCode.UNIMPLEMENTED or err is not stream.error:
                raise
            self.supported = False  # the agent never saw this generation: run it the old way
        return await self._call(request, timeout_s, trace)

    async def _call(self, request: engine_pb2.GenerateRequest, timeout_s: float,
                    trace: dict[str, str]) -> engine_pb2.Finished:
        call: StreamCall[engine_pb2.GenerateEvent] = self._stub.Generate(
            request, timeout=timeout_s, metadata=tuple(trace.items()))
        async for event in call:
            if event.HasField("finished"):
                return event.finished
        raise rpc_error(grpc.StatusCode.UNAVAILABLE, "the engine ended the stream without "
                        "finishing")

    def _stream(self) -> _Stream:
        stream = self._current
        if stream is not None and (stream.broken or
                                   time.monotonic() - stream.opened > self.max_age_s):
            stream.retire()
            self._draining.append(stream)
            stream = None
        self._draining = [s for s in self._draining if not s.ended]
        if stream is None:
            stream = self._current = _Stream(self._stub, self.stream_timeout_s)
        return stream

    async def close(self) -> None:
        """Cancel every stream (their generations fail CANCELLED) and wait; idempotent."""
        streams = [*self._draining, *([self._current] if self._current else [])]
        self._current, self._draining = None, []
        await asyncio.gather(*(s.close() for s in streams))


__all__ = ["GenerationMux", "rpc_error"]
