"""Typed async client of the gateway (what harnesses and ``dynbranch call`` use)."""

from __future__ import annotations

import grpc

from services.common.pb import delivery_pb2, gateway_pb2, gateway_pb2_grpc
from services.common.runtime.clients import DEFAULT_DEADLINE_S, open_channel


class GatewayClient:
    """Calls the gateway; owns its channel (``close`` it). ``api_key`` goes in metadata."""

    def __init__(self, target: str, api_key: str = "") -> None:
        self.target = target
        self.channel: grpc.aio.Channel = open_channel(target)
        self.stub = gateway_pb2_grpc.GatewayStub(self.channel)
        self.metadata = (("authorization", f"Bearer {api_key}"),) if api_key else ()

    async def call(self, request: gateway_pb2.CallRequest,
                   timeout_s: float = DEFAULT_DEADLINE_S) -> gateway_pb2.CallResponse:
        """Run one stage (never retried: not idempotent)."""
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
        """Close the channel; idempotent."""
        await self.channel.close()

    async def __aenter__(self) -> GatewayClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = ["GatewayClient"]
