"""The service runtime: health, reflection, metrics, error mapping, tracing, graceful shutdown."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import urllib.request

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.common.pb import admission_pb2, admission_pb2_grpc
from services.common.runtime.clients import open_channel
from services.common.runtime.server import ServiceRuntime
from services.common.values import errors
from services.common.values.config import ServiceSettings

NAME = "dynbranch.v1.Admission"
RAISES = {
    "bad": errors.InvalidArgument("coordinate", "must be template/stage"),
    "big": errors.PayloadTooLarge("coordinate", "too long"),
    "down": errors.Unavailable("csl is down"),
    "internal": errors.DynbranchError("secret detail /etc/passwd"),
    "crash": ZeroDivisionError("secret detail"),
}


class Probe(admission_pb2_grpc.AdmissionServicer):
    """Raises by coordinate; sleeps on 'slow'; records a span on 'trace'."""

    def __init__(self, runtime: ServiceRuntime) -> None:
        self.runtime = runtime

    async def OpenBranch(self, request, context):
        if request.coordinate in RAISES:
            raise RAISES[request.coordinate]
        if request.coordinate == "slow":
            await asyncio.sleep(0.4)
        attributes = {"c": request.coordinate}
        with self.runtime.tracer.start_as_current_span("open", attributes=attributes):
            return admission_pb2.OpenBranchResponse(open=True, reason="probe")


async def _start(**settings) -> tuple[ServiceRuntime, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    runtime = ServiceRuntime("probe", ServiceSettings(**settings), span_exporter=exporter)
    runtime.add_service(admission_pb2_grpc.add_AdmissionServicer_to_server, Probe(runtime), NAME)
    await runtime.start()
    return runtime, exporter


async def _open(channel: grpc.aio.Channel, coordinate: str) -> admission_pb2.OpenBranchResponse:
    stub = admission_pb2_grpc.AdmissionStub(channel)
    return await stub.OpenBranch(admission_pb2.OpenBranchRequest(coordinate=coordinate), timeout=5)


async def test_health_reports_serving_for_server_and_service() -> None:
    runtime, _ = await _start()
    async with open_channel(runtime.address) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        for service in ("", NAME):
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=2)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    await runtime.shutdown()


async def test_health_watch_streams_the_status_and_its_change_at_shutdown() -> None:
    """Watch is a server-streaming RPC whose servicer writes with ``context.write`` instead of
    yielding: the error interceptor must pass it through (Kubernetes' grpc probes and mesh
    clients use it)."""
    runtime, _ = await _start(grace_s=0.2)
    async with open_channel(runtime.address) as ch:
        call = health_pb2_grpc.HealthStub(ch).Watch(
            health_pb2.HealthCheckRequest(service=""), timeout=5)
        first = await call.read()
        assert first.status == health_pb2.HealthCheckResponse.SERVING
        stopping = asyncio.create_task(runtime.shutdown())
        second = await call.read()
        assert second.status == health_pb2.HealthCheckResponse.NOT_SERVING
        call.cancel()
        await stopping


async def test_reflection_lists_the_service() -> None:
    runtime, _ = await _start()
    async with open_channel(runtime.address) as ch:
        stub = reflection_pb2_grpc.ServerReflectionStub(ch)
        req = reflection_pb2.ServerReflectionRequest(list_services="")
        async for reply in stub.ServerReflectionInfo(iter([req]), timeout=2):
            names = {s.name for s in reply.list_services_response.service}
            break
    assert {NAME, "grpc.health.v1.Health"} <= names
    await runtime.shutdown()


@pytest.mark.parametrize("coordinate, code, message", [
    ("bad", grpc.StatusCode.INVALID_ARGUMENT, "coordinate: must be template/stage"),
    ("big", grpc.StatusCode.RESOURCE_EXHAUSTED, "coordinate: too long"),
    ("down", grpc.StatusCode.UNAVAILABLE, "csl is down"),
    ("internal", grpc.StatusCode.INTERNAL, "internal error"),
    ("crash", grpc.StatusCode.INTERNAL, "internal error"),
])
async def test_errors_map_to_status_without_leaking_internals(coordinate, code, message) -> None:
    runtime, _ = await _start()
    async with open_channel(runtime.address) as ch:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await _open(ch, coordinate)
    assert info.value.code() == code
    assert info.value.details() == message
    await runtime.shutdown()


async def test_metrics_endpoint_serves_prometheus_text() -> None:
    from prometheus_client import Counter

    runtime, _ = await _start()
    Counter("dynbranch_probe_total", "probe", registry=runtime.registry).inc(3)
    url = f"http://127.0.0.1:{runtime.metrics.port}/metrics"
    body = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=2).read().decode())
    assert "dynbranch_probe_total 3.0" in body
    assert "process_cpu_seconds_total" in body and "python_gc_collections_total" in body
    await runtime.shutdown()


async def test_the_listening_line_says_where_spans_go(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    """``dynbranch up`` reads it: "" when tracing is off."""
    for endpoint in ("", "127.0.0.1:4317"):
        runtime = ServiceRuntime("probe", ServiceSettings(metrics_port=-1,
                                                          otlp_endpoint=endpoint))
        runtime.announce()
        runtime.tracer_provider.shutdown()
        assert json.loads(capsys.readouterr().out)["otlp_endpoint"] == endpoint


async def test_spans_reach_the_in_memory_exporter() -> None:
    runtime, exporter = await _start()
    async with open_channel(runtime.address) as ch:
        await _open(ch, "trace")
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == ["open"] and spans[0].attributes["c"] == "trace"
    await runtime.shutdown()


async def test_shutdown_flips_health_then_drains_in_flight_calls() -> None:
    runtime, _ = await _start(drain_delay_s=0.2, grace_s=5)
    async with open_channel(runtime.address) as ch:
        in_flight = asyncio.create_task(_open(ch, "slow"))
        await asyncio.sleep(0.05)
        stopping = asyncio.create_task(runtime.shutdown())
        await asyncio.sleep(0.05)
        reply = await health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=2)
        assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING
        assert (await in_flight).reason == "probe"
        await stopping
    await runtime.shutdown()  # idempotent


def test_sigterm_stops_a_service_process_cleanly() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "services.delivery", "--port", "0",
                             "--metrics-port", "-1", "--log-format", "text"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        announced = json.loads(proc.stdout.readline())
        assert announced["event"] == "listening" and announced["port"] > 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        proc.kill()
    assert "stopped" in proc.stderr.read()


def test_bad_setting_fails_start_up_naming_the_key() -> None:
    out = subprocess.run([sys.executable, "-m", "services.delivery", "--set", "grace_s=-3"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "grace_s (from command line)" in out.stderr
