"""Typed async client of one engine agent, with deadlines on every call."""

from __future__ import annotations

import grpc

from services.common.pb import common_pb2, engine_pb2, engine_pb2_grpc
from services.common.runtime.clients import DEFAULT_DEADLINE_S, StreamCall, open_channel
from services.engine_agent.mux_client import GenerationMux


class EngineAgentClient:
    """Calls one engine agent; owns its channel (``close`` it)."""

    def __init__(self, target: str, channel: grpc.aio.Channel | None = None) -> None:
        self.target = target
        self.channel = channel or open_channel(target)
        self.stub = engine_pb2_grpc.EngineAgentStub(self.channel)
        self.mux = GenerationMux(self.stub)

    def generate(self, request: engine_pb2.GenerateRequest, timeout_s: float = DEFAULT_DEADLINE_S,
                 metadata: tuple[tuple[str, str], ...] = ()
                 ) -> StreamCall[engine_pb2.GenerateEvent]:
        """Stream a generation's events; cancelling the returned call aborts it."""
        call: StreamCall[engine_pb2.GenerateEvent] = self.stub.Generate(
            request, timeout=timeout_s, metadata=metadata)
        return call

    async def answer(self, request: engine_pb2.GenerateRequest,
                     timeout_s: float = DEFAULT_DEADLINE_S, trace: dict[str, str] | None = None
                     ) -> engine_pb2.Finished:
        """Run a generation for its answer only (on a shared GenerateMux stream); cancelling
        the caller aborts it. Raises ``grpc.aio.AioRpcError`` as a Generate call would."""
        return await self.mux.answer(request, timeout_s, trace)

    async def abort(self, request_id: str, timeout_s: float = 2.0) -> bool:
        """Abort by request id (retried on UNAVAILABLE: idempotent)."""
        reply: engine_pb2.AbortResponse = await self.stub.Abort(
            engine_pb2.AbortRequest(request_id=request_id), timeout=timeout_s)
        return reply.aborted

    def adopt(self, request_id: str, text: bool = False,
              timeout_s: float = DEFAULT_DEADLINE_S) -> StreamCall[engine_pb2.AdoptEvent]:
        """Adopt a running fill: its progress until it ends (see the Adopt rpc); cancelling the
        returned call gives the fill up (it runs on, at fill priority)."""
        call: StreamCall[engine_pb2.AdoptEvent] = self.stub.Adopt(
            engine_pb2.AdoptRequest(request_id=request_id, text=text), timeout=timeout_s)
        return call

    def watch_load(self, interval_s: float = 0.0, timeout_s: float = 3600.0
                   ) -> StreamCall[common_pb2.LoadView]:
        """Stream load views; a long-lived call the owner cancels or renews after ``timeout_s``."""
        call: StreamCall[common_pb2.LoadView] = self.stub.WatchLoad(
            engine_pb2.WatchLoadRequest(interval_s=interval_s), timeout=timeout_s)
        return call

    async def info(self, timeout_s: float = 2.0) -> engine_pb2.EngineInfo:
        """Static facts about the engine."""
        reply: engine_pb2.EngineInfo = await self.stub.GetInfo(
            engine_pb2.GetInfoRequest(), timeout=timeout_s)
        return reply

    async def lookup_prefix(self, prompt: str, timeout_s: float = 1.0
                            ) -> engine_pb2.LookupPrefixResponse:
        """Resident prefix of a prompt."""
        reply: engine_pb2.LookupPrefixResponse = await self.stub.LookupPrefix(
            engine_pb2.LookupPrefixRequest(prompt=prompt), timeout=timeout_s)
        return reply

    # --- LADS ---------------------------------------------------------------------------------
    async def tool_started(self, request: engine_pb2.ToolStartedRequest,
                           timeout_s: float = 1.0) -> engine_pb2.ToolStartedResponse:
        """A tool call began (the ttl_* baselines pin here)."""
        reply: engine_pb2.ToolStartedResponse = await self.stub.ToolStarted(
            request, timeout=timeout_s)
        return reply

    async def result_ready(self, request: engine_pb2.ResultReadyRequest,
                           timeout_s: float = 2.0) -> engine_pb2.ResultDescriptor:
        """A tool result is ready: the engine tries a lease and describes the prefix."""
        reply: engine_pb2.ResultDescriptor = await self.stub.ResultReady(request, timeout=timeout_s)
        return reply

    async def receive_result(self, request: engine_pb2.ReceiveResultRequest,
                             timeout_s: float = DEFAULT_DEADLINE_S
                             ) -> engine_pb2.ReceiveResultResponse:
        """Complete receipt: register the continuation and wait for its output."""
        reply: engine_pb2.ReceiveResultResponse = await self.stub.ReceiveResult(
            request, timeout=timeout_s)
        return reply

    async def withdraw_result(self, key: common_pb2.ResultKey,
                              timeout_s: float = 1.0) -> bool:
        """Release a pending result's lease."""
        reply: engine_pb2.WithdrawResultResponse = await self.stub.WithdrawResult(
            engine_pb2.WithdrawResultRequest(key=key), timeout=timeout_s)
        return reply.withdrawn

    async def sync_inventory(self, view: common_pb2.InventoryView,
                             timeout_s: float = 1.0) -> bool:
        """Send the sender's causal inventory."""
        reply: engine_pb2.SyncInventoryResponse = await self.stub.SyncInventory(
            view, timeout=timeout_s)
        return reply.accepted

    def watch_leases(self, timeout_s: float = 3600.0) -> StreamCall[engine_pb2.LeaseUpdate]:
        """Stream budget and lease records; a long-lived call the owner renews."""
        call: StreamCall[engine_pb2.LeaseUpdate] = self.stub.WatchLeases(
            engine_pb2.WatchLeasesRequest(), timeout=timeout_s)
        return call

    async def close(self) -> None:
        """Close the answer streams and the channel; idempotent."""
        await self.mux.close()
        await self.channel.close()


__all__ = ["EngineAgentClient"]
