"""The pass-through gateway over real gRPC: routing, answers equal to the engine's, bad input."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from services.common.pb import gateway_pb2
from services.engine_agent.client import EngineAgentClient
from services.gateway.client import GatewayClient
from tests.factories import MODEL, call_request, engine_agent, gateway, generate_request, sampling


async def test_call_returns_what_the_engine_generates() -> None:
    async with engine_agent(engine_id="e0") as eng, gateway([eng.address]) as gw:
        async with GatewayClient(gw.address) as client:
            reply = await client.call(call_request(prompt="route: card charged twice"))
        direct = EngineAgentClient(eng.address)
        events = [e async for e in direct.generate(
            generate_request("d", prompt="route: card charged twice"), timeout_s=5)]
        await direct.close()
        assert reply.text == events[-1].finished.text
        assert reply.engine_id == "e0" and reply.source == gateway_pb2.RESULT_SOURCE_ENGINE
        assert reply.usage.completion_tokens > 0 and reply.gateway_s > 0


async def test_concurrent_calls_spread_over_the_least_loaded_engines() -> None:
    async with engine_agent(engine_id="e0", preset="qwen3-32b-h200", time_scale=0.05) as e0, \
            engine_agent(engine_id="e1", preset="qwen3-32b-h200", time_scale=0.05) as e1, \
            gateway([e0.address, e1.address]) as gw:
        async with GatewayClient(gw.address) as client:
            replies = await asyncio.gather(*(
                client.call(call_request(prompt=f"question {i}", sampling=sampling(32)))
                for i in range(8)))
    used = [r.engine_id for r in replies]
    assert used.count("e0") == 4 and used.count("e1") == 4


BAD = [
    (gateway_pb2.CallRequest(), grpc.StatusCode.INVALID_ARGUMENT, "demand: required"),
    (call_request(prompt=""), grpc.StatusCode.INVALID_ARGUMENT, "demand.prompt: required"),
    (call_request(model=""), grpc.StatusCode.INVALID_ARGUMENT, "demand.model: required"),
    (call_request(model="nope"), grpc.StatusCode.INVALID_ARGUMENT,
     "demand.model: unknown model 'nope' (served: test-model)"),
    (call_request(sampling=sampling(-1)), grpc.StatusCode.INVALID_ARGUMENT,
     "demand.sampling.max_tokens: must be >= 1"),
    (call_request(sampling=sampling(1 << 30)), grpc.StatusCode.INVALID_ARGUMENT,
     "demand.sampling.max_tokens: must be <="),
    (call_request(sampling=sampling(8, top_k=-2)), grpc.StatusCode.INVALID_ARGUMENT,
     "demand.sampling.top_k"),
    (call_request(prompt="y" * 1_500_000), grpc.StatusCode.RESOURCE_EXHAUSTED,
     "demand.prompt: larger than"),
    (call_request(prompt="many words " * 100_000), grpc.StatusCode.RESOURCE_EXHAUSTED,
     "demand.prompt"),
    (call_request(prompt="z" * 5_000_000), grpc.StatusCode.RESOURCE_EXHAUSTED, ""),
]


@pytest.mark.parametrize("request_, code, message", BAD, ids=[str(i) for i in range(len(BAD))])
async def test_malformed_call_is_refused_naming_the_field(request_, code, message) -> None:
    async with engine_agent() as eng, gateway([eng.address]) as gw:
        async with GatewayClient(gw.address) as client:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await client.call(request_, timeout_s=10)
            assert info.value.code() == code
            assert message in info.value.details()
            assert (await client.call(call_request())).text  # the gateway still serves


async def test_lost_engine_gives_unavailable_not_a_hang() -> None:
    async with engine_agent() as eng:
        async with gateway([eng.address]) as gw:
            await eng.shutdown()
            async with GatewayClient(gw.address) as client:
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await client.call(call_request(), timeout_s=5)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_caller_deadline_is_propagated_to_the_engine() -> None:
    async with engine_agent(preset="qwen3-32b-h200", time_scale=1.0) as eng, \
            gateway([eng.address]) as gw:
        async with GatewayClient(gw.address) as client:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await client.call(call_request(sampling=sampling(3000, ignore_eos=True)),
                                  timeout_s=0.3)
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        direct = EngineAgentClient(eng.address)
        async for view in direct.watch_load(interval_s=0.02, timeout_s=5):
            if view.running == 0:
                break
        await direct.close()


async def test_one_trace_spans_gateway_and_engine() -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from services.engine_agent.config import EngineAgentSettings
    from services.engine_agent.server import build_runtime as build_engine
    from services.gateway.config import GatewaySettings
    from services.gateway.server import build_runtime as build_gateway

    engine_spans, gateway_spans = InMemorySpanExporter(), InMemorySpanExporter()
    eng = await build_engine(EngineAgentSettings(model=MODEL, preset="zero", time_scale=0,
                                                 metrics_port=-1), span_exporter=engine_spans)
    await eng.start()
    gw = await build_gateway(GatewaySettings(engines=[eng.address], metrics_port=-1, auth=False),
                             span_exporter=gateway_spans)
    await gw.start()
    async with GatewayClient(gw.address) as client:
        await client.call(call_request(workflow_id="wf-1"))
    await gw.shutdown()
    await eng.shutdown()
    (call,) = gateway_spans.get_finished_spans()
    (generate,) = engine_spans.get_finished_spans()
    assert call.name == "gateway.call" and call.attributes["dynbranch.workflow_id"] == "wf-1"
    assert generate.name == "engine.generate"
    assert generate.context.trace_id == call.context.trace_id
    assert generate.parent.span_id == call.context.span_id
