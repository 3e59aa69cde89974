"""Trace-context propagation over gRPC metadata (W3C ``traceparent``)."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry import context as otel_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_PROPAGATOR = TraceContextTextMapPropagator()


def outgoing_metadata() -> tuple[tuple[str, str], ...]:
    """Metadata carrying the current span's context to the next service."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return tuple(carrier.items())


def incoming_context(metadata: Sequence[tuple[str, str | bytes]] | None) -> otel_context.Context:
    """The caller's trace context from invocation metadata (empty context if none)."""
    carrier = {k: v for k, v in (metadata or ()) if isinstance(v, str)}
    return _PROPAGATOR.extract(carrier)


__all__ = ["incoming_context", "outgoing_metadata"]
