"""The EngineAgent's LADS methods: protos ↔ ``LeaseProvider`` calls (STYLE.md §2).

Mixed into ``EngineAgentServicer``. Complete receipt is idempotent per result key: the first
``ReceiveResult`` runs the continuation in a task this object owns; a second one for the same
key (a sender that restarted, a harness that resubmitted) waits for that same task, so a
continuation never runs twice and its answer is never lost while it is remembered.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import grpc

from services.common.pb import common_pb2, engine_pb2
from services.common.runtime.convert import require, timings_to_proto, usage_to_proto
from services.common.runtime.lease_convert import (
    budget_to_proto,
    inventory_from_proto,
    key_from_proto,
    key_to_proto,
    lease_to_proto,
)
from services.common.values.errors import FailedPrecondition, PayloadTooLarge
from services.common.values.generation import GenerationRequest
from services.common.values.leases import BudgetRecord, LeaseRecord, ResultKey
from services.engine_agent.backend import Allocated, EngineBackend, Finished
from services.engine_agent.leases.provider import LeaseProvider

#: Finished continuations remembered for idempotent resubmission.
MAX_REMEMBERED = 4096
MAX_HISTORY_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Continued:
    """A continuation's end, the lease binding and receipt-to-allocation seconds."""

    finished: Finished
    bound: bool
    receipt_to_allocation_s: float


class LeaseRpcs:
    """ToolStarted, ResultReady, ReceiveResult, WithdrawResult, SyncInventory, WatchLeases."""

    backend: EngineBackend
    provider: LeaseProvider | None
    _to_request: Callable[[engine_pb2.GenerateRequest], GenerationRequest]

    def _init_leases(self, provider: LeaseProvider | None) -> None:
        self.provider = provider
        self._receipts: OrderedDict[ResultKey, tuple[str, asyncio.Task[Continued]]] = (
            OrderedDict())

    def _leases(self) -> LeaseProvider:
        if self.provider is None:
            raise FailedPrecondition(f"backend {self.backend.info.backend!r} has no lease provider")
        return self.provider

    async def ToolStarted(self, request: engine_pb2.ToolStartedRequest,
                          context: grpc.aio.ServicerContext) -> engine_pb2.ToolStartedResponse:
        key = key_from_proto(request.key)
        history = _history(request.history)
        pinned = await self._leases().tool_started(key, history, request.tool)
        return engine_pb2.ToolStartedResponse(pinned=pinned)

    async def ResultReady(self, request: engine_pb2.ResultReadyRequest,
                          context: grpc.aio.ServicerContext) -> engine_pb2.ResultDescriptor:
        key = key_from_proto(request.key)
        payload_digest = require(request.payload_digest, "payload_digest", 128)
        held = self._receipts.get(key)
        if held is not None and held[0] == payload_digest and not _failed(held[1]):
            # Its continuation is already registered here: nothing is pending, nothing to lease.
            d = await self._leases().lookup(key, _history(request.history))
        else:
            d = await self._leases().ready(key, _history(request.history), payload_digest)
        reply = engine_pb2.ResultDescriptor(key=key_to_proto(key),
                                            resident_blocks=d.resident_blocks,
                                            resident_tokens=d.resident_tokens,
                                            prefix_digest=d.prefix_digest)
        if d.lease is not None:
            reply.lease.CopyFrom(lease_to_proto(d.lease))
        return reply

    async def ReceiveResult(self, request: engine_pb2.ReceiveResultRequest,
                            context: grpc.aio.ServicerContext
                            ) -> engine_pb2.ReceiveResultResponse:
        key = key_from_proto(request.key)
        payload_digest = require(request.payload_digest, "payload_digest", 128)
        held = self._receipts.get(key)
        if held is not None and _failed(held[1]):
            held = None  # a failed continuation is retried, never replayed as its error
        if held is None:
            continuation = request.continuation
            if not continuation.request_id:
                continuation.request_id = f"lads/{key}"
            generation = self._to_request(continuation)
            task = asyncio.get_running_loop().create_task(
                self._continue(key, payload_digest, request.prefix_digest, generation))
            held = (payload_digest, task)
            self._remember(key, held)
        elif held[0] != payload_digest:
            raise FailedPrecondition(f"result {key} was received with another payload")
        done = await asyncio.shield(held[1])
        return engine_pb2.ReceiveResultResponse(
            finished=engine_pb2.Finished(reason=int(done.finished.reason),
                                         usage=usage_to_proto(done.finished.usage),
                                         timings=timings_to_proto(done.finished.timings),
                                         text=done.finished.text),
            bound=done.bound, receipt_to_allocation_s=done.receipt_to_allocation_s)

    async def _continue(self, key: ResultKey, payload_digest: str, prefix_digest: str,
                        request: GenerationRequest) -> Continued:
        provider = self._leases()
        received = time.monotonic()
        bound = await provider.receipt(key, payload_digest, prefix_digest, request.request_id)
        alloc_s = float("nan")
        async for event in self.backend.generate(request):
            if isinstance(event, Allocated):
                alloc_s = time.monotonic() - received
                await provider.allocated(key)
            elif isinstance(event, Finished):
                return Continued(event, bound, alloc_s)
        raise FailedPrecondition(f"continuation of {key} ended without finishing")

    def _remember(self, key: ResultKey, held: tuple[str, asyncio.Task[Continued]]) -> None:
        self._receipts[key] = held
        for old_key in list(self._receipts):  # oldest first; a running one is never forgotten
            if len(self._receipts) <= MAX_REMEMBERED:
                break
            if self._receipts[old_key][1].done():
                del self._receipts[old_key]

    async def WithdrawResult(self, request: engine_pb2.WithdrawResultRequest,
                             context: grpc.aio.ServicerContext
                             ) -> engine_pb2.WithdrawResultResponse:
        key = key_from_proto(request.key)
        return engine_pb2.WithdrawResultResponse(withdrawn=await self._leases().withdraw(key))

    async def SyncInventory(self, request: common_pb2.InventoryView,
                            context: grpc.aio.ServicerContext
                            ) -> engine_pb2.SyncInventoryResponse:
        view = inventory_from_proto(request)
        return engine_pb2.SyncInventoryResponse(accepted=self._leases().sync_inventory(view))

    async def WatchLeases(self, request: engine_pb2.WatchLeasesRequest,
                          context: grpc.aio.ServicerContext
                          ) -> AsyncIterator[engine_pb2.LeaseUpdate]:
        queue: asyncio.Queue[LeaseRecord | BudgetRecord] = asyncio.Queue(maxsize=4096)

        def push(record: LeaseRecord | BudgetRecord) -> None:
            with contextlib.suppress(asyncio.QueueFull):  # a slow watcher loses old records
                queue.put_nowait(record)

        unsubscribe = self._leases().subscribe(push)
        try:
            while True:
                record = await queue.get()
                if isinstance(record, BudgetRecord):
                    yield engine_pb2.LeaseUpdate(budget=budget_to_proto(record))
                else:
                    yield engine_pb2.LeaseUpdate(lease=lease_to_proto(record))
        finally:
            unsubscribe()

    async def close_leases(self) -> None:
        """Cancel running continuations (shutdown); the provider closes separately."""
        tasks = [task for _, task in self._receipts.values() if not task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _failed(task: asyncio.Task[Continued]) -> bool:
    """Whether a remembered continuation ended in an error (it is retried, never replayed)."""
    return task.done() and (task.cancelled() or task.exception() is not None)


def _history(history: str) -> str:
    require(history, "history")
    if len(history.encode()) > MAX_HISTORY_BYTES:
        raise PayloadTooLarge("history", f"larger than {MAX_HISTORY_BYTES} bytes")
    return history


__all__ = ["Continued", "LeaseRpcs"]
