"""GenerateMux: answer-only generations on one long-lived stream, over real gRPC on loopback
with the sim backend. Each generation keeps its own status, deadline and cancellation; a lost
stream fails only what it carried; an agent without the method is served by Generate."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from services.common.pb import common_pb2, engine_pb2, engine_pb2_grpc
from services.engine_agent.client import EngineAgentClient
from services.engine_agent.mux_client import GenerationMux
from tests.factories import engine_agent, generate_request, sampling

LONG = {"preset": "qwen3-32b-h200", "time_scale": 1.0}


async def _wait_running(client: EngineAgentClient, running: int) -> common_pb2.LoadView:
    async for view in client.watch_load(interval_s=0.01, timeout_s=5):
        if view.running == running:
            return view
    raise AssertionError("load stream ended")


def _long(request_id: str) -> engine_pb2.GenerateRequest:
    return generate_request(request_id, sampling=sampling(2000, ignore_eos=True))


async def test_concurrent_answers_share_one_stream_and_match_generate() -> None:
    async with engine_agent() as rt:
        client = EngineAgentClient(rt.address)
        prompts = [f"route ticket {i} to billing or shipping" for i in range(24)]
        answers = await asyncio.gather(*(
            client.answer(generate_request(f"m{i}", p, sampling=sampling(6, ignore_eos=True)))
            for i, p in enumerate(prompts)))
        stream = client.mux._streams.current
        direct = [e async for e in client.generate(
            generate_request("d", prompts[5], sampling=sampling(6, ignore_eos=True)))][-1]
        assert [a.usage.completion_tokens for a in answers] == [6] * 24
        assert answers[5].text == direct.finished.text
        assert answers[5].reason == common_pb2.FINISH_REASON_LENGTH
        await client.answer(generate_request("again"))
        assert client.mux._streams.current is stream and not stream.broken
        await client.close()


async def test_a_refused_generation_gets_its_own_status_and_the_stream_goes_on() -> None:
    async with engine_agent() as rt:
        client = EngineAgentClient(rt.address)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.answer(generate_request("bad", model="other-model"))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "model" in err.value.details()
        stream = client.mux._streams.current
        assert (await client.answer(generate_request("good"))).usage.completion_tokens > 0
        assert client.mux._streams.current is stream
        await client.close()


async def test_cancelling_the_caller_aborts_the_generation_on_the_engine() -> None:
    async with engine_agent(**LONG) as rt:
        client = EngineAgentClient(rt.address)
        waiting = asyncio.create_task(client.answer(_long("c")))
        await _wait_running(client, 1)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        view = await _wait_running(client, 0)
        assert view.kv_blocks_used == 0
        assert (await client.answer(generate_request("next"))).usage.completion_tokens > 0
        await client.close()


async def test_the_callers_deadline_fails_it_and_frees_the_engine() -> None:
    async with engine_agent(**LONG) as rt:
        client = EngineAgentClient(rt.address)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.answer(_long("slow"), timeout_s=0.3)
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        view = await _wait_running(client, 0)
        assert view.kv_blocks_used == 0
        await client.close()


async def _raw(address: str, messages: list[engine_pb2.GenerateMuxRequest]
               ) -> list[engine_pb2.GenerateMuxResult]:
    """Send ``messages`` on one GenerateMux call, half-close, read every result."""
    async with grpc.aio.insecure_channel(address) as channel:
        call = engine_pb2_grpc.EngineAgentStub(channel).GenerateMux(timeout=20)
        for message in messages:
            await call.write(message)
        await call.done_writing()
        return [r async for response in call for r in response.results]


async def test_the_engine_enforces_timeout_and_refuses_bad_or_duplicate_starts() -> None:
    async with engine_agent(**LONG) as rt:
        results = await _raw(rt.address, [engine_pb2.GenerateMuxRequest(starts=[
            engine_pb2.MuxStart(request=_long("late"), timeout_s=0.3),
            engine_pb2.MuxStart(request=_long("late"), timeout_s=5),
            engine_pb2.MuxStart(request=generate_request("zero"), timeout_s=0),
            engine_pb2.MuxStart(request=generate_request("ok"), timeout_s=5)])])
        by_id: dict[str, list[engine_pb2.GenerateMuxResult]] = {}
        for result in results:
            by_id.setdefault(result.request_id, []).append(result)
        late = sorted(r.error.code for r in by_id["late"])
        assert late == sorted([grpc.StatusCode.DEADLINE_EXCEEDED.value[0],
                               grpc.StatusCode.ALREADY_EXISTS.value[0]])
        assert by_id["zero"][0].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert "timeout_s" in by_id["zero"][0].error.message
        assert by_id["ok"][0].finished.usage.completion_tokens == 8
        assert len(results) == 4  # exactly one result per start; the stream then ended cleanly


async def test_a_cancel_message_answers_cancelled_and_half_close_waits_for_the_rest() -> None:
    async with engine_agent(**LONG) as rt:
        async with grpc.aio.insecure_channel(rt.address) as channel:
            call = engine_pb2_grpc.EngineAgentStub(channel).GenerateMux(timeout=20)
            await call.write(engine_pb2.GenerateMuxRequest(starts=[
                engine_pb2.MuxStart(request=_long("x"), timeout_s=30),
                engine_pb2.MuxStart(request=generate_request("y", sampling=sampling(
                    20, ignore_eos=True)), timeout_s=30)]))
            await call.write(engine_pb2.GenerateMuxRequest(cancels=["x", "unknown"]))
            await call.done_writing()
            results = {r.request_id: r async for response in call for r in response.results}
            assert await call.code() == grpc.StatusCode.OK
        assert results["x"].error.code == grpc.StatusCode.CANCELLED.value[0]
        assert results["y"].finished.usage.completion_tokens == 20


async def test_a_lost_stream_fails_what_it_carried_and_the_next_call_opens_another() -> None:
    async with engine_agent(**LONG) as rt:
        client = EngineAgentClient(rt.address)
        waiting = asyncio.create_task(client.answer(_long("carried")))
        await _wait_running(client, 1)
        lost = client.mux._streams.current
        lost.call.cancel()  # as a connection reset would end it
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await asyncio.wait_for(waiting, 5)
        assert err.value.code() == grpc.StatusCode.CANCELLED
        await _wait_running(client, 0)  # the engine aborted it with the stream
        assert (await client.answer(generate_request("after"))).usage.completion_tokens > 0
        assert client.mux._streams.current is not lost and lost.broken
        await client.close()


async def test_old_streams_are_renewed_and_drained() -> None:
    async with engine_agent() as rt:
        client = EngineAgentClient(rt.address)
        client.mux._streams.max_age_s = 0.0  # every generation retires the stream before it
        for i in range(5):
            await client.answer(generate_request(f"r{i}"))
        first = client.mux._streams.current
        await client.answer(generate_request("last"))
        assert client.mux._streams.current is not first
        for _ in range(100):
            if first.ended:
                break
            await asyncio.sleep(0.02)
        assert first.ended and first.error is not None  # half-closed, then ended by the agent
        await client.close()


async def _old_agent() -> AsyncIterator[str]:
    """A server with Generate but no GenerateMux (an agent from before it)."""

    async def generate(request: engine_pb2.GenerateRequest, context: object
                       ) -> AsyncIterator[engine_pb2.GenerateEvent]:
        yield engine_pb2.GenerateEvent(request_id=request.request_id, finished=engine_pb2.Finished(
            reason=common_pb2.FINISH_REASON_STOP, text=f"old:{request.final_only}"))

    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "dynbranch.v1.EngineAgent", {"Generate": grpc.unary_stream_rpc_method_handler(
            generate, request_deserializer=engine_pb2.GenerateRequest.FromString,
            response_serializer=engine_pb2.GenerateEvent.SerializeToString)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(0)


async def test_an_agent_without_the_method_is_served_by_generate() -> None:
    async for address in _old_agent():
        client = EngineAgentClient(address)
        request = generate_request("r", final_only=True)
        assert (await client.answer(request)).text == "old:True"
        assert client.mux.supported is False
        assert (await client.answer(generate_request("s", final_only=True))).text == "old:True"
        await client.close()


async def test_a_wait_longer_than_a_stream_lives_gets_its_own_call() -> None:
    async with engine_agent() as rt:
        client = EngineAgentClient(rt.address)
        mux = client.mux
        assert isinstance(mux, GenerationMux) and mux.takes(60) and not mux.takes(3500)
        answer = await client.answer(generate_request("long-wait", final_only=True),
                                     timeout_s=3500)
        assert answer.usage.completion_tokens == 8 and mux._streams.current is None
        await client.close()



async def test_a_stopping_agent_answers_its_running_generations_and_ends_its_streams() -> None:
    async with engine_agent(grace_s=20, **LONG) as rt:
        client = EngineAgentClient(rt.address)
        running = asyncio.create_task(client.answer(
            generate_request("short", sampling=sampling(24, ignore_eos=True)), timeout_s=10))
        await asyncio.sleep(0.1)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await rt.shutdown()
        stopped_s = loop.time() - started
        finished = await running
        await client.close()
    assert finished.usage.completion_tokens == 24  # answered, not cancelled at grace's end
    assert stopped_s < 10  # the stream ended with its last generation: no 20 s grace wait
