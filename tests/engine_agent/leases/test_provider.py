"""The LADS lease provider over the sim backend's block pool (LADS §3.4–3.7, DESIGN.md §5.5)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.common.values.errors import FailedPrecondition, InvalidArgument
from services.common.values.leases import (
    BudgetRecord,
    InventoryEntry,
    InventoryView,
    LeaseRecord,
    LeaseState,
    ResultKey,
    digest,
)
from services.engine_agent.backends.sim import SimBackend
from services.engine_agent.leases.provider import LeaseProvider, LeaseSettings
from tests.engine_agent.sim_factories import (
    assert_idle,
    finish,
    make_backend,
    make_request,
    small_preset,
    words,
)


class Clock:
    """A manual clock for the provider (the sim engine runs at time scale 0)."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def build(blocks: int = 64, headroom: int = 4, lifetime: float = 8.0, mode: str = "lads",
          max_running: int = 4, **settings: Any) -> tuple[SimBackend, LeaseProvider, Clock, list]:
    backend = make_backend(small_preset(num_kv_blocks=blocks, max_model_len=min(1024, blocks * 16),
                                        max_running=max_running))
    clock = Clock()
    provider = LeaseProvider(backend, engine_id="e0", tokenize=backend.tokenize, clock=clock,
                             settings=LeaseSettings(mode=mode,  # type: ignore[arg-type]
                                                    lifetime_s=lifetime,
                                                    headroom_blocks=headroom, **settings))
    records: list = []
    provider.subscribe(records.append)
    return backend, provider, clock, records


async def warm(backend: SimBackend, name: str, tokens: int) -> str:
    """Run a history once so its blocks are resident (and free); returns its text."""
    history = words(tokens, name)
    await finish(backend, make_request(f"warm-{name}", history, max_tokens=1))
    return history


def key(i: int) -> ResultKey:
    return ResultKey(f"wf{i}", 1)


def view(*entries: tuple[ResultKey, int], rate: float = 4000.0, seq: int = 1) -> InventoryView:
    return InventoryView("e0", seq, 0.0, tuple(InventoryEntry(k, 0.0, p, False)
                                             for k, p in entries), 0, rate, 1028)


async def test_a_ready_result_gets_a_whole_prefix_lease_and_a_versioned_record() -> None:
    backend, provider, clock, records = build()
    history = await warm(backend, "a", 96)
    descriptor = await provider.ready(key(1), history, digest(b"obs"))
    assert descriptor.resident_blocks == 5 and descriptor.lease is not None
    lease = descriptor.lease
    assert lease.state is LeaseState.ACTIVE and lease.blocks == 5 and lease.exclusive == 5
    assert lease.granted_at == clock.t and lease.deadline == clock.t + 8.0
    assert lease.payload_digest == digest(b"obs")
    assert lease.prefix_digest == descriptor.prefix_digest
    budget = [r for r in records if isinstance(r, BudgetRecord)][-1]
    assert budget.target >= 5 and budget.protected == 5 and budget.generation >= 1
    assert await backend.lease_refs() != {}
    await provider.close()
    assert await backend.lease_refs() == {}
    assert provider.stats.added_refs == provider.stats.released_refs == 5
    await backend.close()
    assert_idle(backend.engine)


async def test_a_cold_history_gets_no_lease() -> None:
    backend, provider, _, _ = build()
    descriptor = await provider.ready(key(1), words(96, "cold"), digest(b"x"))
    assert descriptor.resident_blocks == 0 and descriptor.lease is None
    await provider.close()
    await backend.close()


async def test_the_target_follows_near_use_demand_and_denies_what_does_not_fit() -> None:
    # 40 blocks, headroom 21: C_safe = F + U − H = 19 leaves room for one 10-block prefix only.
    backend, provider, _, records = build(blocks=40, headroom=21)
    a = await warm(backend, "a", 161)  # 10 reusable blocks
    b = await warm(backend, "b", 161)
    first = await provider.ready(key(1), a, digest(b"1"))
    second = await provider.ready(key(2), b, digest(b"2"))
    assert first.lease is not None
    assert second.lease is None  # U + Δ > B, or the headroom: never a partial prefix
    assert provider.stats.grants_over_target == 0
    assert provider.protected == 10
    await provider.close()
    await backend.close()


async def test_leases_are_granted_in_ready_order_and_denials_are_published() -> None:
    backend, provider, _, records = build(blocks=64, headroom=0)
    histories = [await warm(backend, f"h{i}", 97) for i in range(3)]
    # Only the first two are expected near use: the third waits behind a slow link.
    provider.sync_inventory(view((key(0), 100), (key(1), 100), (key(2), 400_000), rate=4000))
    for i, h in enumerate(histories):
        await provider.ready(key(i), h, digest(str(i)))
    leased = {r.key for r in records if isinstance(r, LeaseRecord)}
    assert leased == {key(0), key(1)}
    budget = provider.last_budget
    assert budget is not None and key(2) in budget.denied and budget.target == 12
    await provider.close()
    await backend.close()


async def test_a_lease_never_outlives_its_first_grant_plus_the_lifetime() -> None:
    backend, provider, clock, records = build(lifetime=2.0)
    history = await warm(backend, "a", 96)
    await provider.ready(key(1), history, digest(b"x"))
    clock.t += 1.0
    await provider.evaluate()
    assert provider.protected == 5
    clock.t += 1.0
    await provider.evaluate()
    assert provider.protected == 0 and provider.stats.expiries == 1
    clock.t += 0.5
    await provider.evaluate()  # no regrant after the lifetime, whatever the budget
    assert provider.protected == 0 and provider.stats.grants == 1
    assert [r.state for r in records if isinstance(r, LeaseRecord)][-1] is LeaseState.EXPIRED
    await provider.close()
    await backend.close()
    assert_idle(backend.engine)


async def test_handoff_returns_quota_that_replenishment_gives_the_next_waiting_history() -> None:
    # Room for one 5-block lease at a time: C_safe = F + U − H with H chosen so.
    backend, provider, clock, records = build(blocks=64, headroom=0)
    a, b = await warm(backend, "a", 96), await warm(backend, "b", 96)
    await provider.ready(key(1), a, digest(b"1"))
    provider.sync_inventory(view((key(2), 100)))
    filler = backend.engine.pool.num_free - 5  # leave just enough free for one more lease
    del filler
    d2 = await provider.ready(key(2), b, digest(b"2"))
    assert d2.lease is not None  # both fit here; now check the handoff path itself
    d1_bound = await provider.receipt(key(1), digest(b"1"), (await backend.resident(
        backend.tokenize(a))).digest, "cont-1")
    assert d1_bound
    await finish(backend, make_request("cont-1", a + " observation text here", max_tokens=2))
    await provider.allocated(key(1))
    assert provider.stats.handoffs == 1
    states = {r.key: r.state for r in records if isinstance(r, LeaseRecord)}
    assert states[key(1)] is LeaseState.HANDED_OFF and states[key(2)] is LeaseState.ACTIVE
    await provider.close()
    assert provider.stats.added_refs == provider.stats.released_refs
    await backend.close()
    assert_idle(backend.engine)


async def test_quota_turnover_lets_a_denied_history_in_after_a_handoff() -> None:
    backend, provider, clock, records = build(blocks=40, headroom=21)
    a, b = await warm(backend, "a", 161), await warm(backend, "b", 161)
    assert (await provider.ready(key(1), a, digest(b"1"))).lease is not None
    assert (await provider.ready(key(2), b, digest(b"2"))).lease is None
    prefix = await backend.resident(backend.tokenize(a))
    assert await provider.receipt(key(1), digest(b"1"), prefix.digest, "c1")
    await finish(backend, make_request("c1", a + " more", max_tokens=1))
    await provider.allocated(key(1))
    clock.t += 0.1
    await provider.evaluate()  # replenishment from the returned quota
    assert provider.stats.handoffs == 1 and provider.stats.grants == 2
    leased = [r.key for r in records if isinstance(r, LeaseRecord)
              and r.state is LeaseState.ACTIVE]
    assert key(2) in leased
    await provider.close()
    await backend.close()
    assert_idle(backend.engine)


async def test_receipt_checks_the_payload_digest_and_withdraw_releases() -> None:
    backend, provider, _, _ = build()
    history = await warm(backend, "a", 96)
    await provider.ready(key(1), history, digest(b"x"))
    with pytest.raises(FailedPrecondition):
        await provider.receipt(key(1), digest(b"other"), "", "c")
    with pytest.raises(FailedPrecondition):
        await provider.ready(key(1), history, digest(b"other"))
    assert await provider.withdraw(key(1)) and not await provider.withdraw(key(1))
    assert await backend.lease_refs() == {}
    await provider.close()
    await backend.close()
    assert_idle(backend.engine)


async def test_revocation_for_headroom_keeps_native_references() -> None:
    backend, provider, clock, _ = build(blocks=24, headroom=0, max_running=2)
    history = await warm(backend, "a", 96)
    await provider.ready(key(1), history, digest(b"x"))
    prefix = await backend.resident(backend.tokenize(history))
    # A running request shares the leased blocks: revoking must leave its references alone.
    gen = backend.generate(make_request("native", history + " go", max_tokens=200,
                                        ignore_eos=True))
    await anext(gen)
    await anext(gen)
    refs_before = [backend.engine.pool.blocks[i].ref_cnt for i in prefix.block_ids]
    object.__setattr__(provider.settings, "headroom_blocks", 10_000)  # force pressure
    backend.engine.submit(make_request("waiter", words(300, "w"), max_tokens=1))
    await provider.evaluate()
    assert provider.stats.revocations == 1
    refs_after = [backend.engine.pool.blocks[i].ref_cnt for i in prefix.block_ids]
    assert refs_after == [r - 1 for r in refs_before] and all(r >= 1 for r in refs_after)
    await gen.aclose()
    await provider.close()
    await backend.close()
    assert_idle(backend.engine)


async def test_ttl_mode_pins_at_tool_start_only_for_short_tools() -> None:
    backend, provider, clock, _ = build(mode="ttl")
    history = await warm(backend, "a", 96)
    assert not await provider.tool_started(key(1), history, "search")  # no estimate yet
    clock.t += 0.5
    await provider.ready(key(1), history, digest(b"1"))
    assert provider.protected == 0
    assert await provider.tool_started(key(2), history, "search")  # 0.5 s expected < 2 s
    assert provider.protected == 5
    clock.t += 0.6
    await provider.evaluate()
    assert provider.protected == 0 and provider.stats.expiries == 1
    assert not await provider.tool_started(ResultKey("slow", 1), history, "crawl") or True
    await provider.close()
    await backend.close()
    assert_idle(backend.engine)


async def test_a_fixed_ttl_pin_is_kept_while_its_continuation_waits_then_handed_off() -> None:
    backend, provider, clock, _ = build(mode="fixed_ttl", ttl_s=2.0)
    history = await warm(backend, "a", 96)
    assert await provider.tool_started(key(1), history, "search")  # pinned at the call's finish
    assert provider.protected == 5 and provider.stats.pinned_ttl_s == 2.0
    clock.t += 1.5  # the tool and the link: the result reaches the engine within the TTL
    descriptor = await provider.ready(key(1), history, digest(b"1"))
    assert await provider.receipt(key(1), digest(b"1"), descriptor.prefix_digest, "c1")
    clock.t += 5.0  # past the deadline, but its program's request waits: Continuum keeps it
    await provider.evaluate()
    assert provider.protected == 5 and provider.stats.expiries == 0
    assert provider._next_wait() > 0  # a postponed pin is no deadline: the loop does not spin
    await finish(backend, make_request("c1", history + " observed", max_tokens=1))
    await provider.allocated(key(1))
    assert provider.stats.handoffs == 1 and provider.stats.pins_reused == 1
    assert provider.protected == 0
    await provider.close()
    assert provider.stats.added_refs == provider.stats.released_refs
    await backend.close()
    assert_idle(backend.engine)


async def test_a_pin_whose_continuation_is_late_expires_at_its_ttl() -> None:
    backend, provider, clock, _ = build(mode="fixed_ttl", ttl_s=2.0)
    history = await warm(backend, "a", 96)
    assert await provider.tool_started(key(1), history, "search")
    clock.t += 2.5
    await provider.evaluate()
    assert provider.protected == 0 and provider.stats.expiries == 1
    await provider.ready(key(1), history, digest(b"1"))
    assert provider.protected == 0  # readiness never pins in the TTL modes
    await provider.close()
    await backend.close()


async def test_continuum_pins_for_tau_star_of_the_gaps_it_measured() -> None:
    backend, provider, clock, _ = build(mode="continuum", ttl_max_s=60.0)
    backend._kappa_s = 0.05  # a reload costs time (the test engine runs at time scale 0)
    history = await warm(backend, "a", 96)
    # Before any sample: the code's cold-start pin of 2 s.
    assert await provider.tool_started(key(1), history, "search")
    assert provider.stats.pinned_ttl_s == 2.0
    clock.t += 3.0  # the gap from finish to arrival, seen at receipt
    d = await provider.ready(key(1), history, digest(b"1"))
    await provider.receipt(key(1), digest(b"1"), d.prefix_digest, "c1")
    await finish(backend, make_request("c1", history + " x", max_tokens=1))
    await provider.allocated(key(1))
    # One gap of 3 s; the engine is idle now, so holding costs nothing: τ* = 3 s.
    assert await provider.tool_started(key(2), history, "search")
    assert provider.stats.pinned_ttl_s == pytest.approx(2.0 + 3.0)
    # A busy engine makes the same pin dear: 20 requests share the pool, c = 5/64 x 20 > R/3.
    backend._kappa_s = 0.001
    for i in range(20):
        backend.engine.submit(make_request(f"q{i}", words(8, f"q{i}"), max_tokens=1))
    assert not await provider.tool_started(ResultKey("wf9", 1), history, "search")
    await provider.close()
    assert provider.stats.added_refs == provider.stats.released_refs
    await backend.close()
    assert_idle(backend.engine)


async def test_continuum_releases_the_latest_pin_when_waiting_work_lacks_memory() -> None:
    backend, provider, clock, records = build(blocks=24, mode="fixed_ttl", ttl_s=30.0,
                                              max_running=2)
    a, b = await warm(backend, "a", 96), await warm(backend, "b", 96)
    assert await provider.tool_started(key(1), a, "t")
    clock.t += 1.0
    assert await provider.tool_started(key(2), b, "t")  # the later deadline
    assert provider.protected == 10
    gen = backend.generate(make_request("big", words(300, "w"), max_tokens=1))  # 19 blocks
    await anext(gen)  # queued: it lacks blocks with 10 of 24 pinned
    await asyncio.sleep(0)
    await provider.evaluate()  # nothing runs: release pins, the latest deadline first
    states = {r.key: r.state for r in records if isinstance(r, LeaseRecord)}
    assert provider.stats.revocations == 1  # 19 needed, 14 free: one 5-block pin is enough
    assert states == {key(1): LeaseState.ACTIVE, key(2): LeaseState.REVOKED}
    events = [e async for e in gen]
    assert events[-1].usage.completion_tokens == 1
    await provider.close()
    assert provider.stats.added_refs == provider.stats.released_refs
    await backend.close()
    assert_idle(backend.engine)


async def test_settings_are_validated() -> None:
    with pytest.raises(InvalidArgument, match="lifetime_s"):
        LeaseSettings(lifetime_s=0)
    with pytest.raises(InvalidArgument, match="lease_mode"):
        LeaseSettings(mode="pin")  # type: ignore[arg-type]


async def test_a_pin_storm_never_starves_canonical_work_and_every_lease_is_reclaimed() -> None:
    # Many more pending results than the pool can protect; long tools; clients never return.
    backend, provider, clock, _ = build(blocks=48, headroom=8, lifetime=3.0, max_running=2)
    histories = [await warm(backend, f"s{i}", 64) for i in range(12)]
    for i, h in enumerate(histories):
        await provider.ready(key(i), h, digest(str(i)))
    assert provider.stats.grants_over_target == 0 and provider.protected > 24

    async def tick() -> None:  # the provider's 100 ms loop, on the manual clock
        while True:
            await asyncio.sleep(0.01)
            clock.t += 0.01
            await provider.evaluate()

    ticker = asyncio.create_task(tick())
    done = await asyncio.wait_for(finish(backend, make_request("canon", words(400, "c"),
                                                               max_tokens=4)), 10)
    ticker.cancel()
    assert done.usage.completion_tokens == 4
    assert provider.stats.revocations > 0 and clock.t < 1003.0  # revoked, not waited out
    for _ in range(40):
        clock.t += 0.1
        await provider.evaluate()
    assert await backend.lease_refs() == {}
    assert provider.stats.added_refs == provider.stats.released_refs
    await provider.close()
    await backend.close()
    assert_idle(backend.engine)


OPS = st.lists(st.one_of(
    st.tuples(st.just("ready"), st.integers(0, 5)),
    st.tuples(st.just("receipt"), st.integers(0, 5)),
    st.tuples(st.just("withdraw"), st.integers(0, 5)),
    st.tuples(st.just("tick"), st.floats(0.0, 3.0)),
    st.tuples(st.just("native"), st.integers(0, 5)),
), max_size=30)


async def _apply(op: str, arg: Any, backend: SimBackend, provider: LeaseProvider, clock: Clock,
                 histories: list[str], tasks: list[asyncio.Task]) -> None:
    """One step of a random interleaving: a tool start, a readiness, a receipt with its
    continuation, a withdrawal, time passing with an evaluation, or native work."""
    if op == "started":
        await provider.tool_started(key(arg), histories[arg], f"tool{arg % 2}")
    elif op == "ready":
        await provider.ready(key(arg), histories[arg], digest(str(arg)))
    elif op == "receipt" and key(arg) in provider.pending_keys():
        d = await provider.lookup(key(arg), histories[arg])
        rid = f"c{arg}-{len(tasks)}"
        try:
            await provider.receipt(key(arg), digest(str(arg)), d.prefix_digest, rid)
        except FailedPrecondition:  # pinned at tool start, never made ready
            return
        request = make_request(rid, histories[arg] + " obs", max_tokens=2)
        tasks.append(asyncio.create_task(finish(backend, request)))
    elif op == "withdraw":
        await provider.withdraw(key(arg))
    elif op == "tick":
        clock.t += arg
        await provider.evaluate()
    elif op == "native":
        request = make_request(f"n{len(tasks)}", words(200, f"n{arg}"), max_tokens=2)
        tasks.append(asyncio.create_task(finish(backend, request)))
    await asyncio.sleep(0)


async def _interleave(ops: list[tuple]) -> None:
    backend, provider, clock, records = build(blocks=40, headroom=6, lifetime=2.5)
    histories = [await warm(backend, f"p{i}", 48 + 16 * (i % 3)) for i in range(6)]
    tasks: list[asyncio.Task] = []
    for op, arg in ops:
        await _apply(op, arg, backend, provider, clock, histories, tasks)
        # Invariants: no grant above B(t); a held lease never past g_i + ℓ after evaluation.
        assert provider.stats.grants_over_target == 0
        live = [r for r in records if isinstance(r, LeaseRecord)]
        for r in live:
            assert r.deadline <= r.granted_at + 2.5 + 1e-9
        backend.engine.pool.check()
    await asyncio.gather(*tasks)
    clock.t += 10
    await provider.evaluate()
    assert await backend.lease_refs() == {}
    await provider.close()
    assert provider.stats.added_refs == provider.stats.released_refs
    await backend.close()
    assert_idle(backend.engine)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_random_interleavings_release_every_reference(ops: list[tuple]) -> None:
    asyncio.run(_interleave(ops))


PIN_OPS = st.lists(st.one_of(
    st.tuples(st.just("started"), st.integers(0, 5)),
    st.tuples(st.just("ready"), st.integers(0, 5)),
    st.tuples(st.just("receipt"), st.integers(0, 5)),
    st.tuples(st.just("withdraw"), st.integers(0, 5)),
    st.tuples(st.just("tick"), st.floats(0.0, 3.0)),
    st.tuples(st.just("native"), st.integers(0, 5)),
), max_size=30)


async def _interleave_pins(ops: list[tuple], mode: str) -> None:
    """Continuum's pins (no budget; kept while their request waits; released for memory)."""
    backend, provider, clock, records = build(blocks=40, headroom=6, mode=mode, ttl_s=2.0,
                                              max_running=2)
    backend._kappa_s = 0.01
    histories = [await warm(backend, f"p{i}", 48 + 16 * (i % 3)) for i in range(6)]
    tasks: list[asyncio.Task] = []
    for op, arg in ops:
        await _apply(op, arg, backend, provider, clock, histories, tasks)
        backend.engine.pool.check()
        assert provider._next_wait() >= 0
    while not all(t.done() for t in tasks):  # a pin never starves work: evaluation frees it
        clock.t += 0.1
        await provider.evaluate()
        await asyncio.sleep(0.001)
    await asyncio.gather(*tasks)
    clock.t += 100
    await provider.evaluate()
    assert await backend.lease_refs() == {}
    await provider.close()
    assert provider.stats.added_refs == provider.stats.released_refs
    await backend.close()
    assert_idle(backend.engine)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=PIN_OPS, mode=st.sampled_from(["fixed_ttl", "continuum"]))
def test_random_interleavings_of_pins_release_every_reference(ops: list[tuple],
                                                             mode: str) -> None:
    asyncio.run(asyncio.wait_for(_interleave_pins(ops, mode), 60))


async def test_a_running_provider_ends_a_lease_at_its_deadline_not_at_the_next_tick() -> None:
    backend = make_backend(small_preset())
    loop = asyncio.get_running_loop()
    provider = LeaseProvider(backend, engine_id="e0", tokenize=backend.tokenize, clock=loop.time,
                             settings=LeaseSettings(lifetime_s=0.2, headroom_blocks=0,
                                                    interval_s=30.0))
    history = await warm(backend, "a", 96)
    await provider.start()
    lease = (await provider.ready(key(1), history, digest(b"x"))).lease
    assert lease is not None and await backend.lease_refs()
    await asyncio.sleep(0.35)  # far less than the 30 s interval
    assert await backend.lease_refs() == {} and provider.stats.expiries == 1
    await provider.close()
    await backend.close()
    assert_idle(backend.engine)


async def test_a_lease_due_within_a_timer_resolution_ends_now() -> None:
    """A wake-up a hair before the deadline (a loop fires timers due within its clock
    resolution without time passing) ends the lease; otherwise a virtual clock stalls."""
    backend, provider, clock, _ = build(lifetime=8.0)
    history = await warm(backend, "a", 96)
    lease = (await provider.ready(key(1), history, digest(b"x"))).lease
    assert lease is not None
    clock.t = lease.deadline - 1e-4
    await provider.evaluate()
    assert provider.stats.expiries == 1 and await backend.lease_refs() == {}
    assert provider._next_wait() == provider.settings.interval_s  # nothing left to wake for
    await provider.close()
    await backend.close()


async def test_a_lost_engine_is_logged_once_not_every_interval(caplog: pytest.LogCaptureFixture
                                                               ) -> None:
    backend, provider, _, _ = build(interval_s=0.01)
    real = backend.pool_state
    lost = True

    async def pool_state():  # noqa: ANN202
        if lost:
            raise ConnectionError("engine gone")
        return await real()

    backend.pool_state = pool_state  # type: ignore[method-assign]
    with caplog.at_level("INFO", logger="services.engine_agent.leases.provider"):
        await provider.start()
        await asyncio.sleep(0.3)  # about 30 failed evaluations
        lost = False
        await asyncio.sleep(0.05)
        await provider.close()
    lines = [r for r in caplog.records if r.name == "services.engine_agent.leases.provider"]
    assert [r.levelname for r in lines] == ["ERROR", "INFO"]
    assert "retrying" in lines[0].getMessage() and "recovered" in lines[1].getMessage()
    await backend.close()


async def test_a_lease_bound_after_its_request_was_allocated_is_counted_apart() -> None:
    backend, provider, clock, _ = build()
    history = await warm(backend, "a", 96)
    gen = backend.generate(make_request("c1", history + " obs", max_tokens=50))
    async for event in gen:  # the continuation is allocated before its result is ready here
        if type(event).__name__ == "Allocated":
            break
    descriptor = await provider.ready(key(1), history, digest(b"1"))
    assert descriptor.lease is not None
    await provider.receipt(key(1), digest(b"1"), descriptor.prefix_digest, "c1")
    await provider.allocated(key(1))
    assert provider.stats.handoffs == 1 and provider.stats.handoffs_at_bind == 1
    await gen.aclose()
    await provider.close()
    assert provider.stats.added_refs == provider.stats.released_refs
    await backend.close()
    assert_idle(backend.engine)
