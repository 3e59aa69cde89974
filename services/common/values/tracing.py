"""Trace-context propagation over gRPC metadata (W3C ``traceparent``)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.trace import INVALID_SPAN, NoOpTracer, Span, Tracer
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





def workflow_context(key: str) -> otel_context.Context:
    """A context whose (synthetic, remote) parent span puts every call of one workflow in one
    trace: the trace id is derived from ``key`` (tenant and workflow id), so the gateway needs no
    state to keep a workflow's stages, fills and engine work together."""
    import hashlib

    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    digest = hashlib.blake2b(key.encode(), digest_size=24, person=b"dynbranch-trace").digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:], "big") or 1
    parent = SpanContext(trace_id, span_id, is_remote=True,
                         trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return trace.set_span_in_context(NonRecordingSpan(parent))


def has_span(ctx: otel_context.Context) -> bool:
    """Whether a context carries a valid span context (e.g. from an incoming traceparent)."""
    from opentelemetry import trace

    return trace.get_current_span(ctx).get_span_context().is_valid


_NO_SPAN = contextlib.nullcontext(INVALID_SPAN)


def maybe_span(tracer: Tracer, name: str, **kwargs: Any) -> AbstractContextManager[Span]:
    """``tracer.start_as_current_span(name, **kwargs)``, or a free no-op when tracing is off
    (even the no-op tracer attaches a context, which costs the hot path a few microseconds)."""
    if isinstance(tracer, NoOpTracer):
        return _NO_SPAN
    return tracer.start_as_current_span(name, **kwargs)


__all__ = ["has_span", "incoming_context", "maybe_span", "outgoing_metadata", "workflow_context"]
