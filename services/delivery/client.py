"""Typed async client of the delivery service, with a deadline on every call."""

from __future__ import annotations

import grpc

from services.common.pb import common_pb2, delivery_pb2, delivery_pb2_grpc
from services.common.runtime.clients import open_channel

#: Deliver waits for the continuation's whole output: its default deadline is long.
DELIVER_DEADLINE_S = 600.0
SHORT_DEADLINE_S = 2.0


class DeliveryClient:
    """Calls one delivery service; owns its channel (``close`` it). Every call is idempotent
    and declared retryable on UNAVAILABLE in the channel's service config."""

    def __init__(self, target: str, channel: grpc.aio.Channel | None = None) -> None:
        self.target = target
        self.channel = channel or open_channel(target)
        self.stub = delivery_pb2_grpc.DeliveryStub(self.channel)

    async def start_tool(self, request: delivery_pb2.StartToolRequest,
                         timeout_s: float = SHORT_DEADLINE_S) -> bool:
        """A tool call started; True when the engine pinned the history (ttl_* baselines only)."""
        reply: delivery_pb2.StartToolResponse = await self.stub.StartTool(
            request, timeout=timeout_s)
        return reply.pinned

    async def deliver(self, request: delivery_pb2.DeliverRequest,
                      timeout_s: float = DELIVER_DEADLINE_S) -> delivery_pb2.DeliverResponse:
        """Return a tool result and wait for its continuation's output."""
        reply: delivery_pb2.DeliverResponse = await self.stub.Deliver(request, timeout=timeout_s)
        return reply

    async def withdraw(self, key: common_pb2.ResultKey,
                       timeout_s: float = SHORT_DEADLINE_S) -> bool:
        """Cancel a pending result; True when it was pending and not yet on the link."""
        reply: delivery_pb2.WithdrawResponse = await self.stub.Withdraw(
            delivery_pb2.WithdrawRequest(key=key), timeout=timeout_s)
        return reply.withdrawn

    async def close(self) -> None:
        """Close the channel; idempotent."""
        await self.channel.close()


__all__ = ["DELIVER_DEADLINE_S", "DeliveryClient"]
