"""CallMux: many demands on one stream, each with its own status, deadline and cancellation, as
its own Call would have had (DESIGN.md §6 hop budget); a gateway without it gets Calls."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from services.common.pb import common_pb2, gateway_pb2, gateway_pb2_grpc
from services.common.runtime.clients import open_channel
from services.engine_agent import EngineAgentClient
from services.gateway.client import GatewayClient
from tests.factories import call_request, engine_agent, gateway, sampling

ENGINE = gateway_pb2.RESULT_SOURCE_ENGINE


async def _wait_idle(address: str) -> None:
    direct = EngineAgentClient(address)
    try:
        async for view in direct.watch_load(interval_s=0.02, timeout_s=10):
            if view.running == 0 and view.waiting == 0:
                return
    finally:
        await direct.close()


async def test_concurrent_calls_share_one_stream_and_each_gets_its_own_answer() -> None:
    async with engine_agent() as eng, gateway([eng.address]) as gw, \
            GatewayClient(gw.address) as client:
        requests = [call_request(f"question {i}: route me") for i in range(24)]
        for i, request in enumerate(requests):
            request.demand.header.id = f"call-{i}"
        replies = await asyncio.gather(*(client.call(r, timeout_s=10) for r in requests))
        stream = client.mux._streams.current
        # A refused demand gets its own status, naming the field; the stream goes on.
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await client.call(call_request(""), timeout_s=5)
        after = await client.call(call_request("one more"), timeout_s=5)
        assert client.mux._streams.current is stream
    assert [r.request_id for r in replies] == [f"call-{i}" for i in range(24)]
    assert all(r.source == ENGINE and r.text for r in replies)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "demand.prompt" in (info.value.details() or "")
    assert after.source == ENGINE


async def test_a_caller_that_stops_waiting_stops_its_demand_and_not_the_others() -> None:
    long = call_request("a very long story", sampling=sampling(3000, ignore_eos=True))
    async with engine_agent(preset="qwen3-32b-h200", time_scale=1.0) as eng, \
            gateway([eng.address]) as gw, GatewayClient(gw.address) as client:
        cancelled = asyncio.create_task(client.call(long, timeout_s=60))
        await asyncio.sleep(0.3)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        await _wait_idle(eng.address)  # 3000 tokens would take the engine about a minute
        with pytest.raises(grpc.aio.AioRpcError) as late:
            await client.call(long, timeout_s=0.3)
        await _wait_idle(eng.address)
        short = await client.call(call_request("short"), timeout_s=10)
    assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert short.source == ENGINE


async def _raw(address: str, messages: list[gateway_pb2.CallMuxRequest]
               ) -> list[gateway_pb2.CallMuxResult]:
    channel = open_channel(address)
    stub = gateway_pb2_grpc.GatewayStub(channel)

    async def requests() -> AsyncIterator[gateway_pb2.CallMuxRequest]:
        for message in messages:
            yield message

    try:
        return [result async for response in stub.CallMux(requests(), timeout=10)
                for result in response.results]
    finally:
        await channel.close()


async def test_every_start_gets_exactly_one_result_and_a_bad_start_is_refused_alone() -> None:
    long = call_request("a very long story", sampling=sampling(3000, ignore_eos=True))
    starts = [
        gateway_pb2.CallMuxStart(call_id=1, request=long, timeout_s=30),
        gateway_pb2.CallMuxStart(call_id=1, request=call_request("same id"), timeout_s=5),
        gateway_pb2.CallMuxStart(call_id=2, request=call_request("no wait"), timeout_s=0),
        gateway_pb2.CallMuxStart(call_id=3, timeout_s=5),
        gateway_pb2.CallMuxStart(call_id=4, request=call_request("fine"), timeout_s=5),
    ]
    async with engine_agent(preset="qwen3-32b-h200", time_scale=1.0) as eng, \
            gateway([eng.address]) as gw:
        results = await _raw(gw.address, [gateway_pb2.CallMuxRequest(starts=starts),
                                          gateway_pb2.CallMuxRequest(cancels=[1, 99])])
        await _wait_idle(eng.address)
    by_id: dict[int, list[gateway_pb2.CallMuxResult]] = {}
    for result in results:
        by_id.setdefault(result.call_id, []).append(result)
    assert sorted(by_id) == [1, 2, 3, 4]
    # The second start under id 1 is refused at once; the first is cancelled by its message.
    assert sorted(r.error.code for r in by_id[1]) == [grpc.StatusCode.CANCELLED.value[0],
                                                      grpc.StatusCode.ALREADY_EXISTS.value[0]]
    (bad_timeout,), (no_request,), (fine,) = by_id[2], by_id[3], by_id[4]
    assert bad_timeout.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "starts.timeout_s" in bad_timeout.error.message
    assert no_request.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "starts.request" in no_request.error.message
    assert fine.answer.source == ENGINE and fine.answer.text


class _CallOnly(gateway_pb2_grpc.GatewayServicer):
    """A gateway from before CallMux: Call only."""

    def __init__(self) -> None:
        self.calls = 0

    async def Call(self, request: gateway_pb2.CallRequest,
                   context: grpc.aio.ServicerContext) -> gateway_pb2.CallResponse:
        self.calls += 1
        return gateway_pb2.CallResponse(text=request.demand.prompt, source=ENGINE,
                                        finish_reason=common_pb2.FINISH_REASON_LENGTH)


async def test_a_gateway_without_call_mux_gets_calls() -> None:
    server = grpc.aio.server()
    servicer = _CallOnly()
    gateway_pb2_grpc.add_GatewayServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with GatewayClient(f"127.0.0.1:{port}") as client:
            first = await client.call(call_request("first"), timeout_s=5)
            second = await client.call(call_request("second"), timeout_s=5)
            assert not client.mux.supported
    finally:
        await server.stop(None)
    assert (first.text, second.text, servicer.calls) == ("first", "second", 2)


async def test_a_demand_on_the_stream_runs_in_its_callers_trace(monkeypatch) -> None:  # noqa: ANN001
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import get_current_span

    from services.common.runtime import trace_propagation
    from services.common.values.tracing import within, workflow_context
    from services.gateway.auth import LOCAL_TENANT

    monkeypatch.setattr(trace_propagation, "_enabled", True)  # a caller that traces
    spans = InMemorySpanExporter()
    caller = workflow_context("acme/caller-trace")
    async with engine_agent() as eng, gateway([eng.address], span_exporter=spans) as gw, \
            GatewayClient(gw.address) as client:
        with within(caller):
            await client.call(call_request("traced"), timeout_s=5)
        await client.call(call_request("not traced", workflow_id="wf-7"), timeout_s=5)
    traced, untraced = sorted((s for s in spans.get_finished_spans()
                               if s.name == "gateway.call"), key=lambda s: s.start_time)
    assert traced.context.trace_id == get_current_span(caller).get_span_context().trace_id
    # A demand sent outside any span goes to its workflow's own trace, not the stream's first.
    workflow = workflow_context(f"{LOCAL_TENANT}/wf-7")
    assert untraced.context.trace_id == get_current_span(workflow).get_span_context().trace_id


async def test_a_stopping_gateway_answers_its_running_demands_and_ends_its_streams() -> None:
    async with engine_agent(preset="qwen3-32b-h200", time_scale=1.0) as eng, \
            gateway([eng.address], grace_s=20) as gw, GatewayClient(gw.address) as client:
        running = asyncio.create_task(client.call(
            call_request("a short story", sampling=sampling(24, ignore_eos=True)), timeout_s=10))
        await asyncio.sleep(0.1)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await gw.shutdown()
        stopped_s = loop.time() - started
        answer = await running
        with pytest.raises(grpc.aio.AioRpcError) as late:
            await client.call(call_request("too late"), timeout_s=2)
    assert answer.source == ENGINE  # answered, not cancelled at the end of the grace period
    assert stopped_s < 10  # the open stream ended with its last demand: no 20 s grace wait
    assert late.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_large_demands_at_once_are_answered_and_an_oversize_one_fails_alone() -> None:
    # 20 × 250 kB: more at once than one 4 MiB message holds, each within the model's length.
    big = [call_request(f"{i} " + "x" * 250_000, sampling=sampling(4)) for i in range(20)]
    oversize = call_request("y" * (5 << 20), sampling=sampling(4))
    async with engine_agent() as eng, gateway([eng.address]) as gw, \
            GatewayClient(gw.address) as client:
        results = await asyncio.gather(*(client.call(r, timeout_s=30) for r in [*big, oversize]),
                                       return_exceptions=True)
        after = await client.call(call_request("small"), timeout_s=5)
    *answers, refused = results
    assert all(isinstance(a, gateway_pb2.CallResponse) and a.source == ENGINE for a in answers)
    assert isinstance(refused, grpc.aio.AioRpcError)
    assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert after.source == ENGINE
