"""Admission entry point: ``python -m services.admission`` (or ``dynbranch serve admission``)."""

from __future__ import annotations

from opentelemetry.sdk.trace.export import SpanExporter

from services.admission.config import AdmissionSettings
from services.admission.policy import FixedPolicy
from services.admission.servicer import AdmissionServicer
from services.common.cli_args import service_main
from services.common.pb import admission_pb2, admission_pb2_grpc
from services.common.server import ServiceRuntime

SERVICE_NAME = admission_pb2.DESCRIPTOR.services_by_name["Admission"].full_name


async def build_runtime(settings: AdmissionSettings, *,
                        span_exporter: SpanExporter | None = None) -> ServiceRuntime:
    """A runtime serving the Admission service."""
    runtime = ServiceRuntime("admission", settings, span_exporter=span_exporter)
    policy = FixedPolicy(open_branches=settings.open_branches, top_k=settings.top_k)
    servicer = AdmissionServicer(policy, runtime.registry)
    runtime.add_service(admission_pb2_grpc.add_AdmissionServicer_to_server, servicer, SERVICE_NAME)
    return runtime


def main(argv: list[str] | None = None) -> int:
    """Parse flags, load settings, serve until SIGTERM."""
    return service_main(argv, service="admission", settings_cls=AdmissionSettings,
                        description="Run the admission service (a fixed policy until C3 lands).",
                        build=build_runtime)


__all__ = ["SERVICE_NAME", "build_runtime", "main"]
