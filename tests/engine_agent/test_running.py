"""Running fills and their adoption (``services.engine_agent.running``): a canonical demand that
adopts a fill raises it to canonical priority, sees everything it produced so far and then every
token as it is decoded, and gives it back to fill priority when it leaves before the end."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import grpc
import pytest

from services.common.pb import common_pb2, engine_pb2
from services.common.values.errors import AlreadyExists, NotFound
from services.common.values.generation import Priority, Progress
from services.engine_agent.backend import Finished, TokenDelta
from services.engine_agent.client import EngineAgentClient
from services.engine_agent.running import RunningFills
from tests.engine_agent.sim_factories import make_backend, make_request, words
from tests.factories import engine_agent, generate_request, sampling


async def _consume(fills: RunningFills, request_id: str, priority: Priority,
                   prompt: str, max_tokens: int) -> Finished:
    events = fills.generate(make_request(request_id, prompt, max_tokens=max_tokens,
                                         priority=priority, ignore_eos=True))
    last = None
    async with contextlib.aclosing(events):  # type: ignore[type-var]
        async for event in events:
            last = event
    assert isinstance(last, Finished)
    return last


async def _until(predicate, timeout_s: float = 5.0) -> None:  # noqa: ANN001
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.001)


async def _running_fill() -> tuple[Any, RunningFills, asyncio.Task[Finished], Any]:
    """A sim backend, its running fills, and a 60-token fill running there (task, sequence)."""
    backend = make_backend("qwen3-32b-h200", time_scale=0.05)
    fills = RunningFills(backend)
    fill = asyncio.create_task(_consume(fills, "f1", Priority.FILL, words(20), 60))
    await _until(lambda: backend.engine.running_seq("f1") is not None)
    seq = backend.engine.running_seq("f1")
    assert seq is not None
    return backend, fills, fill, seq


async def test_an_adopter_gets_the_text_so_far_then_every_delta_and_the_end() -> None:
    backend = make_backend("qwen3-32b-h200", time_scale=0.05)
    fills = RunningFills(backend)
    fill = asyncio.create_task(_consume(fills, "f1", Priority.FILL, words(20), 40))
    seq = None
    await _until(lambda: (s := backend.engine.running_seq("f1")) is not None
                 and s.output_tokens >= 5)
    seq = backend.engine.running_seq("f1")
    assert seq is not None and seq.priority is Priority.FILL
    got: list[Progress] = [p async for p in fills.adopt("f1", text=True)]
    finished = await fill
    first = got[0]
    assert first.raised and first.allocated and first.tokens >= 1 and first.text
    assert seq.priority is Priority.CANONICAL  # raised for the demand
    assert got[-1].finished and got[-1].tokens == finished.usage.completion_tokens
    assert "".join(p.text for p in got) == finished.text  # nothing lost, nothing twice
    assert [p.tokens for p in got] == sorted(p.tokens for p in got)
    await backend.close()


async def test_an_adopter_that_leaves_gives_the_fill_back_to_fill_priority() -> None:
    backend, fills, fill, seq = await _running_fill()
    events = fills.adopt("f1")
    first = await anext(events)
    assert first.raised and first.text == ""  # no text asked for: token counts only
    assert seq.priority is Priority.CANONICAL
    await events.aclose()  # the demand was cancelled
    await fills.close()  # the lowering runs as an owned task
    assert seq.priority is Priority.FILL and not fill.done()
    await fill  # it ran on: a fill again, its result still goes to its own caller
    await backend.close()


async def test_the_fill_stays_raised_while_another_adopter_holds_it() -> None:
    backend, fills, fill, seq = await _running_fill()
    one, two = fills.adopt("f1"), fills.adopt("f1")
    await anext(one)
    await anext(two)
    await one.aclose()
    await fills.close()
    assert seq.priority is Priority.CANONICAL
    await two.aclose()
    await fills.close()
    assert seq.priority is Priority.FILL
    await fill
    await backend.close()


async def test_only_fills_are_adoptable_and_an_ended_fill_is_not_found() -> None:
    backend = make_backend(time_scale=0.0)
    fills = RunningFills(backend)
    await _consume(fills, "c1", Priority.CANONICAL, words(8), 4)
    await _consume(fills, "f1", Priority.FILL, words(8, "b"), 4)
    for rid in ("c1", "f1", "never"):
        with pytest.raises(NotFound, match="request_id"):
            await anext(fills.adopt(rid))
    await backend.close()


async def test_a_fill_id_already_running_is_refused() -> None:
    backend = make_backend("qwen3-32b-h200", time_scale=0.05)
    fills = RunningFills(backend)
    fill = asyncio.create_task(_consume(fills, "f1", Priority.FILL, words(20), 20))
    await _until(lambda: fills.running("f1"))
    with pytest.raises(AlreadyExists):
        fills.generate(make_request("f1", words(8), priority=Priority.FILL))
    await fill
    await backend.close()


async def test_an_aborted_fill_ends_its_adoption() -> None:
    backend = make_backend("qwen3-32b-h200", time_scale=0.05)
    fills = RunningFills(backend)
    fill = asyncio.create_task(_consume(fills, "f1", Priority.FILL, words(20), 200))
    await _until(lambda: backend.engine.running_seq("f1") is not None)
    events = fills.adopt("f1")
    await anext(events)
    fill.cancel()  # the branch settled against it: its caller aborts it
    rest = [p async for p in events]
    assert rest and rest[-1].finished
    assert backend.engine.running_seq("f1") is None
    await backend.close()


async def test_the_adopt_rpc_streams_a_fill_run_over_generate_mux() -> None:
    """Through the servicer: a fill started on the mux stream, adopted by a second call."""
    async with engine_agent(preset="qwen3-32b-h200", time_scale=1.0) as rt:
        client = EngineAgentClient(rt.address)
        request = generate_request("fill-1", prompt=words(20), sampling=sampling(
            40, ignore_eos=True), priority=common_pb2.PRIORITY_CLASS_FILL)
        answer = asyncio.create_task(client.answer(request, 30.0))
        events: list[engine_pb2.AdoptEvent] = []
        async with asyncio.timeout(10):
            while not events:  # until the start reached the agent
                try:
                    events = [e async for e in client.adopt("fill-1", text=True, timeout_s=30)]
                except grpc.aio.AioRpcError as err:
                    assert err.code() == grpc.StatusCode.NOT_FOUND
                    await asyncio.sleep(0.01)
        finished = await answer
        assert events[0].raised and events[-1].finished
        assert "".join(e.text for e in events) == finished.text
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in client.adopt("fill-1", timeout_s=5.0):
                pass
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        assert "request_id" in (err.value.details() or "")
        await client.close()


def test_progress_values_are_plain() -> None:
    assert Progress("a", 1, True).finished is False
    assert isinstance(TokenDelta("x", 1), TokenDelta)
