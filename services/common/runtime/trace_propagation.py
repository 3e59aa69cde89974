"""The W3C trace context on every gRPC call between services (``values.tracing`` says which
spans are roots and which calls carry no context).

Client side: :func:`client_interceptors`, four aio interceptors (unary and streaming) that add the
current span's ``traceparent`` to a call's metadata; ``clients.open_channel`` installs them once
this process traces (:func:`enable`, which ``ServiceRuntime`` calls when it has an exporter).
Server side: :class:`ContextInterceptor` attaches the caller's context for the handler, which the
gRPC server runs in one task per call together with its interceptors, so ``call_span`` and every
task the handler spawns see it.

Why not ``opentelemetry-instrumentation-grpc`` (its 0.66b2 would fit the installed
opentelemetry 1.45.2): its interceptors open a client and a server span for every call and a call
without a context starts a trace, so every background feed and audit call would be a root unless
filters listed them on both sides; it wraps every handler and servicer context per call; and an
open issue of it (#3271) reports that its aio client interceptors do not pass a caller's
cancellation on to the call, while the gateway cancels fills. Propagation alone is a few lines.

When the process does not trace, channels get no interceptor at all: an intercepted aio call costs
an extra task per call, which the hot path should not pay for nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Callable, Iterable
from typing import Any

import grpc
from opentelemetry import context as otel_context

from services.common.values.tracing import TRACEPARENT, incoming_context, outgoing_metadata

#: Methods whose calls never carry a caller's context, per fully-qualified service: streams
#: shared by many callers' messages, and the background feeds and loops (``values.tracing``).
UNTRACED: dict[str, tuple[str, ...]] = {
    "dynbranch.v1.SubgraphLibrary": ("PutStream", "PutBatches", "LookupStream", "WatchNames",
                                     "Stats", "Versions", "AdoptVersions", "Changes",
                                     "BeginRenewal", "GrantServing"),
    "dynbranch.v1.EngineAgent": ("GenerateMux", "WatchLoad", "WatchLeases", "SyncInventory",
                                 "GetInfo"),
    "dynbranch.v1.Gateway": ("CallMux",),
    "grpc.health.v1.Health": ("Check", "Watch"),
}
_UNTRACED_PATHS = frozenset(f"/{svc}/{m}" for svc, methods in UNTRACED.items() for m in methods)
_UNTRACED = _UNTRACED_PATHS | frozenset(p.encode() for p in _UNTRACED_PATHS)

_enabled = False


def enable() -> None:
    """Channels opened from now on in this process carry the trace context."""
    global _enabled
    _enabled = True


def enabled() -> bool:
    """Whether this process's new channels carry the trace context."""
    return _enabled


def with_trace_context(details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
    """``details`` with the current trace context added to its metadata; unchanged when there
    is no current span, the method is untraced, or the caller set a ``traceparent`` itself."""
    if details.method in _UNTRACED:
        return details
    carrier = outgoing_metadata()
    if not carrier:
        return details
    metadata = grpc.aio.Metadata(*(details.metadata or ()))
    if TRACEPARENT in metadata:
        return details
    for key, value in carrier:
        metadata.add(key, value)
    return grpc.aio.ClientCallDetails(details.method, details.timeout, metadata,
                                       details.credentials, details.wait_for_ready)


# grpc ships no types: its interceptors are Any to mypy, and so subclassing them ([misc])
class _UnaryUnary(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    async def intercept_unary_unary(self, continuation: Callable[..., Awaitable[Any]],
                                    client_call_details: grpc.aio.ClientCallDetails,
                                    request: Any) -> Any:
        return await continuation(with_trace_context(client_call_details), request)


class _UnaryStream(grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[misc]
    async def intercept_unary_stream(self, continuation: Callable[..., Awaitable[Any]],
                                     client_call_details: grpc.aio.ClientCallDetails,
                                     request: Any) -> Any:
        return await continuation(with_trace_context(client_call_details), request)


class _StreamUnary(grpc.aio.StreamUnaryClientInterceptor):  # type: ignore[misc]
    async def intercept_stream_unary(self, continuation: Callable[..., Awaitable[Any]],
                                     client_call_details: grpc.aio.ClientCallDetails,
                                     request_iterator: Iterable[Any] | AsyncIterable[Any]
                                     ) -> Any:
        return await continuation(with_trace_context(client_call_details), request_iterator)


class _StreamStream(grpc.aio.StreamStreamClientInterceptor):  # type: ignore[misc]
    async def intercept_stream_stream(self, continuation: Callable[..., Awaitable[Any]],
                                      client_call_details: grpc.aio.ClientCallDetails,
                                      request_iterator: Iterable[Any] | AsyncIterable[Any]
                                      ) -> Any:
        return await continuation(with_trace_context(client_call_details), request_iterator)


def client_interceptors() -> list[grpc.aio.ClientInterceptor]:
    """Interceptors for a new channel: the trace context on every kind of call; none when this
    process does not trace."""
    if not _enabled:
        return []
    return [_UnaryUnary(), _UnaryStream(), _StreamUnary(), _StreamStream()]


class ContextInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Attaches the caller's trace context, if it sent one, for the call's handler. The server
    runs the interceptors and the handler of a call in one task of its own, so the context is
    never detached: it ends with the task."""

    async def intercept_service(self, continuation: Callable[..., Awaitable[Any]],
                                handler_call_details: grpc.HandlerCallDetails) -> Any:
        metadata = handler_call_details.invocation_metadata
        if metadata and any(key == TRACEPARENT for key, _ in metadata):
            otel_context.attach(incoming_context(metadata))
        return await continuation(handler_call_details)


__all__ = ["UNTRACED", "ContextInterceptor", "client_interceptors", "enable", "enabled",
           "with_trace_context"]
