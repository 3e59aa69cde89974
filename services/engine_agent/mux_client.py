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

from collections.abc import Iterable
from typing import Any

import grpc

from services.common.pb import engine_pb2, engine_pb2_grpc
from services.common.runtime.clients import StreamCall
from services.common.runtime.streams import Multiplexed, MuxStream, mux_outcome, rpc_error


class _Stream(MuxStream[str, engine_pb2.GenerateMuxResult]):
    """One open GenerateMux call: generations keyed by request id; a start or a cancel (a
    request id) goes out."""

    ended_details = "the engine ended the stream"
    closed_details = "the engine client was closed"

    def __init__(self, stub: engine_pb2_grpc.EngineAgentStub, timeout_s: float) -> None:
        super().__init__(stub.GenerateMux(timeout=timeout_s), "generate-mux")

    def message(self, queued: list[Any]) -> engine_pb2.GenerateMuxRequest | None:
        message = engine_pb2.GenerateMuxRequest(
            starts=[q for q in queued if isinstance(q, engine_pb2.MuxStart)],
            cancels=[q for q in queued if isinstance(q, str)])
        return message if message.starts or message.cancels else None

    def results(self, response: engine_pb2.GenerateMuxResponse
                ) -> Iterable[tuple[str, engine_pb2.GenerateMuxResult]]:
        return ((result.request_id, result) for result in response.results)



class GenerationMux(Multiplexed[str, engine_pb2.GenerateMuxResult]):
    """Answer-only generations of one engine agent on renewed GenerateMux streams; ``close``."""

    def __init__(self, stub: engine_pb2_grpc.EngineAgentStub, *, max_age_s: float = 300.0,
                 stream_timeout_s: float = 3600.0) -> None:
        super().__init__(lambda: _Stream(stub, stream_timeout_s), max_age_s=max_age_s,
                         stream_timeout_s=stream_timeout_s)
        self._stub = stub

    async def answer(self, request: engine_pb2.GenerateRequest, timeout_s: float,
                     trace: dict[str, str] | None = None) -> engine_pb2.Finished:
        """Run ``request`` (its final_only is implied) and return its Finished message; raises
        ``grpc.aio.AioRpcError`` with the status its own Generate call would have ended with.

        A wait longer than a stream takes, a generation too large for a message, or an agent
        without GenerateMux, gets a Generate call of its own."""
        trace = trace or {}
        start = engine_pb2.MuxStart(request=request, timeout_s=timeout_s, trace_context=trace)
        size = start.ByteSize()
        if self.takes(timeout_s, size):
            request_id = request.request_id
            result = await self.exchange(request_id, start, request_id, timeout_s, size)
            if result is not None:
                finished: engine_pb2.Finished = mux_outcome(result, "finished")
                return finished
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


__all__ = ["GenerationMux", "rpc_error"]
