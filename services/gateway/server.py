"""Gateway entry point: ``python -m services.gateway`` (or ``dynbranch serve gateway``)."""

from __future__ import annotations

import argparse
import sys

from opentelemetry.sdk.trace.export import SpanExporter

from services.common.cli_args import add_service_args, overrides_from
from services.common.config import ConfigError, load_settings
from services.common.pb import gateway_pb2, gateway_pb2_grpc
from services.common.server import ServiceRuntime, run_service
from services.common.telemetry import configure_logging
from services.gateway.config import GatewaySettings
from services.gateway.engine_client import EnginePool
from services.gateway.servicer import GatewayMetrics, GatewayServicer

SERVICE_NAME = gateway_pb2.DESCRIPTOR.services_by_name["Gateway"].full_name


async def build_runtime(settings: GatewaySettings, *,
                        span_exporter: SpanExporter | None = None) -> ServiceRuntime:
    """A runtime serving the Gateway service, connected to its engine agents."""
    runtime = ServiceRuntime("gateway", settings, span_exporter=span_exporter)
    engines = EnginePool(settings.engines)
    runtime.on_close(engines.close)
    await engines.start(settings.engine_connect_timeout_s)
    servicer = GatewayServicer(settings, engines, GatewayMetrics(runtime.registry),
                               runtime.tracer)
    runtime.add_service(gateway_pb2_grpc.add_GatewayServicer_to_server, servicer, SERVICE_NAME)
    return runtime


def main(argv: list[str] | None = None) -> int:
    """Parse flags, load settings, serve until SIGTERM."""
    parser = argparse.ArgumentParser(prog="dynbranch serve gateway",
                                     description="Run the gateway in front of engine agents.")
    add_service_args(parser)
    parser.add_argument("--engine", action="append", dest="engines", metavar="HOST:PORT",
                        help="engine agent target (repeatable)")
    args = parser.parse_args(argv)
    try:
        settings = load_settings(GatewaySettings, config_file=args.config, engines=args.engines,
                                 **overrides_from(args))
    except ConfigError as exc:
        print(f"gateway: {exc}", file=sys.stderr)
        return 2
    if not settings.engines:
        print("gateway: engines: at least one engine agent target is required", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format)
    return run_service(lambda: build_runtime(settings))


__all__ = ["SERVICE_NAME", "build_runtime", "main"]
