"""Delivery entry point: ``python -m services.delivery`` (or ``dynbranch serve delivery``)."""

from __future__ import annotations

from opentelemetry.sdk.trace.export import SpanExporter

from services.common.cli_args import service_main
from services.common.pb import delivery_pb2, delivery_pb2_grpc
from services.common.server import ServiceRuntime
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
    return service_main(argv, service="delivery", settings_cls=DeliverySettings,
                        description=f"Run the delivery service ({WHY}).", build=build_runtime)


__all__ = ["SERVICE_NAME", "build_runtime", "main"]
