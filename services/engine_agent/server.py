"""Engine agent entry point: ``python -m services.engine_agent`` (or ``dynbranch serve engine``)."""

from __future__ import annotations

import argparse
import logging
import sys

from opentelemetry.sdk.trace.export import SpanExporter

from services.common.cli_args import add_service_args, overrides_from
from services.common.config import ConfigError, load_settings
from services.common.pb import engine_pb2, engine_pb2_grpc
from services.common.server import ServiceRuntime, run_service
from services.common.telemetry import configure_logging
from services.engine_agent.backend import EngineBackend
from services.engine_agent.backends import make_backend
from services.engine_agent.config import EngineAgentSettings
from services.engine_agent.servicer import EngineAgentServicer, EngineMetrics

log = logging.getLogger(__name__)
SERVICE_NAME = engine_pb2.DESCRIPTOR.services_by_name["EngineAgent"].full_name


async def build_runtime(settings: EngineAgentSettings, *, backend: EngineBackend | None = None,
                        span_exporter: SpanExporter | None = None) -> ServiceRuntime:
    """A runtime serving the EngineAgent service over a started backend (not yet listening)."""
    runtime = ServiceRuntime("engine_agent", settings, span_exporter=span_exporter)
    backend = backend or make_backend(settings)
    await backend.start()
    runtime.on_close(backend.close)
    servicer = EngineAgentServicer(settings.engine_id, backend, EngineMetrics(runtime.registry),
                                   runtime.tracer, max_prompt_bytes=settings.max_prompt_bytes,
                                   load_interval_s=settings.load_interval_s)
    runtime.add_service(engine_pb2_grpc.add_EngineAgentServicer_to_server, servicer, SERVICE_NAME)
    return runtime


def main(argv: list[str] | None = None) -> int:
    """Parse flags, load settings, serve until SIGTERM."""
    parser = argparse.ArgumentParser(prog="dynbranch serve engine",
                                     description="Run one engine agent (default backend: sim).")
    add_service_args(parser)
    parser.add_argument("--engine-id", help="identity of the engine in the mesh")
    parser.add_argument("--model", help="model name callers must ask for")
    parser.add_argument("--backend", choices=["sim", "vllm", "openai", "sglang"])
    parser.add_argument("--preset", help="sim cost-model preset (e.g. qwen3-32b-h200)")
    parser.add_argument("--time-scale", type=float, help="wall seconds per simulated second")
    args = parser.parse_args(argv)
    try:
        settings = load_settings(EngineAgentSettings, config_file=args.config,
                                 engine_id=args.engine_id, model=args.model, backend=args.backend,
                                 preset=args.preset, time_scale=args.time_scale,
                                 **overrides_from(args))
    except ConfigError as exc:
        print(f"engine_agent: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format)
    return run_service(lambda: build_runtime(settings))


__all__ = ["SERVICE_NAME", "build_runtime", "main"]
