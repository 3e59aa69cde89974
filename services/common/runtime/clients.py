"""Client-side helpers: channels with declared retries for idempotent methods only, and deadlines.

Retries live in the channel's service config (``retryPolicy``: only UNAVAILABLE, only methods
listed in :data:`IDEMPOTENT`), never in hand-written loops. Every call takes a deadline: use
:func:`deadline` to derive one from the caller's remaining budget. A lost connection is retried
with a capped back-off (``configure_backoff``, from each service's settings: at most 1 s by
default, where gRPC's own default grows to 120 s), so a restarted peer is used again within
about a second of it serving.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, Protocol, TypeVar

import grpc

from services.common.runtime import tls, trace_propagation

#: Methods safe to retry, per fully-qualified service. Anything absent is never retried.
IDEMPOTENT: dict[str, tuple[str, ...]] = {
    "dynbranch.v1.EngineAgent": ("Abort", "LookupPrefix", "GetInfo", "ToolStarted",
                                 "ResultReady", "ReceiveResult", "WithdrawResult",
                                 "SyncInventory", "WatchLeases"),
    "dynbranch.v1.SubgraphLibrary": ("Lookup", "Put", "PutShadow", "Discard", "Stats",
                                     "WatchNames", "Versions", "AdoptVersions", "Changes",
                                     "BeginRenewal"),
    "dynbranch.v1.Admission": ("OpenBranch", "AdmitFills", "ReportOutcome"),
    "dynbranch.v1.Delivery": ("StartTool", "Deliver", "Withdraw"),
    "dynbranch.v1.Gateway": ("DeliverResult",),
    "dynbranch.v1.Corpus": ("Info", "Search", "Confirm", "Get", "VersionsOf", "Titles", "Abort"),
    "grpc.health.v1.Health": ("Check",),
}

T_co = TypeVar("T_co", covariant=True)


class StreamCall(Protocol[T_co]):
    """A server-streaming call as a ``grpc.aio`` stub returns it, typed (grpc ships no types):
    its messages in order, and ``cancel`` (which ends the call at the server too)."""

    def __aiter__(self) -> AsyncIterator[T_co]: ...

    def cancel(self) -> bool: ...


#: Default deadline of a call when the caller has no budget of its own.
DEFAULT_DEADLINE_S = 10.0
#: Smallest deadline handed to a downstream call; below it the call is not worth making.
MIN_DEADLINE_S = 0.005


def service_config(idempotent: dict[str, tuple[str, ...]] = IDEMPOTENT) -> str:
    """gRPC service config JSON declaring the retry policy of idempotent methods."""
    names = [{"service": svc, "method": m} for svc, methods in idempotent.items() for m in methods]
    policy = {"maxAttempts": 3, "initialBackoff": "0.02s", "maxBackoff": "0.2s",
              "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}
    return json.dumps({"methodConfig": [{"name": names, "retryPolicy": policy}]})


#: Reconnection back-off of this process's channels, ms: (first wait, longest wait).
_backoff_ms = (100, 1000)


def configure_backoff(initial_ms: int, max_ms: int) -> None:
    """Set the reconnection back-off of every channel opened after this call."""
    global _backoff_ms
    if not 0 < initial_ms <= max_ms:
        raise ValueError(f"reconnect back-off: need 0 < initial ({initial_ms} ms) <= max "
                         f"({max_ms} ms)")
    _backoff_ms = (initial_ms, max_ms)


def channel_options(max_message_bytes: int = 4 * 1024 * 1024) -> list[tuple[str, Any]]:
    """Channel arguments: retries on, declared service config, keepalive, message limits, and
    the reconnection back-off (``configure_backoff``)."""
    initial, longest = _backoff_ms
    return [
        ("grpc.enable_retries", 1),
        ("grpc.service_config", service_config()),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.initial_reconnect_backoff_ms", initial),
        ("grpc.max_reconnect_backoff_ms", longest),
    ]


def open_channel(target: str, max_message_bytes: int = 4 * 1024 * 1024) -> grpc.aio.Channel:
    """An aio channel to a mesh service on ``target`` (``host:port``): TLS (mutual when this
    process has a certificate) once a service configured ``services.common.runtime.tls``, else
    plaintext; every call carries the caller's trace context once this process traces
    (``trace_propagation``)."""
    files = tls.client_files()
    interceptors = trace_propagation.client_interceptors() or None
    if files.calls:
        return grpc.aio.secure_channel(target, tls.channel_credentials(files),
                                       options=channel_options(max_message_bytes),
                                       interceptors=interceptors)
    return grpc.aio.insecure_channel(target, options=channel_options(max_message_bytes),
                                     interceptors=interceptors)


def deadline(context: grpc.aio.ServicerContext | None, default_s: float = DEFAULT_DEADLINE_S,
             cap_s: float | None = None) -> float:
    """Timeout for a downstream call: the caller's remaining time, else ``default_s``, capped."""
    remaining = context.time_remaining() if context is not None else None
    budget = default_s if remaining is None else remaining
    if cap_s is not None:
        budget = min(budget, cap_s)
    return max(budget, MIN_DEADLINE_S)


async def wait_serving(target: str, timeout_s: float = 30.0, service: str = "") -> None:
    """Poll the standard health check until ``target`` reports SERVING or the timeout passes."""
    import asyncio
    import time

    from grpc_health.v1 import health_pb2, health_pb2_grpc

    end = time.monotonic() + timeout_s
    async with open_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            try:
                reply = await stub.Check(health_pb2.HealthCheckRequest(service=service),
                                         timeout=1.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.aio.AioRpcError:
                pass
            if time.monotonic() > end:
                raise TimeoutError(f"{target} not SERVING after {timeout_s:.0f} s")
            await asyncio.sleep(0.05)


__all__ = ["DEFAULT_DEADLINE_S", "IDEMPOTENT", "StreamCall", "channel_options", "deadline",
           "open_channel", "service_config", "wait_serving"]
