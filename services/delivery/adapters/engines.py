"""The delivery service's link to one engine agent's LADS calls (an edge: gRPC).

``EngineLink`` implements the core's ``EnginePort`` over an ``EngineAgentClient`` and owns two
tasks: one follows ``WatchLeases`` into the sender's lease book (a lost stream is renewed with
backoff; records are only evidence, so while it is down the policy falls back to Cache-first),
the other pushes the sender's newest inventory view with ``SyncInventory`` (at most one call in
flight, always the newest view; failures are logged, never raised). Engine errors become the
mesh's exception tree here, so the core never sees a gRPC status.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import cast

import grpc

from services.common.pb import common_pb2, engine_pb2
from services.common.runtime.convert import sampling_to_proto
from services.common.runtime.grpc_errors import error_from_rpc
from services.common.runtime.lease_convert import (
    budget_from_proto,
    inventory_to_proto,
    key_to_proto,
    lease_from_proto,
)
from services.common.values.errors import (
    DynbranchError,
    InvalidArgument,
    quoted,
)
from services.common.values.generation import FinishReason, GenerationRequest, Timings, Usage
from services.common.values.leases import BudgetRecord, InventoryView, LeaseRecord, ResultKey
from services.delivery.core import Observe, Readiness, Received
from services.engine_agent.client import EngineAgentClient

log = logging.getLogger(__name__)

#: Backoff of a renewed lease stream: first delay and cap (seconds).
RETRY_S = (0.1, 2.0)
#: Deadlines of the short calls (seconds).
INFO_TIMEOUT_S = 2.0
READY_TIMEOUT_S = 2.0
SYNC_TIMEOUT_S = 1.0
#: Bytes per token when the engine cannot size a prompt (the toy tokenizer's English ratio).
BYTES_PER_TOKEN = 4


class EngineLink:
    """One engine agent as the delivery core sees it; ``close`` stops its tasks and channel."""

    def __init__(self, engine_id: str, target: str, *, receive_timeout_s: float = 600.0,
                 client: EngineAgentClient | None = None) -> None:
        self.engine_id = engine_id
        self.client = client or EngineAgentClient(target)
        self.receive_timeout_s = receive_timeout_s
        self._info: engine_pb2.EngineInfo | None = None
        self._latest: InventoryView | None = None
        self._dirty = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._foreign = False  # warned about records naming another engine

    # -- tasks -----------------------------------------------------------------------------

    def start(self, observe: Observe) -> None:
        """Follow the lease records into ``observe`` and push inventory views; idempotent."""
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._follow(observe), name=f"leases-{self.engine_id}"),
                asyncio.create_task(self._push(), name=f"inventory-{self.engine_id}")]

    async def close(self) -> None:
        """Cancel and await the tasks, then close the channel; idempotent."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.client.close()

    async def _follow(self, observe: Observe) -> None:
        delay = RETRY_S[0]
        while True:
            try:
                async for update in self.client.watch_leases():
                    self._observe(update, observe)
                    delay = RETRY_S[0]
                log.info("engine %s lease stream ended; renewing", self.engine_id)
            except grpc.aio.AioRpcError as err:
                log.warning("engine %s lease stream lost (%s); Cache-first until it is back",
                            self.engine_id, err.code().name, extra={"engine_id": self.engine_id})
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_S[1])

    def _observe(self, update: engine_pb2.LeaseUpdate, observe: Observe) -> None:
        try:
            record: LeaseRecord | BudgetRecord = (budget_from_proto(update.budget)
                                                  if update.HasField("budget")
                                                  else lease_from_proto(update.lease))
        except InvalidArgument as exc:
            log.warning("engine %s sent an unreadable record: %s", self.engine_id, exc)
            return
        if record.engine_id != self.engine_id:
            if not self._foreign:
                log.error("engine at %s publishes records as %r, configured as %r: they are "
                          "ignored", self.client.target, record.engine_id, self.engine_id)
                self._foreign = True
            return
        observe(record)

    def push_inventory(self, view: InventoryView) -> None:
        """Keep ``view`` as the newest and wake the pusher (no call per change)."""
        self._latest = view
        self._dirty.set()

    async def _push(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            view = self._latest
            if view is None:
                continue
            try:
                await self.client.sync_inventory(inventory_to_proto(view), SYNC_TIMEOUT_S)
            except grpc.aio.AioRpcError as err:
                log.info("engine %s SyncInventory failed (%s)", self.engine_id,
                         err.code().name, extra={"engine_id": self.engine_id})

    # -- EnginePort --------------------------------------------------------------------------

    async def check(self, continuation: GenerationRequest) -> None:
        """Refuse early what ReceiveResult would refuse after the transfer."""
        info = await self._engine_info()
        if continuation.model != info.model:
            raise InvalidArgument("model", f"unknown model {quoted(continuation.model)}; engine "
                                  f"{self.engine_id} serves {info.model!r}")
        if continuation.sampling.max_tokens > info.max_model_len:
            raise InvalidArgument("sampling.max_tokens",
                                  f"must be <= {info.max_model_len}, got "
                                  f"{continuation.sampling.max_tokens}")

    async def tool_started(self, key: ResultKey, history: str, tool: str) -> bool:
        """ToolStarted; True when the engine pinned the prefix."""
        request = engine_pb2.ToolStartedRequest(key=key_to_proto(key), history=history, tool=tool)
        try:
            return (await self.client.tool_started(request, READY_TIMEOUT_S)).pinned
        except grpc.aio.AioRpcError as err:
            raise self._error(err, "ToolStarted") from None

    async def result_ready(self, key: ResultKey, history: str, payload_digest: str,
                           prompt: str) -> Readiness:
        """The continuation prompt's size (LookupPrefix), then ResultReady (may lease)."""
        try:
            sized = await self.client.lookup_prefix(prompt, READY_TIMEOUT_S)
            d = await self.client.result_ready(engine_pb2.ResultReadyRequest(
                key=key_to_proto(key), history=history, payload_digest=payload_digest),
                READY_TIMEOUT_S)
        except grpc.aio.AioRpcError as err:
            raise self._error(err, "ResultReady") from None
        return Readiness(d.resident_blocks, d.resident_tokens, d.prefix_digest,
                         sized.prompt_tokens or math.ceil(len(prompt.encode()) / BYTES_PER_TOKEN))

    async def receive(self, key: ResultKey, payload_digest: str, prefix_digest: str,
                      continuation: GenerationRequest) -> Received:
        """ReceiveResult (idempotent per key on the engine) under ``receive_timeout_s``."""
        request = engine_pb2.ReceiveResultRequest(
            key=key_to_proto(key), payload_digest=payload_digest, prefix_digest=prefix_digest,
            continuation=_generate_request(continuation))
        try:
            reply = await self.client.receive_result(request, self.receive_timeout_s)
        except grpc.aio.AioRpcError as err:
            raise self._error(err, "ReceiveResult") from None
        fin, u, t = reply.finished, reply.finished.usage, reply.finished.timings
        return Received(fin.text, FinishReason(fin.reason or FinishReason.ERROR),
                        Usage(u.prompt_tokens, u.cached_prompt_tokens, u.completion_tokens),
                        Timings(t.queue_s, t.prefill_s, t.decode_s, t.total_s), reply.bound,
                        reply.receipt_to_allocation_s)

    async def withdraw(self, key: ResultKey) -> bool:
        """WithdrawResult: release the result's lease on the engine."""
        try:
            return await self.client.withdraw_result(key_to_proto(key), READY_TIMEOUT_S)
        except grpc.aio.AioRpcError as err:
            raise self._error(err, "WithdrawResult") from None

    async def _engine_info(self) -> engine_pb2.EngineInfo:
        if self._info is None:
            try:
                self._info = await self.client.info(INFO_TIMEOUT_S)
            except grpc.aio.AioRpcError as err:
                raise self._error(err, "GetInfo") from None
        return self._info

    def _error(self, err: grpc.aio.AioRpcError, call: str) -> DynbranchError:
        """The engine's refusal as the mesh's error; anything transient is UNAVAILABLE (the
        deadline is this agent's, not the caller's)."""
        return error_from_rpc(err, f"engine {self.engine_id}", call, callers_deadline=False)


def _generate_request(r: GenerationRequest) -> engine_pb2.GenerateRequest:
    return engine_pb2.GenerateRequest(request_id=r.request_id, model=r.model, prompt=r.prompt,
                                      sampling=sampling_to_proto(r.sampling),
                                      priority=cast(common_pb2.PriorityClass, int(r.priority)),
                                      final_only=True)


__all__ = ["EngineLink"]
