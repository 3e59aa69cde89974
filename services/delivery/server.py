"""Delivery entry point: ``python -m services.delivery`` (or ``dynbranch serve delivery``)."""

from __future__ import annotations

import argparse
import sys

from opentelemetry.sdk.trace.export import SpanExporter

from services.common.cli_args import add_service_args, overrides_from
from services.common.config import ConfigError, load_settings
from services.common.pb import delivery_pb2, delivery_pb2_grpc
from services.common.server import ServiceRuntime, run_service
from services.common.telemetry import configure_logging
from services.common.unbuilt import unbuilt_servicer
from services.delivery.config import DeliverySettings

SERVICE_NAME = delivery_pb2.DESCRIPTOR.services_by_name["Delivery"].full_name
WHY = "the LADS sender lands in a later release"


async def build_runtime(settings: DeliverySettings, *,
                        span_exporter: SpanExporter | None = None) -> ServiceRuntime:
    """A runtime serving the Delivery service."""
    runtime = ServiceRuntime("delivery", settings, span_exporter=span_exporter)
    servicer = unbuilt_servicer(delivery_pb2_grpc.DeliveryServicer, "Delivery", WHY)
    runtime.add_service(delivery_pb2_grpc.add_DeliveryServicer_to_server, servicer, SERVICE_NAME)
    return runtime


def main(argv: list[str] | None = None) -> int:
    """Parse flags, load settings, serve until SIGTERM."""
    parser = argparse.ArgumentParser(prog="dynbranch serve delivery",
                                     description="Run the delivery service (the LADS sender lands in a later release).")
    add_service_args(parser)
    args = parser.parse_args(argv)
    try:
        settings = load_settings(DeliverySettings, config_file=args.config, **overrides_from(args))
    except ConfigError as exc:
        print(f"delivery: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format)
    return run_service(lambda: build_runtime(settings))


__all__ = ["SERVICE_NAME", "build_runtime", "main"]
