"""EngineAgent over real gRPC on loopback with the sim backend."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from services.common.pb import common_pb2, engine_pb2
from services.engine_agent.client import EngineAgentClient
from tests.factories import MODEL, engine_agent, generate_request, sampling


async def _collect(client: EngineAgentClient, request: engine_pb2.GenerateRequest
                   ) -> list[engine_pb2.GenerateEvent]:
    return [event async for event in client.generate(request, timeout_s=10)]


async def test_generate_streams_queued_allocated_deltas_finished() -> None:
    async with engine_agent() as rt:
        client = EngineAgentClient(rt.address)
        events = await _collect(client, generate_request(sampling=sampling(8, ignore_eos=True)))
        kinds = [e.WhichOneof("event") for e in events]
        assert kinds[0] == "queued" and kinds[1] == "allocated" and kinds[-1] == "finished"
        assert set(kinds[2:-1]) == {"delta"}
        assert [e.sequence for e in events] == list(range(len(events)))
        fin = events[-1].finished
        assert fin.usage.completion_tokens == 8 and fin.reason == common_pb2.FINISH_REASON_LENGTH
        assert fin.text == "".join(e.delta.text for e in events if e.HasField("delta"))
        await client.close()


async def test_repeated_prompt_is_deterministic_and_hits_the_prefix_cache() -> None:
    prompt = "shared system prompt " * 20
    async with engine_agent() as rt:
        client = EngineAgentClient(rt.address)
        first = (await _collect(client, generate_request("a", prompt)))[-1].finished
        second = (await _collect(client, generate_request("b", prompt)))[-1].finished
        assert first.text == second.text
        assert first.usage.cached_prompt_tokens == 0 < second.usage.cached_prompt_tokens
        lookup = await client.lookup_prefix(prompt)
        assert 0 < lookup.resident_tokens <= lookup.prompt_tokens
        await client.close()


async def _wait_running(client: EngineAgentClient, running: int) -> common_pb2.LoadView:
    async for view in client.watch_load(interval_s=0.01, timeout_s=5):
        if view.running == running:
            return view
    raise AssertionError("load stream ended")


async def test_abort_frees_the_slot_and_ends_the_stream() -> None:
    async with engine_agent(preset="qwen3-32b-h200", time_scale=1.0) as rt:
        client = EngineAgentClient(rt.address)
        request = generate_request("long", sampling=sampling(2000, ignore_eos=True))
        stream = asyncio.create_task(_collect(client, request))
        await _wait_running(client, 1)
        assert await client.abort("long") is True
        events = await asyncio.wait_for(stream, 5)
        assert events[-1].finished.reason == common_pb2.FINISH_REASON_ABORT
        view = await _wait_running(client, 0)
        assert view.kv_blocks_used == 0
        assert await client.abort("long") is False
        await client.close()


async def test_cancelling_the_stream_aborts_the_generation() -> None:
    async with engine_agent(preset="qwen3-32b-h200", time_scale=1.0) as rt:
        client = EngineAgentClient(rt.address)
        call = client.generate(generate_request("c", sampling=sampling(2000, ignore_eos=True)))
        await _wait_running(client, 1)
        call.cancel()
        view = await _wait_running(client, 0)
        assert view.kv_blocks_used == 0
        await client.close()


async def test_load_views_are_versioned_and_timestamped() -> None:
    async with engine_agent(engine_id="e7") as rt:
        client = EngineAgentClient(rt.address)
        views = []
        async for view in client.watch_load(interval_s=0.01, timeout_s=5):
            views.append(view)
            if len(views) == 3:
                break
        assert [v.header.id for v in views] == ["e7"] * 3
        assert [v.header.sequence for v in views] == sorted({v.header.sequence for v in views})
        assert all(v.header.published_at.seconds > 0 and v.model == MODEL for v in views)
        info = await client.info()
        assert info.engine_id == "e7" and info.backend == "sim" and info.simulated
        await client.close()


INVALID = grpc.StatusCode.INVALID_ARGUMENT
BAD = [
    (dict(request_id=""), grpc.StatusCode.INVALID_ARGUMENT, "request_id: required"),
    (dict(request_id="x" * 200), grpc.StatusCode.INVALID_ARGUMENT, "request_id: at most"),
    (dict(model=""), grpc.StatusCode.INVALID_ARGUMENT, "model: required"),
    (dict(model="gpt-17"), grpc.StatusCode.INVALID_ARGUMENT, "model: unknown model 'gpt-17'"),
    (dict(prompt=""), grpc.StatusCode.INVALID_ARGUMENT, "prompt: required"),
    (dict(sampling=sampling(-5)), INVALID, "sampling.max_tokens: must be >= 1"),
    (dict(sampling=sampling(0)), INVALID, "sampling.max_tokens: must be >= 1"),
    (dict(sampling=sampling(10**9)), INVALID, "sampling.max_tokens: must be <="),
    (dict(sampling=sampling(8, temperature=-1)), INVALID, "sampling.temperature"),
    (dict(sampling=sampling(8, top_p=2)), grpc.StatusCode.INVALID_ARGUMENT, "sampling.top_p"),
    (dict(priority=7), grpc.StatusCode.INVALID_ARGUMENT, "priority: unknown"),
    (dict(prompt="x" * 2_000_000), grpc.StatusCode.RESOURCE_EXHAUSTED, "prompt: larger than"),
    (dict(prompt="word " * 200_000), grpc.StatusCode.RESOURCE_EXHAUSTED, "prompt"),
]


@pytest.mark.parametrize("fields, code, message", BAD, ids=[b[2][:30] for b in BAD])
async def test_malformed_generate_is_refused_naming_the_field(fields, code, message) -> None:
    async with engine_agent() as rt:
        client = EngineAgentClient(rt.address)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await _collect(client, generate_request(**fields))
        assert info.value.code() == code
        assert message in info.value.details()
        events = await _collect(client, generate_request("after"))  # nothing crashed
        assert events[-1].HasField("finished")
        await client.close()


async def test_duplicate_live_request_id_is_refused() -> None:
    async with engine_agent(preset="qwen3-32b-h200", time_scale=1.0) as rt:
        client = EngineAgentClient(rt.address)
        first = asyncio.create_task(_collect(client, generate_request(
            "dup", sampling=sampling(2000, ignore_eos=True))))
        await _wait_running(client, 1)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await _collect(client, generate_request("dup"))
        assert info.value.code() == grpc.StatusCode.ALREADY_EXISTS
        await client.abort("dup")
        await first
        await client.close()


async def test_watch_load_interval_out_of_range_is_refused() -> None:
    async with engine_agent() as rt:
        client = EngineAgentClient(rt.address)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            async for _ in client.watch_load(interval_s=120):
                pass
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "interval_s" in info.value.details()
        await client.close()


async def test_final_only_sends_just_the_finished_event_with_the_whole_text() -> None:
    async with engine_agent() as rt:
        client = EngineAgentClient(rt.address)
        full = await _collect(client, generate_request("a", sampling=sampling(8, ignore_eos=True)))
        lean = await _collect(client, generate_request(
            "b", sampling=sampling(8, ignore_eos=True), final_only=True))
        assert [e.WhichOneof("event") for e in lean] == ["finished"]
        assert lean[-1].finished.text == full[-1].finished.text
        await client.close()
