"""Client helpers: retries are declared only for idempotent methods; deadlines are bounded."""

from __future__ import annotations

import json

import grpc
import pytest

from services.common.pb import engine_pb2_grpc
from services.common.runtime import clients


def _declared() -> set[tuple[str, str]]:
    config = json.loads(clients.service_config())
    (method_config,) = config["methodConfig"]
    assert method_config["retryPolicy"]["retryableStatusCodes"] == ["UNAVAILABLE"]
    return {(n["service"], n["method"]) for n in method_config["name"]}


def test_non_idempotent_calls_are_never_retried() -> None:
    declared = _declared()
    for never in [("dynbranch.v1.EngineAgent", "Generate"), ("dynbranch.v1.Gateway", "Call"),
                  ("dynbranch.v1.SubgraphLibrary", "Promote"),
                  ("dynbranch.v1.SubgraphLibrary", "WriteRecords"),
                  ("dynbranch.v1.Corpus", "BeginWrite"), ("dynbranch.v1.Corpus", "Commit"),
                  ("dynbranch.v1.Corpus", "BeginReconcile")]:
        assert never not in declared
    assert ("dynbranch.v1.EngineAgent", "Abort") in declared


def test_every_declared_method_exists() -> None:
    from services.common.pb import (
        admission_pb2,
        corpus_pb2,
        csl_pb2,
        delivery_pb2,
        engine_pb2,
        gateway_pb2,
    )
    services = {d.full_name: d for m in (admission_pb2, corpus_pb2, csl_pb2, delivery_pb2,
                                         engine_pb2, gateway_pb2)
                for d in m.DESCRIPTOR.services_by_name.values()}
    for service, method in _declared():
        if service.startswith("grpc."):
            continue
        assert method in services[service].methods_by_name, (service, method)


class _Ctx:
    def __init__(self, remaining: float | None) -> None:
        self.remaining = remaining

    def time_remaining(self) -> float | None:
        return self.remaining


@pytest.mark.parametrize("remaining, cap, expected", [
    (None, None, clients.DEFAULT_DEADLINE_S), (3.0, None, 3.0), (3.0, 1.0, 1.0),
    (-2.0, None, clients.MIN_DEADLINE_S)])
def test_deadline_follows_the_callers_budget(remaining, cap, expected) -> None:
    assert clients.deadline(_Ctx(remaining), cap_s=cap) == expected


async def test_idempotent_call_is_retried_on_unavailable() -> None:
    """Abort to a server that answers UNAVAILABLE twice then OK succeeds through the channel."""
    from services.common.pb import engine_pb2
    attempts = []

    class Flaky(engine_pb2_grpc.EngineAgentServicer):
        async def Abort(self, request, context):
            attempts.append(1)
            if len(attempts) < 3:
                await context.abort(grpc.StatusCode.UNAVAILABLE, "warming up")
            return engine_pb2.AbortResponse(aborted=True)

    server = grpc.aio.server()
    engine_pb2_grpc.add_EngineAgentServicer_to_server(Flaky(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with clients.open_channel(f"127.0.0.1:{port}") as channel:
        reply = await engine_pb2_grpc.EngineAgentStub(channel).Abort(
            engine_pb2.AbortRequest(request_id="x"), timeout=5)
    await server.stop(0)
    assert reply.aborted and len(attempts) == 3


async def test_a_restarted_peer_is_used_again_within_about_a_second() -> None:
    """After the peer has been down long enough for gRPC's default back-off to grow past
    seconds, a channel with the mesh's capped back-off reaches it again within ~1 s of it
    serving (issue 38: 6.2–14.4 s after a 60 s outage with the default)."""
    import asyncio
    import socket
    import time

    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    target = f"127.0.0.1:{port}"

    async def serve() -> grpc.aio.Server:
        server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
        server.add_insecure_port(target)
        await server.start()
        return server

    assert ("grpc.max_reconnect_backoff_ms", 1000) in clients.channel_options()
    server = await serve()
    async with clients.open_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        await stub.Check(health_pb2.HealthCheckRequest(), timeout=2)
        await server.stop(0)
        end = time.monotonic() + 6.0
        while time.monotonic() < end:  # failed attempts: the back-off grows to its cap
            channel.get_state(try_to_connect=True)
            await asyncio.sleep(0.05)
        server = await serve()
        started = time.monotonic()
        try:
            await stub.Check(health_pb2.HealthCheckRequest(), timeout=10, wait_for_ready=True)
            took = time.monotonic() - started
        finally:
            await server.stop(0)
    assert took < 1.5, f"reconnected {took:.2f} s after the peer served again"


def test_the_back_off_is_a_setting_checked_in_order() -> None:
    from services.common.values.config import ConfigError, ServiceSettings, load_settings

    with pytest.raises(ConfigError, match="reconnect_backoff_initial_ms must be <="):
        load_settings(ServiceSettings, environ={}, reconnect_backoff_initial_ms=5000,
                      reconnect_backoff_max_ms=1000)
    with pytest.raises(ValueError, match="reconnect back-off"):
        clients.configure_backoff(0, 1000)
