"""Every service's gRPC server bounds the RPCs it runs at once: one more is refused with
RESOURCE_EXHAUSTED by gRPC itself, never queued (issue 13, item 2)."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.config import ServiceSettings
from services.common.server import ServiceRuntime


def _held_method(release: asyncio.Event) -> grpc.GenericRpcHandler:
    async def held(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await release.wait()
        return request

    return grpc.method_handlers_generic_handler("test.Held", {
        "Wait": grpc.unary_unary_rpc_method_handler(held)})


async def test_rpcs_past_max_concurrent_rpcs_are_refused_with_resource_exhausted() -> None:
    runtime = ServiceRuntime("bounded", ServiceSettings(metrics_port=-1, grace_s=0,
                                                        max_concurrent_rpcs=1))
    release = asyncio.Event()
    runtime.server.add_generic_rpc_handlers((_held_method(release),))
    await runtime.start()
    try:
        async with grpc.aio.insecure_channel(runtime.address) as channel:
            held = channel.unary_unary("/test.Held/Wait")(b"x", timeout=10)
            await asyncio.sleep(0.2)  # the held call occupies the only slot
            stub = health_pb2_grpc.HealthStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            release.set()
            assert await held == b"x"
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        await runtime.shutdown()


def test_the_default_bound_is_large_and_out_of_range_values_fail() -> None:
    assert ServiceSettings().max_concurrent_rpcs == 16_384
    with pytest.raises(ValueError, match="max_concurrent_rpcs"):
        ServiceSettings(max_concurrent_rpcs=0)
