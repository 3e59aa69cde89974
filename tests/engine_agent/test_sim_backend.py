"""SimBackend behaviour through the EngineBackend protocol."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from services.common.values.errors import Unavailable
from services.common.values.generation import FinishReason, Priority
from services.engine_agent.backend import (
    Allocated,
    EngineBackend,
    Finished,
    GenerationEvent,
    Queued,
    TokenDelta,
)
from services.engine_agent.backends.sim import SimBackend
from services.engine_agent.sim.cost_model import get_preset
from services.engine_agent.sim.scheduler import StepPlan
from tests.engine_agent.sim_factories import (
    MODEL,
    assert_idle,
    collect,
    finish,
    make_backend,
    make_request,
    small_preset,
    words,
)

H200 = get_preset("qwen3-32b-h200")


def record_steps(backend: SimBackend) -> list[dict[str, int]]:
    """Scheduled tokens per request id, one dict per non-empty step."""
    steps: list[dict[str, int]] = []
    scheduler = backend.engine.scheduler
    schedule = scheduler.schedule

    def recording_schedule() -> StepPlan:
        plan = schedule()
        if plan.scheduled:
            steps.append({seq.request_id: n for seq, n in plan.scheduled.items()})
        return plan

    scheduler.schedule = recording_schedule  # type: ignore[method-assign]
    return steps


def first_step(steps: list[dict[str, int]], request_id: str) -> int:
    return next(i for i, step in enumerate(steps) if request_id in step)


async def wait_until(predicate: Callable[[], bool], limit: int = 10_000) -> None:
    for _ in range(limit):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


def texts(events: list[GenerationEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TokenDelta))


async def _drain(stream: AsyncIterator[GenerationEvent]) -> list[GenerationEvent]:
    return [e async for e in stream]


# --- protocol and event stream --------------------------------------------------------------

async def test_implements_the_engine_backend_protocol_and_says_it_is_simulated() -> None:
    backend = make_backend("qwen3-32b-h200", engine_id="sim-7")
    assert isinstance(backend, EngineBackend)
    info = backend.info
    assert (info.backend, info.model, info.simulated, info.leases_supported) == (
        "sim", MODEL, True, True)
    assert (info.kv_blocks_total, info.max_running, info.block_size) == (H200.kv_blocks, 1024, 16)
    assert info.extra["engine_id"] == "sim-7" and info.extra["preset"] == "qwen3-32b-h200"
    await backend.close()


async def test_events_are_queued_allocated_deltas_finished() -> None:
    backend = make_backend()
    events = await collect(backend, make_request(prompt=words(40), max_tokens=12, ignore_eos=True))
    assert isinstance(events[0], Queued) and events[0].prompt_tokens == 40
    assert isinstance(events[1], Allocated) and events[1].cached_prompt_tokens == 0
    fin = events[-1]
    assert isinstance(fin, Finished) and fin.reason is FinishReason.LENGTH
    deltas = [e for e in events[2:-1] if isinstance(e, TokenDelta)]
    assert len(deltas) == len(events) - 3
    assert sum(d.tokens for d in deltas) == fin.usage.completion_tokens == 12
    assert texts(events) == fin.text and fin.text
    assert fin.usage.prompt_tokens == 40
    await backend.close()
    assert_idle(backend.engine)


# --- determinism ----------------------------------------------------------------------------

async def test_output_is_the_same_alone_and_in_a_batch_of_eight() -> None:
    backend = make_backend(small_preset(max_running=8, max_batched_tokens=64, num_kv_blocks=256))
    request = make_request("solo", words(100, "q"), max_tokens=40)
    alone = await finish(backend, request)
    batch = [make_request(f"b{i}", words(100, "q" if i == 3 else f"z{i}"), max_tokens=40)
             for i in range(8)]
    results = await asyncio.gather(*(finish(backend, r) for r in batch))
    assert results[3].text == alone.text and results[3].usage.completion_tokens == \
        alone.usage.completion_tokens
    assert len({r.text for r in results}) == 8
    again = await finish(backend, make_request("again", words(100, "q"), max_tokens=40))
    assert again.text == alone.text and again.usage.cached_prompt_tokens == 96
    await backend.close()


async def test_seeded_sampling_is_reproducible_and_changes_with_the_seed() -> None:
    backend = make_backend()
    prompt = words(30)

    async def run(rid: str, **sampling: Any) -> str:
        return (await finish(backend, make_request(rid, prompt, max_tokens=24,
                                                   ignore_eos=True, **sampling))).text

    seeded = await run("s1", temperature=0.8, seed=1)
    assert seeded == await run("s1b", temperature=0.8, seed=1)
    assert seeded != await run("s2", temperature=0.8, seed=2)
    assert seeded != await run("g", temperature=0.0)
    assert await run("u1", temperature=0.8) != await run("u2", temperature=0.8)
    await backend.close()


async def test_max_tokens_only_truncates_the_same_text() -> None:
    backend = make_backend()
    long = await finish(backend, make_request("l", words(20), max_tokens=30, ignore_eos=True))
    short = await finish(backend, make_request("s", words(20), max_tokens=10, ignore_eos=True))
    assert long.text.startswith(short.text) and short.usage.completion_tokens == 10
    await backend.close()


async def test_eos_ends_early_unless_ignored() -> None:
    backend = make_backend(output_len_range=(5, 9))
    natural = await finish(backend, make_request("n", words(20), max_tokens=50))
    ignored = await finish(backend, make_request("i", words(20), max_tokens=50, ignore_eos=True))
    assert natural.reason is FinishReason.STOP and 6 <= natural.usage.completion_tokens <= 10
    assert ignored.reason is FinishReason.LENGTH and ignored.usage.completion_tokens == 50
    assert ignored.text.startswith(natural.text)
    await backend.close()


async def test_stop_strings_cut_the_text_and_are_never_streamed() -> None:
    backend = make_backend()
    base = (await finish(backend, make_request("b", words(20), max_tokens=40,
                                               ignore_eos=True))).text
    for i, stop in enumerate([base[20:23], base[25:40]]):  # short, and spanning tokens
        events = await collect(backend, make_request(f"s{i}", words(20), max_tokens=40,
                                                     ignore_eos=True, stop=(stop, "zzzz")))
        fin = events[-1]
        assert isinstance(fin, Finished) and fin.reason is FinishReason.STOP
        assert fin.stop_string == stop  # the one that matched, not "zzzz"
        assert fin.text == base[:base.find(stop)] == texts(events)
        assert fin.usage.completion_tokens < 40
    await backend.close()


async def test_generation_stops_at_max_model_len() -> None:
    backend = make_backend(small_preset(max_model_len=64, num_kv_blocks=8))
    fin = await finish(backend, make_request(prompt=words(60), max_tokens=50, ignore_eos=True))
    assert fin.reason is FinishReason.LENGTH and fin.usage.completion_tokens == 4
    await backend.close()


# --- scheduling -----------------------------------------------------------------------------

async def test_waiting_requests_are_served_fifo() -> None:
    backend = make_backend(small_preset(max_running=1))
    steps = record_steps(backend)
    ids = [f"r{i}" for i in range(5)]
    await asyncio.gather(*(finish(backend, make_request(r, words(10, r), max_tokens=3))
                           for r in ids))
    assert sorted(ids, key=lambda r: first_step(steps, r)) == ids
    await backend.close()


async def test_canonical_requests_go_ahead_of_waiting_fills() -> None:
    backend = make_backend(small_preset(max_running=1))
    steps = record_steps(backend)
    blocker = asyncio.create_task(finish(backend, make_request("x", max_tokens=20)))
    await wait_until(lambda: backend.load().running == 1)
    fills = [make_request(f"f{i}", words(8, f"f{i}"), priority=Priority.FILL) for i in range(2)]
    streams = [backend.generate(r) for r in fills]
    queued = [await anext(s) for s in streams]
    canonical = backend.generate(make_request("c", words(8, "c")))
    queued.append(await anext(canonical))
    assert [q.queue_position for q in queued] == [0, 1, 0]
    await asyncio.gather(blocker, *(_drain(s) for s in (*streams, canonical)))
    assert first_step(steps, "c") < first_step(steps, "f0") < first_step(steps, "f1")
    await backend.close()


async def test_canonical_work_preempts_fills_when_slots_are_full() -> None:
    backend = make_backend(small_preset(max_running=2))
    fill_requests = [make_request(f"f{i}", words(20, f"f{i}"), max_tokens=60, ignore_eos=True,
                                  priority=Priority.FILL) for i in range(2)]
    fills = [asyncio.create_task(finish(backend, r)) for r in fill_requests]
    await wait_until(lambda: backend.load().fill_running == 2)
    canonical = await finish(backend, make_request("c", words(20, "c"), max_tokens=5))
    assert canonical.timings.queue_s == 0.0 and backend.engine.scheduler.num_preemptions >= 1
    preempted = await asyncio.gather(*fills)
    alone = [await finish(backend, r) for r in fill_requests]
    assert [f.text for f in preempted] == [a.text for a in alone]
    await backend.close()
    assert_idle(backend.engine)


async def test_running_sequences_never_exceed_max_running() -> None:
    backend = make_backend(small_preset(max_running=3))
    steps = record_steps(backend)
    await asyncio.gather(*(finish(backend, make_request(f"r{i}", words(30, f"r{i}"),
                                                        max_tokens=10)) for i in range(10)))
    assert max(map(len, steps)) == 3
    await backend.close()


async def test_chunked_prefill_respects_the_token_budget_and_decodes_first() -> None:
    backend = make_backend(small_preset(max_batched_tokens=64))
    steps = record_steps(backend)
    decoding = asyncio.create_task(finish(backend, make_request("d", max_tokens=40,
                                                                ignore_eos=True)))
    await wait_until(lambda: len(steps) >= 2)
    await finish(backend, make_request("p", words(300, "p"), max_tokens=2))
    await decoding
    assert all(sum(step.values()) <= 64 for step in steps)
    prefill = [step for step in steps if step.get("p", 0) > 1]
    assert [s["p"] for s in prefill] == [63, 63, 63, 63, 48]
    assert all(s["d"] == 1 for s in prefill)
    await backend.close()


# --- abort and cancellation -----------------------------------------------------------------

async def test_abort_mid_decode_frees_slot_and_blocks_at_once() -> None:
    backend = make_backend()
    stream = backend.generate(make_request("a", words(100), max_tokens=500, ignore_eos=True))
    events = []
    async for event in stream:
        events.append(event)
        if len(events) == 5:
            assert backend.load().kv_blocks_used > 0
            assert await backend.abort("a") is True
            assert backend.load().running == 0 and backend.load().kv_blocks_used == 0
    assert isinstance(events[-1], Finished) and events[-1].reason is FinishReason.ABORT
    assert events[-1].text == texts(events)
    assert await backend.abort("a") is False
    await backend.close()
    assert_idle(backend.engine)


async def test_abort_during_a_step_frees_now_and_drops_the_step() -> None:
    backend = make_backend(small_preset("qwen3-32b-h200"), time_scale=1.0)
    task = asyncio.create_task(finish(backend, make_request("a", max_tokens=100)))
    await wait_until(lambda: backend.engine._step is not None)  # sleeping through a step
    assert await backend.abort("a")
    assert backend.load().kv_blocks_used == 0
    fin = await task
    assert fin.reason is FinishReason.ABORT
    await backend.close()
    assert_idle(backend.engine)


async def test_cancelling_the_consumer_aborts_the_request() -> None:
    backend = make_backend()
    task = asyncio.create_task(finish(backend, make_request("c", words(50), max_tokens=500,
                                                            ignore_eos=True)))
    await wait_until(lambda: backend.load().running == 1)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert backend.load().running == 0 and backend.load().kv_blocks_used == 0
    await backend.close()
    assert_idle(backend.engine)


async def test_closing_the_stream_aborts_the_request() -> None:
    backend = make_backend()
    stream = backend.generate(make_request("c", words(50), max_tokens=500, ignore_eos=True))
    for _ in range(4):
        await anext(stream)
    await stream.aclose()
    assert backend.load().running == 0 and backend.load().kv_blocks_used == 0
    await backend.close()


async def test_close_aborts_everything_and_leaks_no_tasks() -> None:
    before = asyncio.all_tasks()
    backend = make_backend(small_preset("qwen3-32b-h200"), time_scale=0.01)
    await backend.start()
    await backend.start()
    tasks = [asyncio.create_task(finish(backend, make_request(f"r{i}", max_tokens=400,
                                                              ignore_eos=True)))
             for i in range(6)]
    await wait_until(lambda: backend.load().running == 4)
    await backend.close()
    await backend.close()
    results = await asyncio.gather(*tasks)
    assert {r.reason for r in results} == {FinishReason.ABORT}
    assert asyncio.all_tasks() == before
    assert_idle(backend.engine)
    with pytest.raises(Unavailable):
        await collect(backend, make_request("late"))


# --- simulated time -------------------------------------------------------------------------

async def test_timings_are_simulated_seconds_without_sleeping_at_scale_zero() -> None:
    backend = make_backend(small_preset("qwen3-32b-h200"))
    started = time.monotonic()
    fin = await finish(backend, make_request(prompt=words(500), max_tokens=270, ignore_eos=True))
    wall = time.monotonic() - started
    t = fin.timings
    assert 3.0 < t.decode_s < 7.0 and wall < t.decode_s / 3
    assert 0 < t.prefill_s < 0.2 and t.queue_s == 0.0
    assert t.total_s == pytest.approx(t.queue_s + t.prefill_s + t.decode_s)
    await backend.close()


async def test_timings_grow_with_load() -> None:
    backend = make_backend(small_preset("qwen3-32b-h200", max_running=64, num_kv_blocks=4096))
    request = make_request("x", words(300, "x"), max_tokens=50, ignore_eos=True)
    alone = await finish(backend, request)
    crowd = [make_request(f"c{i}", words(300, f"c{i}"), max_tokens=50, ignore_eos=True)
             for i in range(31)]
    busy = await asyncio.gather(*(finish(backend, r) for r in [*crowd, request]))
    assert busy[-1].timings.total_s > 1.2 * alone.timings.total_s
    assert busy[-1].text == alone.text
    await backend.close()


async def test_time_scale_paces_wall_clock_sleeps() -> None:
    backend = make_backend(small_preset("qwen3-32b-h200"), time_scale=0.05)
    started = time.monotonic()
    fin = await finish(backend, make_request(max_tokens=10, ignore_eos=True))
    assert time.monotonic() - started >= 0.8 * fin.timings.total_s * 0.05
    await backend.close()


async def test_load_reports_fills_and_prefix_counters() -> None:
    backend = make_backend()
    await finish(backend, make_request("a", words(40)))
    fill = backend.generate(make_request("f", words(40), max_tokens=100, ignore_eos=True,
                                         priority=Priority.FILL))
    for _ in range(3):
        await anext(fill)
    load = backend.load()
    assert (load.running, load.waiting, load.fill_running, load.max_running) == (1, 0, 1, 4)
    assert load.fill_kv_blocks == load.kv_blocks_used == 3
    assert (load.prefix_query_tokens, load.prefix_hit_tokens) == (80, 32)
    assert (await backend.lookup_prefix(words(40))).resident_tokens == 32
    await fill.aclose()
    await backend.close()
