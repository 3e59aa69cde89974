"""Gateway gRPC servicer: a stage demand in, its answer out (pass-through routing for now)."""

from __future__ import annotations

import time
import uuid

import grpc
from opentelemetry.trace import Tracer
from prometheus_client import CollectorRegistry, Counter, Histogram

from services.common.clients import deadline
from services.common.convert import require, sampling_from_proto, sampling_to_proto
from services.common.errors import InvalidArgument, PayloadTooLarge
from services.common.pb import common_pb2, engine_pb2, gateway_pb2, gateway_pb2_grpc
from services.common.tracing import outgoing_metadata
from services.gateway.config import GatewaySettings
from services.gateway.engine_client import EnginePool


class GatewayMetrics:
    """Prometheus metrics of the gateway."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.calls = Counter("dynbranch_gateway_calls_total", "Stage calls by source",
                             ["source"], registry=registry)
        self.seconds = Histogram("dynbranch_gateway_call_seconds", "Gateway seconds per call",
                                 registry=registry,
                                 buckets=(.001, .0025, .005, .01, .05, .1, .5, 1, 5, 30, 120))


class GatewayServicer(gateway_pb2_grpc.GatewayServicer):
    """Validates a demand, routes it to the least-loaded engine agent, returns the answer."""

    def __init__(self, settings: GatewaySettings, engines: EnginePool,
                 metrics: GatewayMetrics, tracer: Tracer) -> None:
        self.settings = settings
        self.tracer = tracer
        self.engines = engines
        self.metrics = metrics

    def _engine_request(self, demand: common_pb2.StageDemand) -> engine_pb2.GenerateRequest:
        request_id = demand.header.id or uuid.uuid4().hex
        if len(request_id) > self.settings.max_request_id:
            raise InvalidArgument("demand.header.id",
                                  f"at most {self.settings.max_request_id} characters")
        if len(require(demand.prompt, "demand.prompt").encode()) > self.settings.max_prompt_bytes:
            raise PayloadTooLarge("demand.prompt",
                                  f"larger than {self.settings.max_prompt_bytes} bytes")
        engine = self.engines.pick(require(demand.model, "demand.model"))
        sampling = sampling_from_proto(demand.sampling, "demand.sampling", engine.max_model_len)
        return engine_pb2.GenerateRequest(
            request_id=request_id, model=demand.model, prompt=demand.prompt,
            sampling=sampling_to_proto(sampling), priority=common_pb2.PRIORITY_CLASS_CANONICAL,
            omit_deltas=True)

    async def Call(self, request: gateway_pb2.CallRequest,
                   context: grpc.aio.ServicerContext) -> gateway_pb2.CallResponse:
        start = time.perf_counter()
        if not request.HasField("demand"):
            raise InvalidArgument("demand", "required")
        engine_request = self._engine_request(request.demand)
        with self.tracer.start_as_current_span("gateway.call", attributes={
                "dynbranch.request_id": engine_request.request_id,
                "dynbranch.workflow_id": request.demand.workflow_id,
                "dynbranch.stage_id": request.demand.stage_id}) as span:
            result = await self.engines.generate(
                engine_request, timeout_s=deadline(context, self.settings.call_deadline_s),
                metadata=outgoing_metadata())
            span.set_attribute("dynbranch.engine_id", result.engine_id)
        elapsed = time.perf_counter() - start
        self.metrics.calls.labels("engine").inc()
        self.metrics.seconds.observe(elapsed)
        fin = result.finished
        return gateway_pb2.CallResponse(
            request_id=engine_request.request_id, text=fin.text, finish_reason=fin.reason,
            usage=fin.usage, timings=fin.timings, engine_id=result.engine_id,
            source=gateway_pb2.RESULT_SOURCE_ENGINE, gateway_s=elapsed)


__all__ = ["GatewayMetrics", "GatewayServicer"]
