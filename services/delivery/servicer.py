"""Delivery gRPC servicer: protos ↔ ``DeliveryCore`` only (STYLE.md §2). A call in a workflow's
trace gets a span here (``delivery.start_tool``, ``delivery.deliver``, ``delivery.withdraw``); the
engine calls a delivery makes, its receipt's ReceiveResult included, carry that trace."""

from __future__ import annotations

from typing import cast

import grpc
from opentelemetry.trace import NoOpTracer, Tracer
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from services.common.pb import common_pb2, delivery_pb2, delivery_pb2_grpc, engine_pb2
from services.common.runtime.convert import (
    require,
    sampling_from_proto,
    timings_to_proto,
    usage_to_proto,
)
from services.common.runtime.lease_convert import key_from_proto
from services.common.values.errors import InvalidArgument, PayloadTooLarge
from services.common.values.generation import GenerationRequest, Priority
from services.common.values.tracing import call_span
from services.delivery.core import Delivered, DeliveryCore, ToolCompletion

#: Largest history and continuation prompt accepted (the engine agent's history bound).
MAX_TEXT_BYTES = 8 * 1024 * 1024
#: Output limit checked here; the engine's own max_model_len is checked before the transfer.
MAX_TOKENS_LIMIT = 1 << 20
MAX_NAME = 256

_CORE_COUNTERS = {
    "delivered": "Tool results delivered: the engine received them and ran their continuation",
    "failed": "Tool results that failed: withdrawn, refused by their engine, or cut off by a "
              "stop",
    "overloaded": "Tool results refused at once because max_pending_results were held",
}
#: Per engine (label ``engine``), the sender's ``LaneStats`` fields.
_LANE_COUNTERS = {
    "committed": ("frames_committed", "Frames committed to an engine's paced link"),
    "promotions": ("promotions", "Commitments that were quota-turnover promotions"),
    "holds": ("holds", "Times the policy held an engine's link idle with frames ready"),
    "receive_errors": ("receive_errors", "Frames whose ReceiveResult on the engine failed"),
    "decision_cpu_s": ("decision_cpu_seconds", "CPU seconds the delivery policy spent "
                       "choosing frames"),
}


class DeliveryCollector(Collector):
    """Exports the delivery core's and sender's counters at scrape time (nothing on the path
    of a result)."""

    def __init__(self, core: DeliveryCore) -> None:
        self.core = core

    def collect(self):  # type: ignore[no-untyped-def]  # noqa: ANN201
        for key, doc in _CORE_COUNTERS.items():
            yield CounterMetricFamily(f"dynbranch_delivery_{key}", doc,
                                      value=self.core.counters[key])
        yield GaugeMetricFamily("dynbranch_delivery_pending", "Tool results held now, from "
                                "readiness to their continuation's end", value=self.core.pending)
        sender = self.core.sender
        stats = sender.stats
        for field, (name, doc) in _LANE_COUNTERS.items():
            family = CounterMetricFamily(f"dynbranch_delivery_{name}", doc, labels=["engine"])
            for engine, lane in stats.items():
                family.add_metric([engine], getattr(lane, field))
            yield family
        queued = GaugeMetricFamily("dynbranch_delivery_queued", "Ready frames waiting for "
                                   "their engine's link", labels=["engine"])
        for engine, count in sender.queued.items():
            queued.add_metric([engine], count)
        yield queued
        refused = CounterMetricFamily("dynbranch_delivery_records_refused", "Lease and budget "
                                      "records of an engine refused, by reason (engine, stale, "
                                      "future, duplicate, order, generation)",
                                      labels=["engine", "reason"])
        for engine, reasons in sender.records_refused.items():
            for reason, count in reasons.items():
                refused.add_metric([engine, reason], count)
        yield refused


class DeliveryServicer(delivery_pb2_grpc.DeliveryServicer):
    """StartTool, Deliver and Withdraw over one ``DeliveryCore``."""

    def __init__(self, core: DeliveryCore, *, max_observation_bytes: int,
                 tracer: Tracer | None = None) -> None:
        self.core = core
        self.max_observation_bytes = max_observation_bytes
        self.tracer = tracer or NoOpTracer()

    async def StartTool(self, request: delivery_pb2.StartToolRequest,
                        context: grpc.aio.ServicerContext) -> delivery_pb2.StartToolResponse:
        key = key_from_proto(request.key)
        with call_span(self.tracer, "delivery.start_tool", attributes={
                "dynbranch.key": str(key), "dynbranch.engine_id": request.engine_id}) as span:
            pinned = await self.core.start_tool(key, _name(request.engine_id, "engine_id"),
                                                _text(request.history, "history"),
                                                _name(request.tool, "tool"))
            span.set_attribute("dynbranch.pinned", pinned)
        return delivery_pb2.StartToolResponse(pinned=pinned)

    async def Deliver(self, request: delivery_pb2.DeliverRequest,
                      context: grpc.aio.ServicerContext) -> delivery_pb2.DeliverResponse:
        result = self._tool_result(request)
        with call_span(self.tracer, "delivery.deliver", attributes={
                "dynbranch.key": str(result.key), "dynbranch.engine_id": result.engine_id,
                "dynbranch.tool": result.tool}) as span:
            delivered = await self.core.deliver(result)
            if span.is_recording():
                span.set_attributes({"dynbranch.promoted": delivered.promoted,
                                     "dynbranch.sender_wait_s": delivered.sender_wait_s,
                                     "dynbranch.transfer_s": delivered.transfer_s})
        return _response(delivered)

    async def Withdraw(self, request: delivery_pb2.WithdrawRequest,
                       context: grpc.aio.ServicerContext) -> delivery_pb2.WithdrawResponse:
        key = key_from_proto(request.key)
        with call_span(self.tracer, "delivery.withdraw",
                       attributes={"dynbranch.key": str(key)}) as span:
            withdrawn = await self.core.withdraw(key)
            span.set_attribute("dynbranch.withdrawn", withdrawn)
        return delivery_pb2.WithdrawResponse(withdrawn=withdrawn)

    def _tool_result(self, request: delivery_pb2.DeliverRequest) -> ToolCompletion:
        key = key_from_proto(request.key)
        if not request.observation:
            raise InvalidArgument("observation", "required")
        if len(request.observation) > self.max_observation_bytes:
            raise PayloadTooLarge("observation", f"larger than {self.max_observation_bytes} "
                                  "bytes")
        continuation = GenerationRequest(
            request_id=f"lads/{key}", model=require(request.model, "model", MAX_NAME),
            prompt=_text(request.prompt, "prompt"),
            sampling=sampling_from_proto(request.sampling, "sampling", MAX_TOKENS_LIMIT),
            priority=Priority.CANONICAL)
        return ToolCompletion(key, _name(request.engine_id, "engine_id"),
                          _text(request.history, "history"), request.observation,
                          _name(request.tool, "tool"), continuation)


def _text(value: str, field: str) -> str:
    """A required text field of bounded size."""
    require(value, field)
    if len(value.encode()) > MAX_TEXT_BYTES:
        raise PayloadTooLarge(field, f"larger than {MAX_TEXT_BYTES} bytes")
    return value


def _name(value: str, field: str) -> str:
    """An optional short name."""
    return require(value, field, MAX_NAME) if value else ""


def _response(d: Delivered) -> delivery_pb2.DeliverResponse:
    r = d.received
    return delivery_pb2.DeliverResponse(
        finished=engine_pb2.Finished(reason=cast(common_pb2.FinishReason, int(r.reason)),
                                     usage=usage_to_proto(r.usage),
                                     timings=timings_to_proto(r.timings), text=r.text),
        engine_id=d.engine_id, sender_wait_s=d.sender_wait_s, transfer_s=d.transfer_s,
        receipt_to_allocation_s=r.receipt_to_allocation_s, promoted=d.promoted)


__all__ = ["DeliveryCollector", "DeliveryServicer"]
