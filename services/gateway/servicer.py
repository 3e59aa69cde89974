"""Gateway gRPC servicer: protos ↔ ``GatewayCore`` (STYLE.md §2); the tenant comes from the key."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import cast

import grpc
from opentelemetry import context as otel_context
from opentelemetry.trace import NoOpTracer, Tracer
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from services.common.pb import common_pb2, delivery_pb2, gateway_pb2, gateway_pb2_grpc
from services.common.runtime.clients import deadline
from services.common.runtime.convert import (
    require,
    sampling_from_proto,
    timings_into,
    usage_into,
)
from services.common.runtime.lease_convert import key_from_proto
from services.common.runtime.mux_session import MuxSession, MuxSessions
from services.common.values.errors import FailedPrecondition, InvalidArgument, PayloadTooLarge
from services.common.values.reads import MAX_WRITE_RECORDS, check_record_key
from services.common.values.tracing import has_span, incoming_context, maybe_span, workflow_context
from services.corpus import Document
from services.delivery.client import DeliveryClient
from services.gateway.adapters.sharded_library import SHARD_COUNTERS
from services.gateway.auth import Authenticator
from services.gateway.core import GatewayCore
from services.gateway.speculation.branches import BRANCH_COUNTERS
from services.gateway.templates import StageKind
from services.gateway.values import Answer, AnswerSource, Demand, TextStream, new_request_id


class CoreCollector(Collector):
    """Branch and reuse counters of the core, read at scrape time (nothing on the hot path)."""

    def __init__(self, core: GatewayCore) -> None:
        self.core = core

    def collect(self):  # type: ignore[no-untyped-def]  # noqa: ANN201
        stats = self.core.stats()
        for key, doc in BRANCH_COUNTERS.items():  # each counter with its written description
            if key in stats.branches:
                yield CounterMetricFamily(f"dynbranch_gateway_branch_{key}", doc,
                                          value=stats.branches[key])
        if stats.mirror is not None:
            synced, skipped = stats.mirror
            yield GaugeMetricFamily("dynbranch_gateway_name_mirror_synced",
                                    "1 when the library name mirror is synced",
                                    value=int(synced))
            yield CounterMetricFamily("dynbranch_gateway_lookups_skipped",
                                      "Library lookups skipped by the name mirror",
                                      value=skipped)
        if stats.shards is not None:  # a sharded library: which shards serve, and their renewals
            serving = GaugeMetricFamily(
                "dynbranch_gateway_csl_shard_serving",
                "1 while this gateway's latest renewal of a csl shard's serving lease was "
                "granted (0: not reachable, or too few of its peers)", labels=["shard"])
            for target, is_serving in stats.shards:
                serving.add_metric([target], int(is_serving))
            yield serving
            for key, doc in SHARD_COUNTERS.items():
                if key in stats.library:
                    yield CounterMetricFamily(f"dynbranch_gateway_csl_shard_{key}", doc,
                                              value=stats.library[key])


class GatewayMetrics:
    """Prometheus metrics of the gateway."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.calls = Counter("dynbranch_gateway_calls_total", "Demands answered (over gRPC "
                             "and HTTP), by where the answer came from: engine, library, "
                             "promoted_fill or joined", ["source"], registry=registry)
        self.seconds = Histogram("dynbranch_gateway_call_seconds", "Seconds the gateway took to "
                                 "answer a demand (over gRPC and HTTP)", registry=registry,
                                 buckets=(.001, .0025, .005, .01, .05, .1, .5, 1, 5, 30, 120))

        self._by_source = {s: self.calls.labels(s.name.lower()) for s in AnswerSource}

    def observe(self, answer: Answer) -> None:
        """Account one answered demand."""
        self._by_source[answer.source].inc()
        self.seconds.observe(answer.gateway_s)


def _authorization(context: grpc.aio.ServicerContext) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == "authorization":
            return value if isinstance(value, str) else value.decode()
    return None


def trace_parent(metadata: Sequence[tuple[str, str | bytes]] | None, tenant: str,
                 workflow_id: str) -> otel_context.Context:
    """The caller's trace if it sent one, else the workflow's own trace (one per workflow)."""
    return workflow_parent(incoming_context(metadata), tenant, workflow_id)


def workflow_parent(ctx: otel_context.Context, tenant: str, workflow_id: str
                    ) -> otel_context.Context:
    """``ctx`` if it carries the caller's span, else the workflow's own trace."""
    if has_span(ctx) or not workflow_id:
        return ctx
    return workflow_context(f"{tenant}/{workflow_id}")


def demand_from_proto(core: GatewayCore, tenant: str, msg: common_pb2.StageDemand) -> Demand:
    """A validated core demand from the wire (sampling checked for llm stages only)."""
    stage = (core.stage(msg.template_id, msg.stage_id) if msg.template_id and msg.stage_id
             else None)
    is_tool = stage is not None and stage.kind is StageKind.TOOL
    if not is_tool:
        core.check_model(msg.model)
    sampling = None if is_tool else sampling_from_proto(
        msg.sampling, "demand.sampling", core.max_tokens_limit(msg.model))
    return Demand(
        tenant=tenant, request_id=msg.header.id or new_request_id(), model=msg.model,
        prompt=msg.prompt, sampling=sampling, workflow_type=msg.workflow_type,
        workflow_id=msg.workflow_id, agent_id=msg.agent_id, template_id=msg.template_id,
        stage_id=msg.stage_id, stage_version=msg.stage_version,
        inputs=tuple(sorted(msg.inputs.items())), outputs=tuple(sorted(msg.outputs.items())),
        offered=tuple(msg.offered), observation=msg.observation, stage=stage)


def record_ids_from_proto(record_ids: Sequence[str], tenant: str) -> list[str]:
    """A write's record ids (written under ``tenant``), each named by its index when missing
    or too long (a csl shard's own refusal would reach the caller as a failed write)."""
    if len(record_ids) > MAX_WRITE_RECORDS:
        raise PayloadTooLarge("record_ids", f"at most {MAX_WRITE_RECORDS} records per write, "
                              f"got {len(record_ids)}")
    return [check_record_key(tenant, r, f"record_ids[{i}]") for i, r in enumerate(record_ids)]


def _delta(text: str, stream: TextStream) -> gateway_pb2.CallEvent:
    return gateway_pb2.CallEvent(delta=gateway_pb2.CallDelta(
        text=text, source=cast(gateway_pb2.ResultSource, int(stream.source))))


def answer_to_proto(a: Answer) -> gateway_pb2.CallResponse:
    """The wire form of an answer."""
    msg = gateway_pb2.CallResponse()
    answer_into(msg, a)
    return msg


def answer_into(msg: gateway_pb2.CallResponse, a: Answer) -> None:
    """Fill ``msg`` (e.g. a CallMux result's own answer field) in place with ``a``."""
    msg.request_id, msg.text, msg.engine_id = a.request_id, a.text, a.engine_id
    msg.finish_reason = cast(common_pb2.FinishReason, int(a.finish_reason))
    msg.source = cast(gateway_pb2.ResultSource, int(a.source))
    msg.gateway_s, msg.reuse_name, msg.waited_s = a.gateway_s, a.reuse_name, a.waited_s
    usage_into(msg.usage, a.usage)
    timings_into(msg.timings, a.timings)


#: Demands one CallMux stream may run at once by default (one more is RESOURCE_EXHAUSTED): as
#: many as the server runs calls (``max_concurrent_rpcs``).
MAX_MUX_CALLS = 16_384


class _CallSession(MuxSession[int, tuple[Demand, float]]):
    """One CallMux stream's demands, all of the stream's tenant, keyed by call id."""

    method = "/dynbranch.v1.Gateway/CallMux"
    noun = "call"

    def __init__(self, servicer: GatewayServicer, tenant: str, max_running: int) -> None:
        super().__init__(max_running)
        self._servicer = servicer
        self._tenant = tenant

    def starts(self, message: gateway_pb2.CallMuxRequest) -> Iterable[gateway_pb2.CallMuxStart]:
        starts: Iterable[gateway_pb2.CallMuxStart] = message.starts
        return starts

    def cancels(self, message: gateway_pb2.CallMuxRequest) -> Iterable[int]:
        cancels: Iterable[int] = message.cancels
        return cancels

    def key(self, start: gateway_pb2.CallMuxStart) -> int:
        return start.call_id

    def admit(self, start: gateway_pb2.CallMuxStart) -> tuple[Demand, float]:
        if not start.HasField("request"):
            raise InvalidArgument("starts.request", "required")
        return self._servicer.demand(self._tenant, start.request), start.timeout_s

    async def run(self, work: tuple[Demand, float], trace: otel_context.Context) -> Answer:
        demand, timeout_s = work
        parent = (None if self._servicer.untraced
                  else workflow_parent(trace, self._tenant, demand.workflow_id))
        return await self._servicer.answer(demand, timeout_s, None, parent)

    def answered(self, key: int, answer: Answer) -> gateway_pb2.CallMuxResult:
        result = gateway_pb2.CallMuxResult(call_id=key)
        answer_into(result.answer, answer)  # built in place: no CallResponse copied in
        return result

    def refused(self, key: int, code: grpc.StatusCode, message: str
                ) -> gateway_pb2.CallMuxResult:
        return gateway_pb2.CallMuxResult(
            call_id=key, error=common_pb2.MuxError(code=code.value[0], message=message))

    def response(self, results: list[gateway_pb2.CallMuxResult]) -> gateway_pb2.CallMuxResponse:
        return gateway_pb2.CallMuxResponse(results=results)


class GatewayServicer(gateway_pb2_grpc.GatewayServicer):
    """Maps the Gateway service onto the core."""

    def __init__(self, core: GatewayCore, auth: Authenticator, metrics: GatewayMetrics,
                 tracer: Tracer, call_deadline_s: float,
                 delivery: DeliveryClient | None = None,
                 max_mux_calls: int = MAX_MUX_CALLS) -> None:
        self.core = core
        self.delivery = delivery
        self.auth = auth
        self.metrics = metrics
        self.tracer = tracer
        #: Tracing off: no span, no attributes, no parent context per call.
        self.untraced = isinstance(tracer, NoOpTracer)
        self.call_deadline_s = call_deadline_s
        self.max_mux_calls = max_mux_calls
        #: Open CallMux sessions (``drain`` ends them).
        self.sessions = MuxSessions()

    async def Call(self, request: gateway_pb2.CallRequest,
                   context: grpc.aio.ServicerContext) -> gateway_pb2.CallResponse:
        tenant, demand = self._demand(request, context)
        return answer_to_proto(await self._call(tenant, demand, context))

    async def CallStream(self, request: gateway_pb2.CallRequest,
                         context: grpc.aio.ServicerContext
                         ) -> AsyncIterator[gateway_pb2.CallEvent]:
        tenant, demand = self._demand(request, context)
        texts: asyncio.Queue[str] = asyncio.Queue()
        stream = TextStream(texts.put_nowait)
        call = asyncio.create_task(self._call(tenant, demand, context, stream),
                                   name=f"call-stream:{demand.request_id}")
        try:
            while True:
                text = asyncio.ensure_future(texts.get())
                await asyncio.wait({text, call}, return_when=asyncio.FIRST_COMPLETED)
                if not text.done():
                    text.cancel()
                    break
                yield _delta(text.result(), stream)
            while not texts.empty():  # decoded just before the answer
                yield _delta(texts.get_nowait(), stream)
            yield gateway_pb2.CallEvent(answer=answer_to_proto(call.result()))
        finally:
            call.cancel()  # the client went away: the demand stops (a no-op once answered)

    async def CallMux(self, requests: AsyncIterator[gateway_pb2.CallMuxRequest],
                      context: grpc.aio.ServicerContext
                      ) -> AsyncIterator[gateway_pb2.CallMuxResponse]:
        session = _CallSession(self, self.auth.tenant(_authorization(context)),
                               self.max_mux_calls)
        async for response in self.sessions.serve(session, requests):
            yield response

    def _demand(self, request: gateway_pb2.CallRequest, context: grpc.aio.ServicerContext
                ) -> tuple[str, Demand]:
        tenant = self.auth.tenant(_authorization(context))
        return tenant, self.demand(tenant, request)

    def demand(self, tenant: str, request: gateway_pb2.CallRequest) -> Demand:
        """``request``'s demand of ``tenant``, validated."""
        if not request.HasField("demand"):
            raise InvalidArgument("demand", "required")
        require(request.demand.prompt, "demand.prompt")
        return demand_from_proto(self.core, tenant, request.demand)

    async def _call(self, tenant: str, demand: Demand, context: grpc.aio.ServicerContext,
                    stream: TextStream | None = None) -> Answer:
        return await self.answer(demand, deadline(context, self.call_deadline_s), stream,
                                 self._parent(context, tenant, demand.workflow_id))

    async def answer(self, demand: Demand, deadline_s: float, stream: TextStream | None,
                     parent: otel_context.Context | None) -> Answer:
        """Answer ``demand`` within ``deadline_s`` seconds, under the span parent ``parent``
        (None while tracing is off), and count it."""
        if self.untraced:  # no span, no attributes, no parent context: nothing per call
            answer = await self.core.call(demand, deadline_s, stream)
        else:
            answer = await self._traced_call(demand, deadline_s, stream, parent)
        self.metrics.observe(answer)
        return answer

    async def _traced_call(self, demand: Demand, deadline_s: float, stream: TextStream | None,
                           parent: otel_context.Context | None) -> Answer:
        with maybe_span(self.tracer, "gateway.call", context=parent, attributes={
                "dynbranch.request_id": demand.request_id,
                "dynbranch.workflow_id": demand.workflow_id,
                "dynbranch.stage_id": demand.stage_id}) as span:
            answer = await self.core.call(demand, deadline_s, stream)
            span.set_attribute("dynbranch.source", answer.source.name.lower())
            span.set_attribute("dynbranch.engine_id", answer.engine_id)
        return answer

    async def RegisterTemplate(self, request: gateway_pb2.RegisterTemplateRequest,
                               context: grpc.aio.ServicerContext
                               ) -> gateway_pb2.RegisterTemplateResponse:
        self.auth.tenant(_authorization(context))
        template = await self.core.register_template(require(request.yaml, "yaml"))
        return gateway_pb2.RegisterTemplateResponse(
            template_id=template.id, version=template.version,
            coordinates=[d.coordinate for d in template.decisions])

    async def WriteRecords(self, request: gateway_pb2.GatewayWriteRequest,
                           context: grpc.aio.ServicerContext) -> gateway_pb2.GatewayWriteResponse:
        tenant = self.auth.tenant(_authorization(context))
        upserts = [Document(require(d.doc_id, f"upserts[{i}].doc_id"), d.title, d.text)
                   for i, d in enumerate(request.upserts)]
        if not (upserts or request.removals or request.record_ids):
            raise InvalidArgument("upserts", "nothing to write")
        record_ids = record_ids_from_proto(request.record_ids, tenant)
        with maybe_span(self.tracer, "gateway.write_records", attributes={
                "dynbranch.upserts": len(upserts), "dynbranch.removals": len(request.removals),
                "dynbranch.record_ids": len(request.record_ids)}):
            written = await self.core.write(tenant, upserts, list(request.removals), record_ids)
        return gateway_pb2.GatewayWriteResponse(versions=[
            common_pb2.RecordVersion(record_id=r.record_id, version=r.version) for r in written])

    async def SettleBranch(self, request: gateway_pb2.SettleBranchRequest,
                           context: grpc.aio.ServicerContext) -> gateway_pb2.SettleBranchResponse:
        tenant = self.auth.tenant(_authorization(context))
        coordinate = require(request.coordinate, "coordinate")
        with maybe_span(self.tracer, "gateway.settle_branch",
                        context=self._parent(context, tenant, request.workflow_id), attributes={
                            "dynbranch.workflow_id": request.workflow_id,
                            "dynbranch.coordinate": coordinate,
                            "dynbranch.candidate": request.selected}) as span:
            settled = self.core.settle(tenant, request.workflow_id, coordinate, request.selected)
            span.set_attribute("dynbranch.settled", settled)
        return gateway_pb2.SettleBranchResponse(settled=settled)

    async def DeliverResult(self, request: delivery_pb2.DeliverRequest,
                            context: grpc.aio.ServicerContext) -> delivery_pb2.DeliverResponse:
        """Forward a tool result to delivery, to the engine holding the workflow's history."""
        tenant = self.auth.tenant(_authorization(context))
        if self.delivery is None:
            raise FailedPrecondition("no delivery service configured (gateway setting delivery)")
        key = key_from_proto(request.key)
        scoped = f"{tenant}/{key.workflow_id}"  # the gateway's affinity key, and the tenant scope
        forwarded = delivery_pb2.DeliverRequest()
        forwarded.CopyFrom(request)
        forwarded.key.workflow_id = scoped
        with maybe_span(self.tracer, "gateway.deliver_result",
                        context=self._parent(context, tenant, key.workflow_id),
                        attributes={"dynbranch.workflow_id": key.workflow_id}) as span:
            if not forwarded.engine_id:
                forwarded.engine_id = await self.core.locate_history(
                    scoped, request.model, request.history, deadline(context, 0.5, cap_s=0.5))
            span.set_attribute("dynbranch.engine_id", forwarded.engine_id)
            try:
                return await self.delivery.deliver(forwarded, timeout_s=deadline(context, 600.0))
            except grpc.aio.AioRpcError as err:  # the delivery's status and field-naming message
                await context.abort(err.code(), err.details() or "delivery failed")
                raise  # unreachable: abort raises

    def _parent(self, context: grpc.aio.ServicerContext, tenant: str, workflow_id: str
                ) -> otel_context.Context | None:
        """The span parent of a call about a workflow (``trace_parent``); None when off."""
        if self.untraced:
            return None
        return trace_parent(context.invocation_metadata(), tenant, workflow_id)


__all__ = ["CoreCollector", "GatewayMetrics", "GatewayServicer", "answer_to_proto",
           "demand_from_proto", "record_ids_from_proto", "trace_parent", "workflow_parent"]
