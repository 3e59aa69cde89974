"""Structured logs, OpenTelemetry tracing and the Prometheus endpoint of one service process."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)

_STD_ATTRS = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and every ``extra`` field."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update({k: v for k, v in record.__dict__.items() if k not in _STD_ATTRS})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure_logging(level: str = "INFO", fmt: str = "json") -> None:
    """Configure the root logger once, from an entry point only (STYLE.md §9)."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def make_tracer_provider(service: str, otlp_endpoint: str = "",
                         exporter: SpanExporter | None = None) -> TracerProvider:
    """A tracer provider that exports over OTLP gRPC when an endpoint is set, else nowhere.

    Tests pass an ``InMemorySpanExporter`` as ``exporter``; it is attached synchronously. With
    neither, spans are not recorded at all (the sampler drops them): building attributes for
    spans nobody exports would cost the hot path for nothing, while trace context still flows.
    """
    resource = Resource.create({"service.name": service})
    if exporter is None and not otlp_endpoint:
        return TracerProvider(resource=resource, sampler=ALWAYS_OFF)
    provider = TracerProvider(resource=resource)
    if exporter is not None:
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor

        provider.add_span_processor(SimpleSpanProcessor(exporter))
    elif otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp_endpoint)))
    return provider


def add_process_collectors(registry: CollectorRegistry) -> None:
    """The process and interpreter families every service exports beside its own: ``process_*``
    (CPU seconds, resident and virtual memory, open and maximum descriptors, start time),
    ``python_info`` and ``python_gc_*`` (collections, collected and uncollectable objects per
    generation). prometheus_client puts them in its default registry only; each service has
    its own registry."""
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)  # adds nothing where the interpreter keeps no gc statistics


class MetricsEndpoint:
    """A per-service Prometheus registry served over HTTP on its own port: the service's own
    metrics and the process and interpreter ones (:func:`add_process_collectors`)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        add_process_collectors(self.registry)
        self.port: int | None = None
        self._server: Any = None

    def start(self, host: str, port: int) -> int:
        """Serve ``/metrics``; returns the bound port (``port`` 0 picks a free one)."""
        self._server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self.port = self._server.server_port
        return self.port

    def stop(self) -> None:
        """Stop serving; idempotent."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def monotonic_s() -> float:
    """Monotonic seconds, for durations."""
    return time.monotonic()


__all__ = ["JsonFormatter", "MetricsEndpoint", "add_process_collectors", "configure_logging",
           "make_tracer_provider", "monotonic_s"]
