"""Every service's gRPC server bounds the RPCs it runs at once: one more is refused with
RESOURCE_EXHAUSTED by gRPC itself, never queued."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.runtime.server import ServiceRuntime
from services.common.values.config import ServiceSettings


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


async def test_a_burst_far_past_grpc_cores_pending_queue_is_answered_in_full() -> None:
    """gRPC core keeps calls that arrived before the server asked for them in a pending queue of
    1,000 by default (3,000 hard) and CANCELS the rest, before any handler or bound sees them:
    2,000 workflows at once lost a fifth of their calls that way. The queue follows
    ``max_concurrent_rpcs``, so a burst below the bound is served in full."""
    runtime = ServiceRuntime("burst", ServiceSettings(metrics_port=-1, grace_s=0))
    release = asyncio.Event()
    runtime.server.add_generic_rpc_handlers((_held_method(release),))
    await runtime.start()
    try:
        async with grpc.aio.insecure_channel(runtime.address) as channel:
            wait = channel.unary_unary("/test.Held/Wait")
            calls = [wait(b"x", timeout=60) for _ in range(3_500)]
            await asyncio.sleep(0.5)
            release.set()
            replies = await asyncio.gather(*calls, return_exceptions=True)
        failures = [r for r in replies if isinstance(r, BaseException)]
        assert not failures, f"{len(failures)} calls failed, e.g. {failures[0]!r}"
    finally:
        await runtime.shutdown()
