"""Typed async client of the gateway (what harnesses and ``dynbranch call`` use).

``call`` sends each demand as a message on a long-lived CallMux stream rather than as a Call of
its own: demands that queue together go as one message, which under concurrency costs both
sides a fraction of a call each (``dynbranch bench overhead``). Each demand
keeps its own deadline and cancellation: a caller that stops waiting sends a cancel message and
the gateway stops the demand. A demand gets the status its own Call would have ended with; a
stream that fails fails only the demands it carried, and the next demand opens a new stream.
A gateway without CallMux (an older one), or a wait longer than a stream lives, gets a Call.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import grpc

from services.common.pb import delivery_pb2, gateway_pb2, gateway_pb2_grpc
from services.common.runtime import trace_propagation
from services.common.runtime.clients import DEFAULT_DEADLINE_S, open_channel
from services.common.runtime.streams import Multiplexed, MuxStream, mux_outcome
from services.common.values.tracing import outgoing_metadata

#: Seconds one CallMux stream lives (its own deadline) and takes new demands for.
STREAM_TIMEOUT_S = 3600.0
STREAM_MAX_AGE_S = 300.0


class _CallStream(MuxStream[int, gateway_pb2.CallMuxResult]):
    """One open CallMux call: demands keyed by call id; a start or a cancel goes out."""

    ended_details = "the gateway ended the stream"
    closed_details = "the gateway client was closed"

    def __init__(self, stub: gateway_pb2_grpc.GatewayStub,
                 metadata: tuple[tuple[str, str], ...]) -> None:
        super().__init__(stub.CallMux(timeout=STREAM_TIMEOUT_S, metadata=metadata), "call-mux")

    def message(self, queued: list[gateway_pb2.CallMuxStart | int]
                ) -> gateway_pb2.CallMuxRequest | None:
        message = gateway_pb2.CallMuxRequest(
            starts=[q for q in queued if isinstance(q, gateway_pb2.CallMuxStart)],
            cancels=[q for q in queued if isinstance(q, int)])
        return message if message.starts or message.cancels else None

    def results(self, response: gateway_pb2.CallMuxResponse
                ) -> Iterable[tuple[int, gateway_pb2.CallMuxResult]]:
        return ((result.call_id, result) for result in response.results)


class GatewayClient:
    """Calls the gateway; owns its channel (``close`` it). ``api_key`` goes in metadata."""

    def __init__(self, target: str, api_key: str = "") -> None:
        self.target = target
        self.channel: grpc.aio.Channel = open_channel(target)
        self.stub = gateway_pb2_grpc.GatewayStub(self.channel)
        self.metadata = (("authorization", f"Bearer {api_key}"),) if api_key else ()
        #: Demands on renewed CallMux streams (a Call where a stream cannot take one).
        self.mux: Multiplexed[int, gateway_pb2.CallMuxResult] = Multiplexed(
            lambda: _CallStream(self.stub, self.metadata), max_age_s=STREAM_MAX_AGE_S,
            stream_timeout_s=STREAM_TIMEOUT_S)
        self._ids = itertools.count(1)

    async def call(self, request: gateway_pb2.CallRequest,
                   timeout_s: float = DEFAULT_DEADLINE_S) -> gateway_pb2.CallResponse:
        """Run one stage (never retried: not idempotent); raises ``grpc.aio.AioRpcError`` with
        the status its Call would have ended with."""
        call_id = next(self._ids)
        start = gateway_pb2.CallMuxStart(call_id=call_id, request=request, timeout_s=timeout_s)
        if trace_propagation.enabled():  # as a Call's channel would carry it in metadata
            start.trace_context.update(outgoing_metadata())
        size = start.ByteSize()
        if self.mux.takes(timeout_s, size):
            result = await self.mux.exchange(call_id, start, call_id, timeout_s, size)
            if result is not None:
                answer: gateway_pb2.CallResponse = mux_outcome(result, "answer")
                return answer
        return await self._call(request, timeout_s)

    async def _call(self, request: gateway_pb2.CallRequest,
                    timeout_s: float) -> gateway_pb2.CallResponse:
        reply: gateway_pb2.CallResponse = await self.stub.Call(
            request, timeout=timeout_s, metadata=self.metadata)
        return reply

    async def deliver_result(self, request: delivery_pb2.DeliverRequest,
                             timeout_s: float = 600.0) -> delivery_pb2.DeliverResponse:
        """Return a tool result (LADS) and get the continuation's output; idempotent by key."""
        reply: delivery_pb2.DeliverResponse = await self.stub.DeliverResult(
            request, timeout=timeout_s, metadata=self.metadata)
        return reply

    async def close(self) -> None:
        """Cancel the CallMux streams (demands still waiting fail CANCELLED) and close the
        channel; idempotent."""
        await self.mux.close()
        await self.channel.close()

    async def __aenter__(self) -> GatewayClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = ["GatewayClient"]
