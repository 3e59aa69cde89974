"""GenerateMux's session under generated interleavings of starts, cancels, deadlines, duplicate
and invalid starts, half-close and abandonment (hypothesis): exactly one result per start, each
with a status its case allows, and nothing left running when the stream ends either way."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.common.pb import engine_pb2
from services.common.values.errors import InvalidArgument
from services.engine_agent.mux_servicer import GenerationSession

CODE = {c.value[0]: c for c in grpc.StatusCode}
IDS = st.sampled_from(["a", "b", "c", "d"])
START = st.tuples(st.just("start"), IDS, st.integers(0, 20), st.integers(1, 40), st.booleans())
CANCEL = st.tuples(st.just("cancel"), IDS)
PAUSE = st.tuples(st.just("pause"), st.integers(0, 10))
PLANS = st.lists(st.one_of(START, START, CANCEL, PAUSE), min_size=1, max_size=14)


class _Engine:
    """A fake engine: each generation sleeps its drawn milliseconds; tracks what runs."""

    def __init__(self) -> None:
        self.running: set[str] = set()
        self.durations: dict[str, float] = {}

    def validate(self, request: engine_pb2.GenerateRequest) -> Any:
        if request.model != "m":
            raise InvalidArgument("model", f"unknown model {request.model!r}")
        return SimpleNamespace(request_id=request.request_id)

    async def answer(self, request: Any, trace: object) -> engine_pb2.Finished:
        self.running.add(request.request_id)
        try:
            await asyncio.sleep(self.durations[request.request_id])
        finally:
            self.running.discard(request.request_id)
        return engine_pb2.Finished(text=request.request_id)


async def _requests(plan: list[tuple], engine: _Engine
                    ) -> AsyncIterator[engine_pb2.GenerateMuxRequest]:
    for op in plan:
        if op[0] == "start":
            _, rid, duration_ms, timeout_ms, valid = op
            engine.durations[rid] = duration_ms / 1000
            yield engine_pb2.GenerateMuxRequest(starts=[engine_pb2.MuxStart(
                request=engine_pb2.GenerateRequest(request_id=rid, model="m" if valid else "x"),
                timeout_s=timeout_ms / 1000)])
        elif op[0] == "cancel":
            yield engine_pb2.GenerateMuxRequest(cancels=[op[1]])
        else:
            await asyncio.sleep(op[1] / 1000)


async def _scenario(plan: list[tuple], abandon: bool) -> None:
    engine = _Engine()
    before = len(asyncio.all_tasks())
    session = GenerationSession(engine.validate, engine.answer, max_running=3)
    results: list[engine_pb2.GenerateMuxResult] = []

    async def consume() -> None:
        async for response in session.stream(_requests(plan, engine)):
            results.extend(response.results)

    consumer = asyncio.create_task(consume())
    if abandon:  # the caller goes away mid-stream: everything running is cancelled
        await asyncio.sleep(0.005)
        consumer.cancel()
    await asyncio.gather(consumer, return_exceptions=True)
    assert engine.running == set(), f"still running after the stream ended: {engine.running}"
    assert len(asyncio.all_tasks()) == before, "the session left tasks behind"
    if abandon:
        return
    starts = [op for op in plan if op[0] == "start"]
    for rid in {op[1] for op in starts}:
        mine = [r for r in results if r.request_id == rid]
        assert len(mine) == sum(op[1] == rid for op in starts), f"{rid}: {mine}"
    allowed = {grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED,
               grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.RESOURCE_EXHAUSTED,
               grpc.StatusCode.INVALID_ARGUMENT}
    for result in results:
        if result.HasField("finished"):
            assert result.finished.text == result.request_id
        else:
            assert CODE[result.error.code] in allowed, result
    invalid = {op[1] for op in starts if not op[4]}
    valid = {op[1] for op in starts if op[4]}
    for rid in invalid - valid:  # only ever started with a wrong model: always refused so
        assert all(CODE[r.error.code] == grpc.StatusCode.INVALID_ARGUMENT and
                   "model" in r.error.message for r in results if r.request_id == rid)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PLANS, st.booleans())
def test_every_start_gets_one_result_and_nothing_outlives_the_stream(plan: list[tuple],
                                                                     abandon: bool) -> None:
    asyncio.run(_scenario(plan, abandon))


# --- the client side, against a real sim engine agent over gRPC ----------------------------------

CALL = st.tuples(st.integers(1, 30), st.integers(20, 400), st.one_of(st.none(),
                                                                      st.integers(0, 60)))
CLIENT_PLANS = st.tuples(st.lists(CALL, min_size=1, max_size=8),
                         st.one_of(st.none(), st.integers(0, 60)))


async def _client_scenario(calls: list[tuple], kill_at_ms: int | None) -> None:
    from services.engine_agent.client import EngineAgentClient
    from tests.factories import engine_agent, generate_request, sampling

    async with engine_agent(preset="qwen3-32b-h200", time_scale=0.1) as rt:
        before = len(asyncio.all_tasks())
        client = EngineAgentClient(rt.address)

        async def one(i: int, tokens: int, timeout_ms: int) -> object:
            request = generate_request(f"p{i}", f"prompt {i} " * 8,
                                       sampling=sampling(tokens, ignore_eos=True))
            try:
                return (await client.answer(request, timeout_s=timeout_ms / 1000)
                        ).usage.completion_tokens == tokens
            except grpc.aio.AioRpcError as err:
                return err.code()

        tasks = [asyncio.create_task(one(i, t, ms)) for i, (t, ms, _) in enumerate(calls)]
        for task, (_, _, cancel_ms) in zip(tasks, calls, strict=True):
            if cancel_ms is not None:
                asyncio.get_running_loop().call_later(cancel_ms / 1000, task.cancel)
        if kill_at_ms is not None:
            await asyncio.sleep(kill_at_ms / 1000)
            if (stream := client.mux._streams.current) is not None:
                stream.call.cancel()  # the stream is lost under its generations
        outcomes = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)
        for outcome in outcomes:
            assert outcome is True or isinstance(outcome, asyncio.CancelledError) or outcome in {
                grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}, outcome
        assert client.mux._streams.current is None or client.mux._streams.current.pending == {}
        async for view in client.watch_load(interval_s=0.01, timeout_s=5):
            if view.running == 0 and view.waiting == 0:
                break  # every generation the callers left was aborted on the engine
        await client.close()
        for _ in range(50):
            if len(asyncio.all_tasks()) <= before:
                break
            await asyncio.sleep(0.01)
        assert len(asyncio.all_tasks()) <= before, "the client left tasks behind"


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(CLIENT_PLANS)
async def test_callers_cancel_time_out_and_lose_the_stream_without_hangs_or_leaks(
        plan: tuple) -> None:
    await _client_scenario(*plan)  # on the test's own event loop, as gRPC's other tests run
