"""Service runtime: a ``grpc.aio`` server on uvloop with health, reflection, Prometheus metrics,
OpenTelemetry tracing, an error interceptor and graceful shutdown (DESIGN.md §3, STYLE.md §7).

Every service's ``server.py`` builds one :class:`ServiceRuntime`, adds its servicers, and either
``await runtime.start()`` (tests, port 0) or calls :func:`run_service` (entry points).
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.trace import NoOpTracer, Tracer
from prometheus_client import CollectorRegistry

from services.common.runtime import clients, tls, trace_propagation
from services.common.runtime.grpc_errors import ErrorInterceptor
from services.common.values.config import ServiceSettings
from services.common.values.telemetry import MetricsEndpoint, make_tracer_provider

log = logging.getLogger(__name__)

CloseHook = Callable[[], Awaitable[None]]


def install_uvloop() -> None:
    """Use uvloop for every new event loop of this process (a no-op if it is missing)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a declared dependency
        return
    if sys.version_info >= (3, 12):  # pragma: no cover
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def server_options(settings: ServiceSettings) -> list[tuple[str, Any]]:
    """Channel arguments shared by every server."""
    return [
        ("grpc.max_receive_message_length", settings.max_message_bytes),
        ("grpc.max_send_message_length", settings.max_message_bytes),
        ("grpc.so_reuseport", 0),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        # Calls that arrive before the aio server asks for them wait in gRPC core's pending
        # queue, 1,000 by default (3,000 hard), and past it core CANCELS them before any
        # handler or bound sees them (a burst of 2,000 workflows lost a fifth of its calls).
        # The queue follows the RPC bound, which then answers overload with RESOURCE_EXHAUSTED.
        ("grpc.server.max_pending_requests", settings.max_concurrent_rpcs),
        ("grpc.server.max_pending_requests_hard_limit", 2 * settings.max_concurrent_rpcs),
    ]


class ServiceRuntime:
    """One service process's gRPC server and its surroundings; ``shutdown`` is idempotent."""

    def __init__(self, name: str, settings: ServiceSettings, *,
                 span_exporter: SpanExporter | None = None,
                 registry: CollectorRegistry | None = None) -> None:
        self.name = name
        self.settings = settings
        self.metrics = MetricsEndpoint(registry)
        self.tracer_provider: TracerProvider = make_tracer_provider(
            name, settings.otlp_endpoint, span_exporter)
        # Without an exporter nothing is recorded, so the hot path gets the no-op tracer rather
        # than the SDK's sampling machinery (measured: half the cost of a span).
        traced = span_exporter is not None or bool(settings.otlp_endpoint)
        self.tracer: Tracer = (self.tracer_provider.get_tracer(f"dynbranch.{name}") if traced
                               else NoOpTracer())
        if traced:  # calls in and out carry the trace context (nothing added when off)
            trace_propagation.enable()
        self.tls = tls.load(settings.tls_cert_file, settings.tls_key_file, settings.tls_ca_file,
                            settings.tls_client_auth)
        # this process's channels reconnect to a restarted peer within about a second
        clients.configure_backoff(settings.reconnect_backoff_initial_ms,
                                  settings.reconnect_backoff_max_ms)
        if self.tls.calls:
            tls.configure_client(self.tls)  # this process's channels present this identity
        interceptors: list[grpc.aio.ServerInterceptor] = [ErrorInterceptor()]
        if traced:
            interceptors.insert(0, trace_propagation.ContextInterceptor())
        self.server = grpc.aio.server(interceptors=interceptors,
                                      options=server_options(settings),
                                      maximum_concurrent_rpcs=settings.max_concurrent_rpcs)
        self.health = health.aio.HealthServicer()
        self.port: int | None = None
        #: The plaintext health-only server and its port (``health_port`` >= 0).
        self.health_server: grpc.aio.Server | None = None
        self.health_port: int | None = None
        self._service_names: list[str] = []
        self._close_hooks: list[CloseHook] = []
        self._drain_hooks: list[Callable[[], None]] = []
        self._stopped = asyncio.Event()
        self._shutdown_task: asyncio.Task[None] | None = None

    @property
    def registry(self) -> CollectorRegistry:
        """Registry every metric of this service registers into."""
        return self.metrics.registry

    @property
    def address(self) -> str:
        """``host:port`` the server listens on (after start)."""
        return f"{self.settings.host}:{self.port}"

    def add_service(self, add_fn: Callable[[Any, grpc.aio.Server], None], servicer: Any,
                    full_name: str) -> None:
        """Register a servicer (``add_XServicer_to_server``) under its full service name."""
        add_fn(servicer, self.server)
        self._service_names.append(full_name)

    def on_drain(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` when shutdown begins, before the drain delay: e.g. a servicer's
        long-lived streams stop taking work and end once their running work is answered, so
        that the grace period is not spent waiting on streams that would never end."""
        self._drain_hooks.append(hook)

    def on_close(self, hook: CloseHook) -> None:
        """Run ``hook`` after the server stopped (close LMDB envs, channels, tasks)."""
        self._close_hooks.append(hook)

    async def start(self) -> int:
        """Bind, start serving and report SERVING; returns the bound gRPC port."""
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        names = [*self._service_names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                 reflection.SERVICE_NAME]
        reflection.enable_server_reflection(names, self.server)
        bind = f"{self.settings.host}:{self.settings.port}"
        self.port = (self.server.add_secure_port(bind, tls.server_credentials(self.tls))
                     if self.tls.serves else self.server.add_insecure_port(bind))
        if self.port == 0:
            raise OSError(f"{self.name}: cannot bind {self.settings.host}:{self.settings.port}")
        if self.settings.health_port >= 0:
            await self._start_health_port()
        if self.settings.metrics_port >= 0:
            self.metrics.start(self.settings.host, self.settings.metrics_port)
        await self.server.start()
        await self._set_status(health_pb2.HealthCheckResponse.SERVING)
        log.info("%s serving on %s", self.name, self.address,
                 extra={"service": self.name, "port": self.port, "metrics_port": self.metrics.port})
        return self.port

    async def _start_health_port(self) -> None:
        """Serve the same health statuses, and nothing else, on a plaintext port for probes."""
        self.health_server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.health_server)
        bind = f"{self.settings.host}:{self.settings.health_port}"
        self.health_port = self.health_server.add_insecure_port(bind)
        if self.health_port == 0:
            raise OSError(f"{self.name}: cannot bind the health port {bind}")
        await self.health_server.start()

    async def _set_status(self, status: int) -> None:
        for name in ["", *self._service_names]:
            await self.health.set(name, status)

    async def shutdown(self) -> None:
        """NOT_SERVING and drain hooks → drain delay → stop(grace) → close hooks; safe to call
        twice."""
        if self._shutdown_task is None:
            self._shutdown_task = asyncio.ensure_future(self._shutdown())
        await asyncio.shield(self._shutdown_task)

    async def _shutdown(self) -> None:
        await self.health.enter_graceful_shutdown()
        for drain in self._drain_hooks:
            drain()
        if self.settings.drain_delay_s:
            await asyncio.sleep(self.settings.drain_delay_s)
        await self.server.stop(self.settings.grace_s)
        if self.health_server is not None:
            await self.health_server.stop(0)
        for hook in reversed(self._close_hooks):
            try:
                await hook()
            except Exception:  # noqa: BLE001 - one failing hook must not skip the others
                log.exception("%s: close hook failed", self.name)
        self.metrics.stop()
        self.tracer_provider.shutdown()
        self._stopped.set()
        log.info("%s stopped", self.name, extra={"service": self.name})

    async def wait_stopped(self) -> None:
        """Wait until shutdown has completed."""
        await self._stopped.wait()

    def announce(self, extra: dict[str, Any] | None = None) -> None:
        """Print one JSON line on stdout with the bound ports and where spans go
        (``otlp_endpoint``, "" when tracing is off), read by ``dynbranch up``."""
        line = {"event": "listening", "service": self.name, "address": self.address,
                "port": self.port, "metrics_port": self.metrics.port,
                "otlp_endpoint": self.settings.otlp_endpoint,
                **({"health_port": self.health_port} if self.health_port is not None else {}),
                **(extra or {})}
        print(json.dumps(line), flush=True)


def freeze_startup_heap() -> None:
    """Collect once, then move every object alive now (settings, descriptors, a corpus index,
    caches built at start) out of the cyclic collector's sight (``gc.freeze``). A long-lived
    startup heap otherwise makes every full collection scan it: on the in-process experiment
    mesh those collections paused the loop for 65-100 ms (1.3-2.0 simulated s at time scale
    0.05). Objects are still freed by reference counting."""
    gc.collect()
    gc.freeze()


async def serve_until_signal(runtime: ServiceRuntime,
                             signals: Sequence[signal.Signals] = (signal.SIGTERM, signal.SIGINT)
                             ) -> None:
    """Start, announce, then shut down gracefully on SIGTERM or SIGINT."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    await runtime.start()
    freeze_startup_heap()
    runtime.announce()
    await stop.wait()
    log.info("%s: signal received, shutting down", runtime.name)
    await runtime.shutdown()


def run_service(build: Callable[[], Awaitable[ServiceRuntime]]) -> int:
    """Entry-point helper: uvloop, build the runtime inside the loop, serve until a signal."""
    install_uvloop()

    async def main() -> None:
        runtime = await build()
        await serve_until_signal(runtime)

    asyncio.run(main())
    return 0


__all__ = ["ServiceRuntime", "freeze_startup_heap", "install_uvloop", "run_service",
           "serve_until_signal", "server_options"]
