"""EngineAgent gRPC servicer: protos ↔ ``EngineBackend`` values only (STYLE.md §2).

Generation (``Generate``, ``GenerateMux``, ``Abort``), the load stream and prefix lookups go to
the backend, every generation through the agent's running fills, which ``Adopt`` watches; the
LADS methods (``ToolStarted``, ``ResultReady``, ``ReceiveResult``,
``WithdrawResult``, ``SyncInventory``, ``WatchLeases``) go to the lease provider and to
``leases.receipts.Receipts``, which runs each received result's continuation once.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from typing import cast

import grpc
from opentelemetry import context as otel_context
from opentelemetry.trace import INVALID_SPAN, NoOpTracer, Span, Tracer
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from services.common.pb import common_pb2, engine_pb2, engine_pb2_grpc
from services.common.runtime.convert import (
    chat_from_proto,
    priority_from_proto,
    require,
    sampling_from_proto,
    timings_to_proto,
    tool_calls_to_proto,
    usage_to_proto,
)
from services.common.runtime.lease_convert import (
    budget_to_proto,
    inventory_from_proto,
    key_from_proto,
    key_to_proto,
    lease_to_proto,
)
from services.common.runtime.mux_session import MuxSessions
from services.common.runtime.records import make_header
from services.common.values.errors import (
    InvalidArgument,
    PayloadTooLarge,
    Unavailable,
    quoted,
)
from services.common.values.generation import (
    FinishReason,
    GenerationRequest,
    LoadReport,
    Priority,
)
from services.common.values.leases import BudgetRecord, LeaseRecord
from services.common.values.tracing import call_span, child_span
from services.engine_agent.backend import (
    Allocated,
    Finished,
    GenerationEvent,
    Queued,
    TokenDelta,
)
from services.engine_agent.core import EngineAgent
from services.engine_agent.leases.provider import LeaseProvider
from services.engine_agent.leases.receipts import Receipts
from services.engine_agent.mux_servicer import GenerationSession

MAX_REQUEST_ID = 128
MAX_HISTORY_BYTES = 8 * 1024 * 1024


class EngineMetrics:
    """Prometheus metrics of one engine agent."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter("dynbranch_engine_requests_total", "Generations finished, by "
                                "priority class and finish reason", ["priority", "reason"],
                                registry=registry)
        self.tokens = Counter("dynbranch_engine_generated_tokens_total", "Completion tokens "
                              "generated", registry=registry)
        self.cached = Counter("dynbranch_engine_cached_prompt_tokens_total",
                              "Prompt tokens served from the prefix cache", registry=registry)
        self.latency = Histogram("dynbranch_engine_request_seconds", "Engine seconds per "
                                 "finished generation, queueing included (simulated seconds "
                                 "on the sim backend)", registry=registry,
                                 buckets=(.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60))
        self.running = Gauge("dynbranch_engine_running", "Sequences the engine is running now",
                             registry=registry)
        self.waiting = Gauge("dynbranch_engine_waiting", "Sequences waiting in the engine's "
                             "queue now", registry=registry)
        self.kv_used = Gauge("dynbranch_engine_kv_blocks_used", "KV-cache blocks in use now",
                             registry=registry)
        # One child per label pair, made once: ``labels`` locks and hashes on every call.
        self._requests = {(p, r): self.requests.labels(p.name.lower(), r.name.lower())
                          for p in Priority for r in FinishReason}

    def observe_finish(self, priority: Priority, event: Finished) -> None:
        """Account one finished generation."""
        self._requests[priority, event.reason].inc()
        self.tokens.inc(event.usage.completion_tokens)
        self.cached.inc(event.usage.cached_prompt_tokens)
        self.latency.observe(event.timings.total_s)

    def observe_load(self, load: LoadReport) -> None:
        """Export a load report as gauges."""
        self.running.set(load.running)
        self.waiting.set(load.waiting)
        self.kv_used.set(load.kv_blocks_used)


def event_to_proto(request_id: str, sequence: int, event: GenerationEvent
                   ) -> engine_pb2.GenerateEvent:
    """One backend event as a stream message."""
    msg = engine_pb2.GenerateEvent(request_id=request_id, sequence=sequence)
    if isinstance(event, TokenDelta):
        msg.delta.text, msg.delta.tokens = event.text, event.tokens
    elif isinstance(event, Allocated):
        msg.allocated.cached_prompt_tokens = event.cached_prompt_tokens
        msg.allocated.queue_s = event.queue_s
    elif isinstance(event, Queued):
        msg.queued.prompt_tokens = event.prompt_tokens
        msg.queued.queue_position = event.queue_position
    else:
        msg.finished.CopyFrom(finished_to_proto(event))
    return msg


def finished_to_proto(event: Finished) -> engine_pb2.Finished:
    """A generation's end as its Finished message."""
    return engine_pb2.Finished(
        reason=cast(common_pb2.FinishReason, int(event.reason)),
        usage=usage_to_proto(event.usage),
        timings=timings_to_proto(event.timings), text=event.text,
        tool_calls=tool_calls_to_proto(event.tool_calls), stop_string=event.stop_string)


def load_to_proto(engine_id: str, sequence: int, model: str, load: LoadReport,
                  leases_supported: bool) -> common_pb2.LoadView:
    """A load report as a versioned, timestamped LoadView."""
    return common_pb2.LoadView(
        header=make_header(engine_id, sequence, f"engine_agent/{engine_id}"), model=model,
        running=load.running, waiting=load.waiting, max_running=load.max_running,
        kv_blocks_used=load.kv_blocks_used, kv_blocks_total=load.kv_blocks_total,
        fill_running=load.fill_running, fill_kv_blocks=load.fill_kv_blocks,
        block_size=load.block_size, prefix_queries_tokens=load.prefix_query_tokens,
        prefix_hit_tokens=load.prefix_hit_tokens, leases_supported=leases_supported)


class EngineAgentServicer(engine_pb2_grpc.EngineAgentServicer):
    """Maps the EngineAgent service onto the agent (``core.EngineAgent``): its backend, and its
    lease provider and receipts, if any."""

    def __init__(self, agent: EngineAgent, metrics: EngineMetrics, tracer: Tracer, *,
                 max_prompt_bytes: int, load_interval_s: float,
                 max_mux_running: int = 16_384) -> None:
        self.agent = agent
        self.engine_id = agent.engine_id
        #: Generations one GenerateMux stream may run at once (one more is RESOURCE_EXHAUSTED).
        self.max_mux_running = max_mux_running
        #: Open GenerateMux sessions (``drain`` ends them at shutdown).
        self.sessions = MuxSessions()
        self.tracer = tracer
        #: Tracing off: a generation builds no span attributes (the hot path does no span work).
        self._untraced = isinstance(tracer, NoOpTracer)
        self.backend = agent.backend
        self.metrics = metrics
        self.max_prompt_bytes = max_prompt_bytes
        self.load_interval_s = load_interval_s
        self._load_seq = itertools.count()

    def _to_request(self, request: engine_pb2.GenerateRequest) -> GenerationRequest:
        info = self.backend.info
        require(request.request_id, "request_id", MAX_REQUEST_ID)
        if require(request.model, "model") != info.model:
            raise InvalidArgument("model", f"unknown model {quoted(request.model)}; this engine "
                                  f"serves {info.model!r}")
        if len(require(request.prompt, "prompt").encode()) > self.max_prompt_bytes:
            raise PayloadTooLarge("prompt", f"larger than {self.max_prompt_bytes} bytes")
        chat = chat_from_proto(request.chat, "chat") if request.HasField("chat") else None
        if chat is not None and not info.tools_supported:
            raise InvalidArgument("tools", f"tool calling and JSON output are not supported by "
                                  f"the {info.backend} backend")
        sampling = sampling_from_proto(request.sampling, "sampling", info.max_model_len)
        return GenerationRequest(request_id=request.request_id, model=request.model,
                                 prompt=request.prompt, sampling=sampling,
                                 priority=priority_from_proto(request.priority), chat=chat)

    def _span(self, req: GenerationRequest, trace: otel_context.Context) -> Span:
        # A span, not a current-span context: a generator may be closed from another task (an
        # aborted fill), and a context attached here could not be detached there. None when the
        # caller sent no trace context (a call outside any trace starts none).
        if self._untraced:
            return INVALID_SPAN
        return child_span(self.tracer, "engine.generate", trace, {
            "dynbranch.request_id": req.request_id, "dynbranch.engine_id": self.engine_id,
            "dynbranch.priority": req.priority.name.lower()})

    def _finished(self, req: GenerationRequest, event: Finished, span: Span) -> None:
        self.metrics.observe_finish(req.priority, event)
        if span.is_recording():
            span.set_attribute("dynbranch.finish_reason", event.reason.name.lower())

    async def Generate(self, request: engine_pb2.GenerateRequest, context: grpc.aio.ServicerContext
                       ) -> AsyncIterator[engine_pb2.GenerateEvent]:
        req = self._to_request(request)
        sequence = 0
        span = self._span(req, otel_context.get_current())  # the caller's, attached
        try:
            async for event in self.agent.fills.generate(req):
                if request.final_only and not isinstance(event, Finished):
                    continue
                if isinstance(event, Finished):
                    self._finished(req, event, span)
                yield event_to_proto(req.request_id, sequence, event)
                sequence += 1
        finally:
            span.end()

    async def answer(self, req: GenerationRequest, trace: otel_context.Context
                     ) -> engine_pb2.Finished:
        """Run one generation to its end and return its Finished message (GenerateMux)."""
        span = self._span(req, trace)
        finished: Finished | None = None
        try:
            async for event in self.agent.fills.generate(req):
                if isinstance(event, Finished):
                    self._finished(req, event, span)
                    finished = event
        finally:
            span.end()
        if finished is None:
            raise Unavailable(f"engine {self.engine_id} ended {quoted(req.request_id)} without "
                              "finishing")
        return finished_to_proto(finished)

    async def GenerateMux(self, requests: AsyncIterator[engine_pb2.GenerateMuxRequest],
                          context: grpc.aio.ServicerContext
                          ) -> AsyncIterator[engine_pb2.GenerateMuxResult]:
        session = GenerationSession(self._to_request, self.answer, self.max_mux_running)
        async for result in self.sessions.serve(session, requests):
            yield result

    async def Abort(self, request: engine_pb2.AbortRequest,
                    context: grpc.aio.ServicerContext) -> engine_pb2.AbortResponse:
        require(request.request_id, "request_id", MAX_REQUEST_ID)
        return engine_pb2.AbortResponse(aborted=await self.backend.abort(request.request_id))

    async def Adopt(self, request: engine_pb2.AdoptRequest, context: grpc.aio.ServicerContext
                    ) -> AsyncIterator[engine_pb2.AdoptEvent]:
        require(request.request_id, "request_id", MAX_REQUEST_ID)
        async for p in self.agent.fills.adopt(request.request_id, request.text):
            yield engine_pb2.AdoptEvent(text=p.text, tokens=p.tokens, allocated=p.allocated,
                                        raised=p.raised, finished=p.finished)

    def load_view(self) -> common_pb2.LoadView:
        """The backend's current load as the next LoadView of this agent."""
        load = self.backend.load()
        self.metrics.observe_load(load)
        info = self.backend.info
        return load_to_proto(self.engine_id, next(self._load_seq), info.model, load,
                             info.leases_supported)

    async def WatchLoad(self, request: engine_pb2.WatchLoadRequest,
                        context: grpc.aio.ServicerContext) -> AsyncIterator[common_pb2.LoadView]:
        if not 0.0 <= request.interval_s <= 60.0:
            raise InvalidArgument("interval_s", f"must be in [0, 60], got {request.interval_s}")
        interval = request.interval_s or self.load_interval_s
        while True:
            yield self.load_view()
            await asyncio.sleep(interval)

    async def LookupPrefix(self, request: engine_pb2.LookupPrefixRequest,
                           context: grpc.aio.ServicerContext) -> engine_pb2.LookupPrefixResponse:
        if len(require(request.prompt, "prompt").encode()) > self.max_prompt_bytes:
            raise PayloadTooLarge("prompt", f"larger than {self.max_prompt_bytes} bytes")
        found = await self.backend.lookup_prefix(request.prompt)
        return engine_pb2.LookupPrefixResponse(prompt_tokens=found.prompt_tokens,
                                               resident_tokens=found.resident_tokens,
                                               block_size=found.block_size)

    async def GetInfo(self, request: engine_pb2.GetInfoRequest,
                      context: grpc.aio.ServicerContext) -> engine_pb2.EngineInfo:
        info = self.backend.info
        return engine_pb2.EngineInfo(
            engine_id=self.engine_id, model=info.model, backend=info.backend,
            max_model_len=info.max_model_len, block_size=info.block_size,
            kv_blocks_total=info.kv_blocks_total, max_running=info.max_running,
            leases_supported=info.leases_supported, simulated=info.simulated)


    # -- LADS (papers/lads.txt §3.4-3.7) --------------------------------------------------------

    def _leases(self) -> tuple[LeaseProvider, Receipts]:
        return self.agent.leases()

    async def ToolStarted(self, request: engine_pb2.ToolStartedRequest,
                          context: grpc.aio.ServicerContext) -> engine_pb2.ToolStartedResponse:
        provider, _ = self._leases()
        with call_span(self.tracer, "engine.tool_started") as span:
            pinned = await provider.tool_started(key_from_proto(request.key),
                                                 _history(request.history), request.tool)
            span.set_attribute("dynbranch.pinned", pinned)
        return engine_pb2.ToolStartedResponse(pinned=pinned)

    async def ResultReady(self, request: engine_pb2.ResultReadyRequest,
                          context: grpc.aio.ServicerContext) -> engine_pb2.ResultDescriptor:
        provider, receipts = self._leases()
        key = key_from_proto(request.key)
        payload_digest = require(request.payload_digest, "payload_digest", 128)
        with call_span(self.tracer, "engine.result_ready",
                       attributes={"dynbranch.key": str(key)}) as span:
            if receipts.registered(key, payload_digest):
                # Its continuation is already registered: nothing is pending, nothing to lease.
                d = await provider.lookup(key, _history(request.history))
            else:
                d = await provider.ready(key, _history(request.history), payload_digest)
            span.set_attribute("dynbranch.resident_blocks", d.resident_blocks)
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
        _, receipts = self._leases()
        key = key_from_proto(request.key)
        payload_digest = require(request.payload_digest, "payload_digest", 128)
        continuation = request.continuation
        if not continuation.request_id:
            continuation.request_id = f"lads/{key}"
        with call_span(self.tracer, "engine.receive_result", attributes={
                "dynbranch.key": str(key), "dynbranch.engine_id": self.engine_id}) as span:
            done = await receipts.receive(key, payload_digest, request.prefix_digest,
                                          self._to_request(continuation))
            span.set_attribute("dynbranch.bound", done.bound)
        return engine_pb2.ReceiveResultResponse(
            finished=engine_pb2.Finished(reason=cast(common_pb2.FinishReason,
                                                     int(done.finished.reason)),
                                         usage=usage_to_proto(done.finished.usage),
                                         timings=timings_to_proto(done.finished.timings),
                                         text=done.finished.text),
            bound=done.bound, receipt_to_allocation_s=done.receipt_to_allocation_s)

    async def WithdrawResult(self, request: engine_pb2.WithdrawResultRequest,
                             context: grpc.aio.ServicerContext
                             ) -> engine_pb2.WithdrawResultResponse:
        provider, _ = self._leases()
        withdrawn = await provider.withdraw(key_from_proto(request.key))
        return engine_pb2.WithdrawResultResponse(withdrawn=withdrawn)

    async def SyncInventory(self, request: common_pb2.InventoryView,
                            context: grpc.aio.ServicerContext
                            ) -> engine_pb2.SyncInventoryResponse:
        provider, _ = self._leases()
        accepted = provider.sync_inventory(inventory_from_proto(request))
        return engine_pb2.SyncInventoryResponse(accepted=accepted)

    async def WatchLeases(self, request: engine_pb2.WatchLeasesRequest,
                          context: grpc.aio.ServicerContext
                          ) -> AsyncIterator[engine_pb2.LeaseUpdate]:
        provider, _ = self._leases()
        queue: asyncio.Queue[LeaseRecord | BudgetRecord] = asyncio.Queue(maxsize=4096)

        def push(record: LeaseRecord | BudgetRecord) -> None:
            with contextlib.suppress(asyncio.QueueFull):  # a slow watcher loses old records
                queue.put_nowait(record)

        unsubscribe = provider.subscribe(push)
        try:
            while True:
                record = await queue.get()
                if isinstance(record, BudgetRecord):
                    yield engine_pb2.LeaseUpdate(budget=budget_to_proto(record))
                else:
                    yield engine_pb2.LeaseUpdate(lease=lease_to_proto(record))
        finally:
            unsubscribe()



def _history(history: str) -> str:
    require(history, "history")
    if len(history.encode()) > MAX_HISTORY_BYTES:
        raise PayloadTooLarge("history", f"larger than {MAX_HISTORY_BYTES} bytes")
    return history


__all__ = ["EngineAgentServicer", "EngineMetrics", "event_to_proto", "finished_to_proto",
           "load_to_proto"]
