"""A small OTLP/gRPC trace receiver for tests: the services export to it as they would to a
collector, and it keeps every span it was sent (service, name, ids, attributes, events)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2


@dataclass(frozen=True, slots=True)
class ReceivedSpan:
    """One exported span as the receiver saw it (ids as hex)."""

    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    events: tuple[tuple[str, dict[str, Any]], ...] = ()


def _value(v: common_pb2.AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def _attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


@dataclass
class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    """The TraceService; ``spans`` in arrival order."""

    spans: list[ReceivedSpan] = field(default_factory=list)

    async def Export(self, request: trace_service_pb2.ExportTraceServiceRequest,  # noqa: N802
                     context: grpc.aio.ServicerContext
                     ) -> trace_service_pb2.ExportTraceServiceResponse:
        for rs in request.resource_spans:
            service = str(_attrs(rs.resource.attributes).get("service.name", ""))
            for ss in rs.scope_spans:
                for s in ss.spans:
                    self.spans.append(ReceivedSpan(
                        service, s.name, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(),
                        _attrs(s.attributes),
                        tuple((e.name, _attrs(e.attributes)) for e in s.events)))
        return trace_service_pb2.ExportTraceServiceResponse()

    def traces(self) -> dict[str, list[ReceivedSpan]]:
        """Spans by trace id."""
        out: dict[str, list[ReceivedSpan]] = defaultdict(list)
        for s in self.spans:
            out[s.trace_id].append(s)
        return dict(out)

    def roots(self) -> list[ReceivedSpan]:
        """Spans that start a trace: no parent, or a parent no exported span is (a remote,
        synthetic parent such as the gateway's per-workflow context)."""
        ids = {s.span_id for s in self.spans}
        return [s for s in self.spans if not s.parent_id or s.parent_id not in ids]


async def start_receiver(host: str = "127.0.0.1") -> tuple[grpc.aio.Server, Receiver, str]:
    """A started receiver on a free port: (server, receiver, ``host:port``)."""
    receiver = Receiver()
    server = grpc.aio.server()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)
    port = server.add_insecure_port(f"{host}:0")
    await server.start()
    return server, receiver, f"{host}:{port}"


__all__ = ["ReceivedSpan", "Receiver", "start_receiver"]
