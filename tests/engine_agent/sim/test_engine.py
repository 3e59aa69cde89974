"""SimEngine: validation, prefix caching, KV accounting, preemption, prefix pins, properties."""

from __future__ import annotations

import ast
import asyncio
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.common.values.errors import AlreadyExists, InvalidArgument, PayloadTooLarge
from services.common.values.generation import FinishReason, Priority
from services.engine_agent.backend import TokenDelta
from services.engine_agent.backends.sim import SimBackend
from services.engine_agent.sim.cost_model import get_preset
from services.engine_agent.sim.engine import SimEngine
from tests.engine_agent.sim_factories import (
    assert_idle,
    finish,
    make_backend,
    make_engine,
    make_request,
    small_preset,
    words,
)

CORE = ["backends/sim.py", "sim", "leases"]


def test_core_modules_import_no_grpc() -> None:
    root = Path(__file__).parents[3] / "services" / "engine_agent"
    paths = [p for name in CORE for p in ([root / name] if name.endswith(".py")
                                          else sorted((root / name).rglob("*.py")))]
    assert len(paths) > 10
    for path in paths:
        name = str(path)
        tree = ast.parse(path.read_text())
        imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        imported += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [m for m in imported if m.split(".")[0] == "grpc"], name


# --- validation -----------------------------------------------------------------------------

async def test_prompt_that_can_never_fit_is_refused_naming_the_limits() -> None:
    engine = make_engine()
    with pytest.raises(PayloadTooLarge) as info:
        engine.submit(make_request(prompt=words(1024)))
    assert info.value.field == "prompt"
    assert "1024 tokens exceed the limit of 1023" in str(info.value)
    assert "max_model_len 1024" in str(info.value) and "64 blocks of 16" in str(info.value)
    engine.submit(make_request(prompt=words(1023), max_tokens=1))
    await engine.close()


BAD_FIELDS = [
    ({"request_id": ""}, "request_id"),
    ({"model": "gpt-17"}, "model"),
    ({"prompt": ""}, "prompt"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": 1025}, "max_tokens"),
    ({"temperature": -1.0}, "temperature"),
    ({"top_p": 0.0}, "top_p"),
    ({"top_k": -1}, "top_k"),
    ({"stop": ("",)}, "stop"),
    ({"priority": 7}, "priority"),
]


@pytest.mark.parametrize("fields, field", BAD_FIELDS, ids=[b[1] for b in BAD_FIELDS])
async def test_bad_fields_are_refused_naming_the_field(fields: dict, field: str) -> None:
    engine = make_engine()
    with pytest.raises(InvalidArgument) as info:
        engine.submit(make_request(**fields))
    assert info.value.field == field and not isinstance(info.value, PayloadTooLarge)
    assert engine.load().waiting == 0
    await engine.close()


async def test_duplicate_live_request_id_is_refused_until_it_finishes() -> None:
    backend = make_backend()
    engine = backend.engine
    engine.submit(make_request("dup", max_tokens=3))
    with pytest.raises(AlreadyExists, match="dup"):
        engine.submit(make_request("dup"))
    engine.abort("dup")
    assert (await finish(backend, make_request("dup"))).reason is not FinishReason.ABORT
    await backend.close()


def test_engine_refuses_a_negative_time_scale() -> None:
    with pytest.raises(ValueError, match="time_scale"):
        SimEngine(small_preset(), time_scale=-1)


# --- prefix caching and reference counts -----------------------------------------------------

async def test_repeated_prefix_hits_and_counts_queries() -> None:
    backend = make_backend()
    first = await finish(backend, make_request("a", words(50)))
    second = await finish(backend, make_request("b", words(50)))
    shared = await finish(backend, make_request("c", words(40) + words(30, "z")))
    assert first.usage.cached_prompt_tokens == 0
    assert second.usage.cached_prompt_tokens == 48 and second.text == first.text
    assert shared.usage.cached_prompt_tokens == 32
    load = backend.load()
    assert (load.prefix_query_tokens, load.prefix_hit_tokens) == (170, 80)
    await backend.close()


async def test_every_reference_count_returns_to_zero_after_every_request() -> None:
    backend = make_backend()
    for i in range(12):
        await finish(backend, make_request(f"r{i}", words(10 + 17 * i, "ab"[i % 2]),
                                           max_tokens=1 + 7 * i, ignore_eos=True))
        assert_idle(backend.engine)
    await backend.close()


async def test_kv_pressure_preempts_and_recomputes_with_identical_output() -> None:
    preset = small_preset(num_kv_blocks=16, max_model_len=256)
    requests = [make_request(f"r{i}", words(40, f"p{i}"), max_tokens=150, ignore_eos=True)
                for i in range(4)]
    alone = SimBackend(preset, model="sim-test")
    expected = [(await finish(alone, r)).text for r in requests]
    await alone.close()
    backend = SimBackend(preset, model="sim-test")
    results = await asyncio.gather(*(finish(backend, r) for r in requests))
    assert [r.text for r in results] == expected
    assert {r.reason for r in results} == {FinishReason.LENGTH}
    assert backend.engine.scheduler.num_preemptions > 0
    assert_idle(backend.engine)
    await backend.close()


async def test_abort_of_a_waiting_request_takes_it_out_of_the_queue() -> None:
    backend = make_backend(small_preset(max_running=1))
    engine = backend.engine
    engine.submit(make_request("run", max_tokens=50))
    engine.submit(make_request("wait"))
    assert backend.load().waiting == 2
    assert engine.abort("wait") and backend.load().waiting == 1
    await backend.close()
    assert_idle(engine)


# --- prefix pins for leases -----------------------------------------------------------------

async def lease(backend: SimBackend, lease_id: str, prompt: str) -> int:
    """Lease the resident prefix of ``prompt`` through the ``LeasePort``; blocks leased."""
    prefix = await backend.resident(backend.tokenize(prompt))
    ok = await backend.acquire(lease_id, prefix.block_ids, prefix.digest)
    return prefix.blocks if ok else 0


async def test_leased_prefix_survives_pressure_and_refcounts_return_to_zero() -> None:
    backend = make_backend(small_preset(num_kv_blocks=24, max_model_len=384))
    history, control = words(96, "h"), words(96, "k")
    await finish(backend, make_request("h", history))
    await finish(backend, make_request("k", control))
    prefix = await backend.resident(backend.tokenize(history))
    assert prefix.blocks == 5 and prefix.free == frozenset(prefix.block_ids)  # not the last
    assert not await backend.acquire("bad", prefix.block_ids, "not-the-digest")
    assert await backend.acquire("l", prefix.block_ids, prefix.digest)
    assert not await backend.acquire("l", prefix.block_ids, prefix.digest)  # duplicate id
    assert all(backend.engine.pool.blocks[i].ref_cnt == 1 for i in prefix.block_ids)
    assert await backend.lease_refs() == {"l": 5}
    for i in range(3):  # pressure: each fills the pool's free blocks
        await finish(backend, make_request(f"x{i}", words(250, f"x{i}"), max_tokens=2))
    assert (await backend.lookup_prefix(history)).resident_tokens == 80
    assert (await backend.lookup_prefix(control)).resident_tokens == 0
    assert await backend.release("l") == 5 and await backend.release("l") == 0
    assert_idle(backend.engine)
    await backend.close()


async def test_bound_lease_hands_off_at_first_allocation_of_an_owner() -> None:
    backend = make_backend(small_preset(num_kv_blocks=40, max_model_len=384))
    history = words(96, "h")
    await finish(backend, make_request("h", history))
    assert await lease(backend, "l", history) == 5
    await backend.bind("l", "cont")
    await finish(backend, make_request("cont", history + " and then some more words"))
    [handoff] = await backend.handoffs()
    assert handoff.lease_id == "l" and handoff.request_id == "cont" and handoff.owned
    assert await backend.lease_refs() == {}
    assert backend.engine.leases.added == backend.engine.leases.released == 5
    assert_idle(backend.engine)
    await backend.close()


async def test_a_continuation_that_does_not_own_the_blocks_keeps_the_lease() -> None:
    backend = make_backend(small_preset(num_kv_blocks=40, max_model_len=384))
    history = words(96, "h")
    await finish(backend, make_request("h", history))
    assert await lease(backend, "l", history) == 5
    await backend.bind("l", "other")
    await finish(backend, make_request("other", words(96, "z")))
    [handoff] = await backend.handoffs()
    assert not handoff.owned and await backend.lease_refs() == {"l": 5}
    assert await backend.release("l") == 5
    assert_idle(backend.engine)
    await backend.close()


async def test_close_releases_leases_left_behind() -> None:
    backend = make_backend()
    await finish(backend, make_request("h", words(64)))
    assert await lease(backend, "l", words(64)) == 3
    assert backend.load().kv_blocks_used == 3
    await backend.close()
    assert await backend.lease_refs() == {}
    assert_idle(backend.engine)


# --- the papers' interference shape (notes/paper-figures.md, §2.2 / Fig. 5b) ----------------

async def _latency_beside_fills(fills: int, fill_prompt: int) -> float:
    """Total time of a fixed request that arrives while ``fills`` fills are decoding."""
    backend = make_backend(get_preset("qwen3-32b-h200"))
    streams = [backend.generate(make_request(
        f"f{i}", words(fill_prompt, f"f{i}"), max_tokens=400, ignore_eos=True,
        priority=Priority.FILL)) for i in range(fills)]
    for stream in streams:  # co-resident: every fill is past its prefill
        while not isinstance(await anext(stream), TokenDelta):
            pass
    fixed = await finish(backend, make_request("x", words(1500, "x"), max_tokens=200,
                                               ignore_eos=True))
    for stream in streams:
        await stream.aclose()
    await backend.close()
    return fixed.timings.total_s


async def test_fill_interference_grows_with_fill_count_and_context() -> None:
    alone = await _latency_beside_fills(0, 10)
    few = await _latency_beside_fills(3, 1000) / alone
    many = await _latency_beside_fills(48, 1000) / alone
    short = await _latency_beside_fills(24, 10) / alone
    long = await _latency_beside_fills(24, 6000) / alone
    # Paper: few +4–6%, 48 fills +53% (fill context not given), 24 fills +11% → +145%.
    assert 1.0 < few < 1.1 and 1.3 < many < 2.2
    assert 1.05 < short < 1.25 and 1.8 < long < 3.2


# --- property: any interleaving leaves the pool whole ---------------------------------------

PROMPTS = [words(5), words(40), words(70), words(40, "b"), words(120, "c"), words(250, "d"),
           words(90, "e"), words(60, "f") + words(60, "g")]
SUBMIT = st.tuples(st.just("submit"), st.integers(0, len(PROMPTS) - 1), st.integers(1, 60),
                   st.booleans(), st.booleans())
OPS = st.lists(st.one_of(
    SUBMIT, SUBMIT,
    st.tuples(st.just("abort"), st.integers(0, 30)),
    st.tuples(st.just("cancel"), st.integers(0, 30)),
    st.tuples(st.just("run"), st.integers(1, 8)),
    st.tuples(st.just("pin"), st.integers(0, len(PROMPTS) - 1)),
    st.tuples(st.just("unpin"), st.integers(0, 30)),
), max_size=50)


def check_accounting(backend: SimBackend, pins: list[str]) -> None:
    engine = backend.engine
    pool = engine.pool
    pool.check()
    assert pool.num_free + pool.num_used == pool.num_blocks
    held = sum(len(s.blocks) for s in engine.scheduler.running.values())
    held += sum((backend.engine.leases.refs()).values())
    assert sum(b.ref_cnt for b in pool.blocks) == held
    assert all(not s.blocks for q in engine.scheduler.waiting.values() for s in q.values())


async def _interleave(ops: list[tuple]) -> None:
    backend = make_backend(small_preset(num_kv_blocks=20, max_model_len=320, max_running=3,
                                        max_batched_tokens=64))
    tasks: list[asyncio.Task] = []
    pins: list[str] = []
    for op in ops:
        kind = op[0]
        if kind == "submit":
            _, p, max_tokens, fill, ignore_eos = op
            request = make_request(f"r{len(tasks)}", PROMPTS[p], max_tokens=max_tokens,
                                   ignore_eos=ignore_eos,
                                   priority=Priority.FILL if fill else Priority.CANONICAL)
            tasks.append(asyncio.create_task(finish(backend, request)))
        elif kind == "abort":
            await backend.abort(f"r{op[1]}")
        elif kind == "cancel" and tasks:
            tasks[op[1] % len(tasks)].cancel()
        elif kind == "run":
            for _ in range(op[1]):
                await asyncio.sleep(0)
        elif kind == "pin":
            pin_id = f"p{len(tasks)}-{len(pins)}-{op[1]}"
            if await lease(backend, pin_id, PROMPTS[op[1]]):
                pins.append(pin_id)
        elif kind == "unpin" and pins:
            await backend.release(pins.pop(op[1] % len(pins)))
        check_accounting(backend, pins)
    for pin in pins:
        await backend.release(pin)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(not isinstance(r, Exception) or isinstance(r, asyncio.CancelledError)
               for r in results)
    assert_idle(backend.engine)
    await backend.close()
    assert_idle(backend.engine)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_random_interleavings_leave_every_refcount_at_zero(ops: list[tuple]) -> None:
    asyncio.run(_interleave(ops))


def _random_ops(seed: int, n: int) -> list[tuple]:
    rng = random.Random(seed)
    kinds = ["submit"] * 4 + ["abort", "cancel", "run", "run", "pin", "unpin"]
    ops: list[tuple] = []
    for _ in range(n):
        kind = rng.choice(kinds)
        if kind == "submit":
            ops.append((kind, rng.randrange(len(PROMPTS)), rng.randint(1, 60),
                        rng.random() < 0.5, rng.random() < 0.5))
        elif kind == "pin":
            ops.append((kind, rng.randrange(len(PROMPTS))))
        else:
            ops.append((kind, rng.randint(1, 30)))
    return ops


@pytest.mark.parametrize("seed", range(5))
async def test_long_random_interleavings_leave_every_refcount_at_zero(seed: int) -> None:
    await _interleave(_random_ops(seed, 300))


async def test_a_failing_step_loop_ends_requests_as_errors_not_hangs() -> None:
    backend = make_backend()

    def broken() -> None:
        raise RuntimeError("scheduler bug")

    backend.engine.scheduler.schedule = broken  # type: ignore[method-assign,assignment]
    fin = await finish(backend, make_request())
    assert fin.reason is FinishReason.ERROR
    await backend.close()
    assert_idle(backend.engine)
