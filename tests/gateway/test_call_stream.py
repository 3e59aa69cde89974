"""The gateway's CallStream rpc over real gRPC: a stage's text as it is decoded, then the whole
answer; a handler that adopts the fill still running for it streams the fill's text (its text so
far at once), and says so on every delta."""

from __future__ import annotations

import json
import time

import grpc
import pytest

from services.common.pb import gateway_pb2
from tests.gateway.mesh import mesh

INPUTS = {"functions": json.dumps([{"name": "get_weather"}, {"name": "book_flight"}]),
          "query": "Will it snow in Tromso tomorrow?"}
ENGINE, FILL = gateway_pb2.RESULT_SOURCE_ENGINE, gateway_pb2.RESULT_SOURCE_PROMOTED_FILL


async def test_a_streamed_handler_gets_the_adopted_fills_text_as_it_is_decoded() -> None:
    async with mesh(time_scale=0.1) as m:
        m.client.use_builtin("routing")
        await m.client.call_stage("routing", "router", workflow_id="wf-s", inputs=INPUTS,
                                  offered=("get_weather", "book_flight"), max_tokens=24)
        started = time.monotonic()
        firsts, deltas, answer = None, [], None
        async for event in m.client.stream_stage("routing", "handler", workflow_id="wf-s",
                                                 inputs=INPUTS, candidate="get_weather"):
            if event.HasField("delta"):
                firsts = firsts or time.monotonic() - started
                deltas.append(event.delta)
            else:
                answer = event.answer
        total = time.monotonic() - started
        assert answer is not None and answer.source == FILL
        assert deltas and {d.source for d in deltas} == {FILL}
        assert "".join(d.text for d in deltas) == answer.text
        assert firsts is not None and firsts < total / 2, (firsts, total)
        assert m.branches.counters["adoptions_served"] == 1


async def test_a_stream_without_a_fill_streams_its_own_execution() -> None:
    async with mesh(time_scale=0.02) as m:
        events = [e async for e in m.client.stub.CallStream(gateway_pb2.CallRequest(
            demand={"model": "qwen3-32b", "prompt": "hello there", "sampling": {
                "max_tokens": 12, "ignore_eos": True}}), timeout=30)]
        deltas = [e.delta for e in events if e.HasField("delta")]
        answer = events[-1].answer
        assert len(deltas) > 1 and {d.source for d in deltas} == {ENGINE}
        assert "".join(d.text for d in deltas) == answer.text and answer.source == ENGINE


async def test_a_bad_streamed_demand_is_refused_by_field() -> None:
    async with mesh() as m:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in m.client.stub.CallStream(gateway_pb2.CallRequest(), timeout=10):
                pass
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "demand" in (err.value.details() or "")
