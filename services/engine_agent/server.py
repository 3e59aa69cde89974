"""Engine agent entry point: ``python -m services.engine_agent`` (or ``dynbranch serve engine``)."""

from __future__ import annotations

import logging

from opentelemetry.sdk.trace.export import SpanExporter

from services.common.pb import engine_pb2, engine_pb2_grpc
from services.common.runtime.cli_args import Flag, service_main
from services.common.runtime.server import ServiceRuntime
from services.engine_agent.backend import EngineBackend
from services.engine_agent.backends import BACKEND_NAMES, make_backend
from services.engine_agent.config import EngineAgentSettings
from services.engine_agent.core import EngineAgent
from services.engine_agent.servicer import EngineAgentServicer, EngineMetrics

log = logging.getLogger(__name__)
SERVICE_NAME = engine_pb2.DESCRIPTOR.services_by_name["EngineAgent"].full_name


async def build_runtime(settings: EngineAgentSettings, *, backend: EngineBackend | None = None,
                        span_exporter: SpanExporter | None = None) -> ServiceRuntime:
    """A runtime serving the EngineAgent service over a started backend (not yet listening)."""
    runtime = ServiceRuntime("engine_agent", settings, span_exporter=span_exporter)
    agent = EngineAgent.from_settings(settings, backend or make_backend(settings))
    await agent.start()
    runtime.on_close(agent.close)
    servicer = EngineAgentServicer(agent, EngineMetrics(runtime.registry), runtime.tracer,
                                   max_prompt_bytes=settings.max_prompt_bytes,
                                   load_interval_s=settings.load_interval_s,
                                   max_mux_running=settings.max_concurrent_rpcs)
    runtime.add_service(engine_pb2_grpc.add_EngineAgentServicer_to_server, servicer, SERVICE_NAME)
    runtime.on_drain(servicer.sessions.drain)  # GenerateMux streams end with their last answer
    return runtime


def main(argv: list[str] | None = None) -> int:
    """Parse flags, load settings, serve until SIGTERM."""
    return service_main(argv, service="engine", settings_cls=EngineAgentSettings,
                        description="Run one engine agent (default backend: sim).",
                        build=build_runtime, flags=[
                            Flag("--engine-id", "engine_id", "identity of the engine in the mesh"),
                            Flag("--model", "model", "model name callers must ask for"),
                            Flag("--backend", "backend", "engine backend",
                                 {"choices": BACKEND_NAMES}),
                            Flag("--preset", "preset", "sim cost-model preset (qwen3-32b-h200)"),
                            Flag("--time-scale", "time_scale", "wall seconds per simulated second",
                                 {"type": float})])


__all__ = ["SERVICE_NAME", "build_runtime", "main"]
