"""Trace context across services (W3C ``traceparent``): one workflow is one trace.

Every call between services carries the caller's trace context: the channels of
``services.common.runtime.clients.open_channel`` inject it into each call's metadata and each
server attaches it for the handler (``services.common.runtime.trace_propagation``), once the
process traces (an OTLP endpoint or an exporter is set). A server records a span for a call only
when the caller sent a context (:func:`call_span`): no service but the gateway starts a trace.

Roots by design (the only spans a trace starts from):

- ``gateway.call``: one stage call (gRPC ``Call`` and the HTTP front). Its parent is the caller's
  ``traceparent`` when it sent one, else a synthetic, never-exported span derived from tenant and
  workflow id (:func:`workflow_context`), so every stage of a workflow, its branches, fills,
  promotions, admission decisions and engine work fall in one trace;
- ``gateway.settle_branch`` and ``gateway.deliver_result``: under the same parent rule, in the
  workflow's trace;
- ``gateway.write_records``: a corpus write belongs to no workflow; it is a trace of its own, with
  the csl's ``csl.write_records`` under it.

Carrying no context, so never in a trace (``trace_propagation.UNTRACED``): the shared streams
that carry many callers' messages (csl ``PutStream``, ``PutBatches`` and ``LookupStream``, whose
probes the gateway's ``csl.lookup`` span covers; engine ``GenerateMux`` and gateway ``CallMux``,
whose generations and demands carry their own context in their start message) and the background
feeds and loops: the name feed (``WatchNames``), the shards' serving-lease renewals and the
reconcile (``Stats``, ``Versions``, ``AdoptVersions``, ``Changes``, ``BeginRenewal``,
``GrantServing``), the load and lease streams admission, the gateway and delivery follow
(``WatchLoad``, ``WatchLeases``), the inventory push (``SyncInventory``), ``GetInfo`` and health
checks.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, overload

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import (
    INVALID_SPAN,
    NonRecordingSpan,
    NoOpTracer,
    Span,
    SpanContext,
    TraceFlags,
    Tracer,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

#: The spans that start a trace (the list above); any other span has an exported parent.
ROOTS = ("gateway.call", "gateway.settle_branch", "gateway.deliver_result",
         "gateway.write_records")
_PROPAGATOR = TraceContextTextMapPropagator()
#: The metadata key of the W3C trace context.
TRACEPARENT = "traceparent"


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
    digest = hashlib.blake2b(key.encode(), digest_size=24, person=b"dynbranch-trace").digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:], "big") or 1
    parent = SpanContext(trace_id, span_id, is_remote=True,
                         trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return trace.set_span_in_context(NonRecordingSpan(parent))


def has_span(ctx: otel_context.Context | None = None) -> bool:
    """Whether a context (default: the current one) carries a valid span context, e.g. from an
    incoming ``traceparent``."""
    return trace.get_current_span(ctx).get_span_context().is_valid


_NO_SPAN = contextlib.nullcontext(INVALID_SPAN)


def maybe_span(tracer: Tracer, name: str, **kwargs: Any) -> AbstractContextManager[Span]:
    """``tracer.start_as_current_span(name, **kwargs)``, or a free no-op when tracing is off
    (even the no-op tracer attaches a context, which costs the hot path a few microseconds)."""
    if isinstance(tracer, NoOpTracer):
        return _NO_SPAN
    return tracer.start_as_current_span(name, **kwargs)


def call_span(tracer: Tracer, name: str, **kwargs: Any) -> AbstractContextManager[Span]:
    """A server's span for the call it is serving: a child of the caller's context (which the
    server attached), or a free no-op when the caller sent none or tracing is off. A call
    without a context (a background loop, a client that does not trace) starts no trace."""
    if isinstance(tracer, NoOpTracer) or not has_span():
        return _NO_SPAN
    return tracer.start_as_current_span(name, **kwargs)


def child_span(tracer: Tracer, name: str, parent: otel_context.Context,
               attributes: dict[str, Any]) -> Span:
    """A started, not current, span under ``parent`` (end it yourself), or the invalid span when
    ``parent`` has no span or tracing is off (the same rule as :func:`call_span`)."""
    if isinstance(tracer, NoOpTracer) or not has_span(parent):
        return INVALID_SPAN
    return tracer.start_span(name, context=parent, attributes=attributes)


def current_trace() -> otel_context.Context | None:
    """The current trace context when it has a span, else None: what a piece of work handed to
    another task (a queue, a shared loop) keeps to continue that trace there (:func:`within`)."""
    return otel_context.get_current() if has_span() else None


@contextlib.contextmanager
def within(ctx: otel_context.Context | None) -> Iterator[None]:
    """Run the block in trace context ``ctx`` (from :func:`current_trace`); None: as it is."""
    if ctx is None:
        yield
        return
    token = otel_context.attach(ctx)
    try:
        yield
    finally:
        otel_context.detach(token)


@overload
def run_in(ctx: otel_context.Context) -> contextvars.Context: ...


@overload
def run_in(ctx: None) -> None: ...


def run_in(ctx: otel_context.Context | None) -> contextvars.Context | None:
    """A copy of the current context variables in which ``ctx`` is the trace context: a task
    created with it (``asyncio.create_task(..., context=run_in(ctx))``) works, and calls, in
    that trace whichever call started it. None for None (no trace to carry: such a task runs
    in a copy of its creator's context, ``create_task``'s default)."""
    if ctx is None:
        return None
    out = contextvars.copy_context()
    out.run(otel_context.attach, ctx)
    return out


def untraced() -> contextvars.Context:
    """A copy of the current context variables without a trace context: for a long-lived task
    started lazily from a call (it must not carry that call's trace for its whole life)."""
    return run_in(otel_context.Context())


__all__ = ["ROOTS", "TRACEPARENT", "call_span", "child_span", "current_trace", "has_span",
           "incoming_context", "maybe_span", "outgoing_metadata", "run_in", "untraced", "within",
           "workflow_context"]
