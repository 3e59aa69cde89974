"""Admission entry point: ``python -m services.admission`` (or ``dynbranch serve admission``)."""

from __future__ import annotations

import argparse
import sys

from opentelemetry.sdk.trace.export import SpanExporter

from services.admission.config import AdmissionSettings
from services.admission.policy import FixedPolicy
from services.admission.servicer import AdmissionServicer
from services.common.cli_args import add_service_args, overrides_from
from services.common.config import ConfigError, load_settings
from services.common.pb import admission_pb2, admission_pb2_grpc
from services.common.server import ServiceRuntime, run_service
from services.common.telemetry import configure_logging

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
    parser = argparse.ArgumentParser(
        prog="dynbranch serve admission",
        description="Run the admission service (a fixed policy until C3 lands).")
    add_service_args(parser)
    args = parser.parse_args(argv)
    try:
        settings = load_settings(AdmissionSettings, config_file=args.config, **overrides_from(args))
    except ConfigError as exc:
        print(f"admission: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format)
    return run_service(lambda: build_runtime(settings))


__all__ = ["SERVICE_NAME", "build_runtime", "main"]
