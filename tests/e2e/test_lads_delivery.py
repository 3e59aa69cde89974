"""A tool result returned through the gateway reaches the engine that holds the workflow's
history, through the delivery service, and its continuation's answer comes back (LADS)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
import pytest

from services.common.pb import common_pb2, delivery_pb2
from services.delivery.config import DeliverySettings
from services.delivery.server import build_runtime as build_delivery
from services.engine_agent.client import EngineAgentClient
from services.gateway.client import GatewayClient
from tests.factories import MODEL, call_request, engine_agent, gateway, generate_request, sampling

HISTORY = "You are a shopping agent. Inspect the product and its reviews carefully. " * 10


@asynccontextmanager
async def delivery(engines: dict[str, str]) -> AsyncIterator[Any]:
    runtime = await build_delivery(DeliverySettings(
        engines=[f"{k}={v}" for k, v in engines.items()], link_bytes_per_s=1e6,
        metrics_port=-1, grace_s=0.5))
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.shutdown()


def deliver(history: str, **kw: Any) -> delivery_pb2.DeliverRequest:
    observation = b"Product: Fusion Backpack, $59. Reviews: 4.6/5 over 12 reviews."
    return delivery_pb2.DeliverRequest(
        key=common_pb2.ResultKey(workflow_id="wf-shop", turn=1), history=history,
        observation=observation, tool="open", model=MODEL,
        prompt=f"{history}\nObservation: {observation.decode()}\n", sampling=sampling(16), **kw)


async def test_the_gateway_forwards_a_result_to_the_engine_holding_the_history() -> None:
    lease = {"lease_mode": "lads", "lease_headroom_blocks": 8, "lease_interval_s": 0.05}
    async with engine_agent(engine_id="e0", **lease) as e0, \
            engine_agent(engine_id="e1", **lease) as e1, \
            delivery({"e0": e0.address, "e1": e1.address}) as dl, \
            gateway([e0.address, e1.address], delivery=dl.address) as gw, \
            GatewayClient(gw.address) as client:
        first = await client.call(call_request(prompt=HISTORY, workflow_id="wf-shop",
                                               sampling=sampling(16)))
        history = HISTORY + first.text
        reply = await client.deliver_result(deliver(history), timeout_s=20)
        assert reply.engine_id == first.engine_id  # the engine that holds the history
        holder = EngineAgentClient(e0.address if first.engine_id == "e0" else e1.address)
        direct = [e async for e in holder.generate(generate_request(
            "direct", prompt=deliver(history).prompt, sampling=sampling(16)), timeout_s=5)]
        await holder.close()
        assert reply.finished.text == direct[-1].finished.text
        assert reply.finished.usage.cached_prompt_tokens > 0
        again = await client.deliver_result(deliver(history), timeout_s=20)
        assert again.finished.text == reply.finished.text


async def test_without_a_delivery_service_the_gateway_refuses_clearly() -> None:
    async with engine_agent(engine_id="e0") as e0, gateway([e0.address]) as gw, \
            GatewayClient(gw.address) as client:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await client.deliver_result(deliver("h"), timeout_s=5)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "delivery" in (refused.value.details() or "")


async def test_the_delivery_services_refusal_passes_through_naming_the_field() -> None:
    async with engine_agent(engine_id="e0") as e0, delivery({"e0": e0.address}) as dl, \
            gateway([e0.address], delivery=dl.address) as gw, \
            GatewayClient(gw.address) as client:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await client.deliver_result(deliver("h", engine_id="e9"), timeout_s=5)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (refused.value.details() or "").startswith("engine_id")
