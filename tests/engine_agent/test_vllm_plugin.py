"""The vLLM plugin's lease and allocation logic on a fake engine core (no vLLM needed):
``dynbranch_vllm_plugin.engine_core`` and ``.leases`` (plugins/vllm).

The fake engine core is ``vllm_plugin_fakes``; the real pool is exercised in
tests/real_engine/test_vllm_leases.py (embedded) and test_openai_server.py (over the channel).
"""

from __future__ import annotations

import inspect
import logging
from concurrent.futures import Future
from types import SimpleNamespace

import pytest
from dynbranch_vllm_plugin import engine_core as plugin
from dynbranch_vllm_plugin import leases as plugin_leases

from tests.engine_agent.vllm_plugin_fakes import (
    Policy,
    add_req,
    cache_prefix,
    leased_prefix,
    make_core,
    plain_hashes,
    plugin_log,
    priority_scheduling,
    run_request,
    step,
)


@pytest.fixture(autouse=True)
def _plain_hashes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plugin, "_block_hashes", plain_hashes)


# ---- TTL leases by token ids ----------------------------------------------------------------


def test_lease_touches_exactly_the_resident_blocks_and_release_restores() -> None:
    core, pool = make_core()
    ids = list(range(10))  # two full blocks + 2 tokens
    blocks = cache_prefix(pool, ids, 1)
    free_before = pool.get_num_free_blocks()
    grant = plugin.dynbranch_lease(core, "L1", ids, 30.0)
    assert grant["blocks"] == 2 and grant["block_ids"] == blocks and grant["tokens"] == 8
    assert pool.refs(blocks) == [1, 1]
    assert pool.get_num_free_blocks() == free_before - 2
    # renewing does not add references
    assert plugin.dynbranch_lease(core, "L1", ids, 30.0)["renewed"] is True
    assert pool.refs(blocks) == [1, 1]
    assert plugin_leases.dynbranch_release(core, "L1") == 2
    assert pool.refs(blocks) == [0, 0]
    assert pool.get_num_free_blocks() == free_before
    assert pool.free_order[-2:] == list(reversed(blocks))  # the prefix tail is evicted first
    assert plugin_leases.dynbranch_release(core, "L1") == 0  # never released twice


def test_lookup_stops_before_the_last_token() -> None:
    core, pool = make_core()
    ids = list(range(8))
    cache_prefix(pool, ids, 1)
    assert plugin.dynbranch_lookup(core, ids)["resident_tokens"] == 4
    assert plugin.dynbranch_lookup(core, ids + [99])["resident_tokens"] == 8


def test_nothing_resident_grants_nothing() -> None:
    core, _ = make_core()
    assert plugin.dynbranch_lease(core, "L", [1, 2, 3, 4, 5], 1.0)["blocks"] == 0
    assert plugin_leases.dynbranch_lease_stats(core)["leases"] == 0


def test_expired_leases_are_swept_and_release_all_empties(monkeypatch) -> None:
    core, pool = make_core()
    a, b = list(range(4)), list(range(100, 108))
    cache_prefix(pool, a, 1)
    cache_prefix(pool, b, 5)
    plugin.dynbranch_lease(core, "short", a, 0.5)
    plugin.dynbranch_lease(core, "long", b, 60.0)
    now = plugin_leases.time.monotonic()
    monkeypatch.setattr(plugin_leases.time, "monotonic", lambda: now + 1.0)
    assert plugin_leases.dynbranch_sweep(core) == 1
    stats = plugin_leases.dynbranch_lease_stats(core)
    assert stats["leases"] == 1 and stats["expired"] == 1 and stats["blocks"] == 2
    assert plugin_leases.dynbranch_release_all(core) == 2
    assert all(blk.ref_cnt == 0 for blk in pool.blocks)


def test_release_never_underflows_a_block() -> None:
    core, pool = make_core()
    ids = list(range(4))
    [blk] = cache_prefix(pool, ids, 1)
    plugin.dynbranch_lease(core, "L", ids, 10.0)
    pool.blocks[blk].ref_cnt = 0  # corrupted by someone else: we must not go negative
    assert plugin_leases.dynbranch_release(core, "L") == 1
    assert pool.blocks[blk].ref_cnt == 0


# ---- the lease port: acquire, release, bind and handoff -------------------------------------


def test_acquire_is_all_or_nothing_under_the_digest() -> None:
    core, pool = make_core()
    ids = list(range(13))
    blocks = cache_prefix(pool, ids, 1)
    view = plugin.dynbranch_resident(core, ids)
    assert view["block_ids"] == blocks and view["free"] == blocks
    uncached = pool.blocks[9].block_id  # never held a prefix: no hash
    refused = [
        (blocks, "0" * 32),  # digest mismatch
        (blocks[:-1], view["digest"]),  # a part of the prefix: another digest
        ([*blocks[:-1], uncached], view["digest"]),  # an uncached block
        ([*blocks, blocks[0]], view["digest"]),  # a duplicate id
        ([0, *blocks[1:]], view["digest"]),  # the null block
        ([*blocks[:-1], 99], view["digest"]),  # out of the pool
        ([], plugin_leases.block_digest([])),
    ]
    for block_ids, digest in refused:
        assert not plugin_leases.dynbranch_acquire(core, "L", block_ids, digest)
    assert all(b.ref_cnt == 0 for b in pool.blocks)  # touched nothing
    assert plugin_leases.dynbranch_lease_refs(core) == {}
    assert plugin_leases.dynbranch_lease_stats(core)["granted"] == 0


def test_acquire_adds_one_reference_and_release_drops_it_once() -> None:
    core, pool = make_core()
    free0 = pool.get_num_free_blocks()
    blocks, digest = leased_prefix(core, pool)
    assert pool.refs(blocks) == [1, 1, 1] and pool.get_num_free_blocks() == free0 - 3
    assert not plugin_leases.dynbranch_acquire(core, "L", blocks, digest)  # a duplicate id
    assert pool.refs(blocks) == [1, 1, 1]
    assert plugin_leases.dynbranch_lease_refs(core) == {"L": 3}
    assert plugin_leases.dynbranch_release(core, "L") == 3
    assert plugin_leases.dynbranch_release(core, "L") == 0
    assert pool.refs(blocks) == [0, 0, 0] and pool.get_num_free_blocks() == free0
    assert pool.free_order[-3:] == list(reversed(blocks))


def test_bound_lease_hands_off_at_the_first_scheduled_step() -> None:
    core, pool = make_core()
    blocks, _ = leased_prefix(core, pool)
    plugin._state(core)  # the schedule hook
    assert plugin_leases.dynbranch_bind(core, "L", "cont")  # before submission
    engine_id = "cont-0a1b2c3d"  # AsyncLLM's rename of our id
    run_request(core, pool, engine_id, [*blocks, 10])
    core.scheduler.next_output = step({engine_id: 0})
    core.scheduler.schedule()  # a step without its tokens: no handoff yet
    assert plugin_leases.dynbranch_handoffs(core) == []
    core.scheduler.next_output = step({engine_id: 12})
    core.scheduler.schedule()
    [handoff] = plugin_leases.dynbranch_handoffs(core)
    assert (handoff["lease_id"], handoff["request_id"], handoff["owned"]) == ("L", "cont", True)
    assert handoff["at_bind"] is False  # at the first allocation
    assert pool.refs([*blocks, 10]) == [1, 1, 1, 1]  # exactly the lease's references went
    assert plugin_leases.dynbranch_lease_refs(core) == {}
    assert plugin_leases.dynbranch_release(core, "L") == 0
    core.scheduler.schedule()
    assert plugin_leases.dynbranch_handoffs(core) == []  # handed off once


def test_a_request_without_the_blocks_leaves_the_lease_held(caplog) -> None:
    core, pool = make_core()
    blocks, _ = leased_prefix(core, pool)
    plugin._state(core)
    plugin_leases.dynbranch_bind(core, "L", "other")
    run_request(core, pool, "other", [blocks[0], 10])  # a shorter prefix only
    core.scheduler.next_output = step({"other": 8})
    with plugin_log(caplog, logging.WARNING):
        core.scheduler.schedule()
    [handoff] = plugin_leases.dynbranch_handoffs(core)
    assert (handoff["lease_id"], handoff["request_id"], handoff["owned"]) == ("L", "other", False)
    assert "lacks leased blocks" in caplog.text
    assert plugin_leases.dynbranch_lease_refs(core) == {"L": 3}
    assert pool.refs(blocks) == [2, 1, 1]
    assert plugin_leases.dynbranch_release(core, "L") == 3
    assert pool.refs(blocks) == [1, 0, 0]


def test_binding_a_request_that_already_holds_the_blocks_hands_off_at_once() -> None:
    core, pool = make_core()
    blocks, _ = leased_prefix(core, pool)
    run_request(core, pool, "late-0a1b2c3d", blocks)
    assert plugin_leases.dynbranch_bind(core, "L", "late")
    [handoff] = plugin_leases.dynbranch_handoffs(core)
    assert handoff["owned"] and handoff["request_id"] == "late" and handoff["at_bind"]
    assert pool.refs(blocks) == [1, 1, 1]
    assert not plugin_leases.dynbranch_bind(core, "L", "late")  # no longer held


def test_pool_state_reports_free_blocks_queues_and_kappa() -> None:
    core, pool = make_core()
    leased_prefix(core, pool)
    assert plugin_leases.dynbranch_pool_state(core) == {
        "free_blocks": 12, "blocked_blocks": 0, "total_blocks": 15, "waiting": 2, "running": 1,
        "max_running": 8, "kappa_s": 0.05}


class Queue(list):
    """vLLM's waiting RequestQueue, as far as the plugin reads it."""

    def peek_request(self) -> object:
        return self[0]


def test_blocked_blocks_is_what_the_head_waiting_request_lacks() -> None:
    from types import SimpleNamespace as NS

    cached = [NS(block_id=i, ref_cnt=0) for i in range(2)]  # 2 resident blocks, unreferenced
    request = NS(block_hashes=[b"h0", b"h1"], num_tokens=100)
    coordinator = NS(find_longest_cache_hit=lambda hashes, max_len: ((cached,), 32))

    def core(free_running: bool, budget: int = 512) -> NS:
        sched = NS(waiting=Queue([request]), running=[] if free_running else [1, 2],
                   max_num_running_reqs=2, max_num_scheduled_tokens=budget)
        manager = NS(block_pool=NS(hash_block_size=16), coordinator=coordinator)
        return NS(scheduler=sched, _manager=manager)

    c = core(True)
    c.scheduler.kv_cache_manager = c._manager
    # 100 tokens, 32 resident: 68 to compute in blocks 2..6 (5 new) + 2 cached off the queue
    assert plugin_leases.blocked_blocks(c, free=3) == 4
    assert plugin_leases.blocked_blocks(c, free=10) == 0
    c.scheduler.max_num_scheduled_tokens = 16  # a 16-token chunk needs 1 new block + 2 cached
    assert plugin_leases.blocked_blocks(c, free=1) == 2
    full = core(False)
    full.scheduler.kv_cache_manager = full._manager
    assert plugin_leases.blocked_blocks(full, free=0) == 0  # no free slot: not memory-blocked
    assert plugin_leases.blocked_blocks(NS(), free=0) == 0  # unknown internals: 0, no raise


# ---- κ --------------------------------------------------------------------------------------


def test_kappa_ignores_steps_under_half_a_chunk(monkeypatch) -> None:
    core, _ = make_core()
    core.scheduler.requests["r"] = object()
    clock = iter([0.0, 0.1, 0.2, 0.3, 0.5])
    monkeypatch.setattr(plugin_leases.time, "perf_counter", lambda: next(clock))
    for tokens in (255, 255, 255):  # decode-sized steps: scaling them would inflate κ
        plugin_leases.measure_kappa(core, step({"r": tokens}))
    assert plugin_leases.book(core).kappa_samples == 0
    assert plugin_leases.dynbranch_pool_state(core)["kappa_s"] == 0.05
    plugin_leases.measure_kappa(core, step({"r": 1024}))  # at 0.3
    plugin_leases.measure_kappa(core, step({"r": 1}))  # at 0.5: the 1,024 tokens took 0.2 s
    assert plugin_leases.book(core).kappa_samples == 1
    assert plugin_leases.dynbranch_pool_state(core)["kappa_s"] == pytest.approx(0.1)


def test_kappa_skips_a_gap_with_an_empty_step_between(monkeypatch) -> None:
    core, _ = make_core()
    core.scheduler.requests["r"] = object()
    clock = iter([0.0, 5.0, 5.1])
    monkeypatch.setattr(plugin_leases.time, "perf_counter", lambda: next(clock))
    for out in (step({"r": 512}), step(), step({"r": 512})):  # the engine idled between
        plugin_leases.measure_kappa(core, out)
    assert plugin_leases.book(core).kappa_samples == 0


# ---- the schedule hook and registration -----------------------------------------------------


def test_allocation_signal_resolves_once_scheduled(caplog) -> None:
    with plugin_log(caplog, logging.ERROR):
        allocation_signals()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # no part failed


def allocation_signals() -> None:
    core, _ = make_core()
    core.scheduler.requests["r-1"] = object()
    fut = plugin.dynbranch_wait_allocated(core, "r-1")
    assert isinstance(fut, Future) and not fut.done()
    new = SimpleNamespace(req_id="r-1", num_computed_tokens=128)
    plugin._on_scheduled(core, step({"r-1": 1}, [new]))
    assert fut.result()["cached_tokens"] == 128
    # scheduled before anyone asked: answered at once from the record
    plugin._on_scheduled(core, step({"r-2": 1}, [SimpleNamespace(req_id="r-2",
                                                                  num_computed_tokens=0)]))
    assert plugin.dynbranch_wait_allocated(core, "r-2")["cached_tokens"] == 0
    # unknown (finished before it was scheduled) → None; forgetting resolves a waiter
    assert plugin.dynbranch_wait_allocated(core, "gone") is None
    core.scheduler.requests["r-3"] = object()
    fut3 = plugin.dynbranch_wait_allocated(core, "r-3")
    assert plugin.dynbranch_forget(core, "r-3") and fut3.result() is None


@pytest.mark.parametrize("broken", [
    SimpleNamespace(scheduled_new_reqs=None),  # iterating None raises in every part
    None,
    SimpleNamespace(scheduled_new_reqs=[], num_scheduled_tokens={"r": "many"},
                    total_num_scheduled_tokens="many"),
])
def test_schedule_hook_never_raises_on_a_malformed_output(broken, caplog) -> None:
    core, pool = make_core()
    leased_prefix(core, pool)
    plugin_leases.dynbranch_bind(core, "L", "r")
    core.scheduler.next_output = broken
    plugin._state(core)  # installs the guarded hook over the scheduler's schedule
    with plugin_log(caplog, logging.ERROR):
        assert core.scheduler.schedule() is broken  # the engine step goes on
    assert "dynbranch schedule hook" in caplog.text
    assert plugin_leases.dynbranch_lease_refs(core) == {"L": 3}  # nothing half-released


def test_every_utility_installs_the_hook_and_keeps_its_signature() -> None:
    core, pool = make_core()
    original = core.scheduler.schedule
    assert plugin.UTILITIES["dynbranch_handoffs"](core) == []
    assert core.scheduler.schedule is not original
    for name, fn in plugin.UTILITIES.items():
        # the engine core checks the argument count against the signature
        assert inspect.signature(fn) == inspect.signature(inspect.unwrap(fn)), name
    assert set(plugin.UTILITIES) >= {fn.__name__ for fn in plugin_leases.LEASE_UTILITIES}
    assert {"dynbranch_resident", "dynbranch_lookup", "dynbranch_wait_allocated"} <= set(
        plugin.UTILITIES)


def test_register_adds_utilities(monkeypatch) -> None:
    class FakeEngineCore:
        def shutdown(self):
            return "down"

    fake_module = SimpleNamespace(EngineCore=FakeEngineCore)
    import sys
    monkeypatch.setitem(sys.modules, "vllm.v1.engine.core", fake_module)
    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace())
    monkeypatch.setitem(sys.modules, "vllm.v1", SimpleNamespace())
    monkeypatch.setitem(sys.modules, "vllm.v1.engine", SimpleNamespace(core=fake_module))
    plugin.register_engine_core()
    plugin.register_engine_core()  # loaded in several processes, maybe twice: idempotent
    assert all(hasattr(FakeEngineCore, name) for name in plugin.UTILITIES)
    assert FakeEngineCore().shutdown() == "down"


def test_shutdown_releases_every_lease(monkeypatch) -> None:
    class FakeEngineCore:
        def shutdown(self):
            return "down"

    plugin._wrap_shutdown(FakeEngineCore)
    core, pool = make_core()
    blocks, _ = leased_prefix(core, pool)
    assert FakeEngineCore.shutdown(core) == "down"
    assert pool.refs(blocks) == [0, 0, 0]



# ---- the client's request id, whatever vLLM renamed it to -----------------------------------


def test_request_names_cover_asyncllm_and_the_openai_server_forms() -> None:
    from dynbranch_vllm_plugin.request_ids import is_request_of, names, stems

    assert names("wf/1") == ("wf/1", "cmpl-wf/1-0", "chatcmpl-wf/1")
    for engine_id in ("wf/1", "wf/1-0a1b2c3d", "cmpl-wf/1-0-0a1b2c3d", "chatcmpl-wf/1-ffffffff",
                      "cmpl-wf/1-0"):  # no suffix under VLLM_DISABLE_REQUEST_ID_RANDOMIZATION
        assert is_request_of(engine_id, "wf/1"), engine_id
    for engine_id in ("wf/12-0a1b2c3d", "cmpl-wf/1-1-0a1b2c3d", "chatcmpl-wf/1_1-0a1b2c3d",
                      "wf/1-0A1B2C3D", "cmpl-wf/1-0-0a1b2c3", "xcmpl-wf/1-0-0a1b2c3d"):
        assert not is_request_of(engine_id, "wf/1"), engine_id
    # ids that share a stem stay apart: client x's completion is not client x-0's
    assert is_request_of("cmpl-x-0-0a1b2c3d", "x") and not is_request_of("cmpl-x-0-0a1b2c3d", "x-0")
    assert is_request_of("cmpl-x-0-0-0a1b2c3d", "x-0")
    assert not is_request_of("cmpl-x-0-0-0a1b2c3d", "x")
    assert stems("abc") == ("abc",) and stems("a-0a1b2c3d") == ("a-0a1b2c3d", "a")


@pytest.mark.parametrize("engine_id", ["cont-0a1b2c3d", "cmpl-cont-0-0a1b2c3d",
                                       "chatcmpl-cont-0a1b2c3d"])
def test_a_lease_bound_to_our_id_hands_off_to_the_servers_renamed_request(engine_id) -> None:
    core, pool = make_core()
    blocks, _ = leased_prefix(core, pool)
    plugin._state(core)
    assert plugin_leases.dynbranch_bind(core, "L", "cont")
    run_request(core, pool, "cmpl-other-0-0a1b2c3d", [10])  # someone else's request
    run_request(core, pool, engine_id, [*blocks, 11])
    core.scheduler.next_output = step({"cmpl-other-0-0a1b2c3d": 4, engine_id: 12})
    core.scheduler.schedule()
    [handoff] = plugin_leases.dynbranch_handoffs(core)
    assert (handoff["lease_id"], handoff["request_id"], handoff["owned"]) == ("L", "cont", True)
    assert plugin_leases.dynbranch_lease_refs(core) == {}
    assert plugin_leases.book(core).bound == {}  # every name of the request unbound


def test_two_clients_whose_ids_share_a_stem_get_their_own_leases() -> None:
    core, pool = make_core(24)
    blocks_x, _ = leased_prefix(core, pool, "Lx")
    ids_y = list(range(200, 213))
    cache_prefix(pool, ids_y, 10)
    view = plugin.dynbranch_resident(core, ids_y)
    assert plugin_leases.dynbranch_acquire(core, "Ly", view["block_ids"], view["digest"])
    plugin._state(core)
    plugin_leases.dynbranch_bind(core, "Lx", "x")
    plugin_leases.dynbranch_bind(core, "Ly", "x-0")
    run_request(core, pool, "cmpl-x-0-0-0a1b2c3d", view["block_ids"])  # client x-0's request
    core.scheduler.next_output = step({"cmpl-x-0-0-0a1b2c3d": 12})
    core.scheduler.schedule()
    [handoff] = plugin_leases.dynbranch_handoffs(core)
    assert (handoff["lease_id"], handoff["request_id"]) == ("Ly", "x-0")
    assert plugin_leases.dynbranch_lease_refs(core) == {"Lx": len(blocks_x)}


def test_rebinding_a_request_drops_the_earlier_lease_binding() -> None:
    core, pool = make_core(24)
    leased_prefix(core, pool, "L1")
    ids = list(range(300, 313))
    cache_prefix(pool, ids, 10)
    view = plugin.dynbranch_resident(core, ids)
    assert plugin_leases.dynbranch_acquire(core, "L2", view["block_ids"], view["digest"])
    plugin_leases.dynbranch_bind(core, "L1", "r")
    plugin_leases.dynbranch_bind(core, "L2", "r")  # one lease per request: the latest wins
    assert set(plugin_leases.book(core).bound.values()) == {"L2"}
    assert plugin_leases.book(core).leases["L1"].bound is None


def test_a_remote_client_waits_for_a_request_the_engine_has_not_seen_yet() -> None:
    core, _ = make_core()
    # Without wait_unknown an unknown request is answered at once (it finished or never came)
    assert plugin.dynbranch_wait_allocated(core, "wf/1") is None
    fut = plugin.dynbranch_wait_allocated(core, "wf/1", True)  # the HTTP request is on its way
    assert isinstance(fut, Future) and not fut.done()
    other = SimpleNamespace(req_id="cmpl-wf/10-0-0a1b2c3d", num_computed_tokens=0)
    plugin._on_scheduled(core, step({other.req_id: 8}, [other]))
    assert not fut.done()  # another client's request
    new = SimpleNamespace(req_id="cmpl-wf/1-0-0a1b2c3d", num_computed_tokens=256)
    plugin._on_scheduled(core, step({new.req_id: 8}, [new]))
    assert fut.result() == {"cached_tokens": 256, "t": fut.result()["t"],
                            "request_id": "cmpl-wf/1-0-0a1b2c3d"}
    assert plugin._state(core).waiters == {}
    # allocated before the client asked: answered from the record, by the client's own id, once
    late = SimpleNamespace(req_id="chatcmpl-wf/2-0a1b2c3d", num_computed_tokens=0)
    plugin._on_scheduled(core, step({late.req_id: 8}, [late]))
    assert plugin.dynbranch_wait_allocated(core, "wf/2", True)["request_id"] == late.req_id
    assert isinstance(plugin.dynbranch_wait_allocated(core, "wf/2", True), Future)
    assert plugin.dynbranch_forget(core, "wf/2")


def test_a_second_wait_replaces_the_first_and_old_waits_expire(monkeypatch) -> None:
    core, _ = make_core()
    first = plugin.dynbranch_wait_allocated(core, "r", True)
    second = plugin.dynbranch_wait_allocated(core, "r", True)
    assert first.result() is None and not second.done()
    assert not plugin.dynbranch_forget(core, "nobody")
    now = plugin.time.monotonic()
    monkeypatch.setattr(plugin.time, "monotonic", lambda: now + plugin._MAX_WAIT_S + 5)
    plugin._on_scheduled(core, step())
    assert second.result() is None and plugin._state(core).waiters == {}


# ---- moving a live request between priorities (an adopted fill) ------------------------------

SET_PRIORITY = plugin.UTILITIES["dynbranch_set_priority"]


def test_a_waiting_request_is_requeued_in_priority_then_arrival_order() -> None:
    core, _ = make_core()
    priority_scheduling(core)
    for i, rid in enumerate(("a", "b", "c")):
        add_req(core, f"cmpl-{rid}-0-0a1b2c3d", 1, arrival=float(i))  # fills, as the server names
    add_req(core, "x-0a1b2c3d", 0, arrival=9.0)  # canonical, arrived last
    waiting = core.scheduler.waiting
    assert waiting.order()[0] == "x-0a1b2c3d"
    assert SET_PRIORITY(core, "c", 0) is True  # by the client's id
    # c now goes first: canonical, and it arrived before x
    assert waiting.order() == ["cmpl-c-0-0a1b2c3d", "x-0a1b2c3d", "cmpl-a-0-0a1b2c3d",
                               "cmpl-b-0-0a1b2c3d"]
    assert SET_PRIORITY(core, "c", 1) is True  # lowered back: behind a, which arrived first
    assert waiting.order()[-1] == "cmpl-c-0-0a1b2c3d" and len(waiting) == 4
    assert len(core.scheduler.kv_holding_waiting) == 0


def test_a_kv_holding_request_stays_in_its_queue_and_a_running_one_changes_in_place() -> None:
    core, _ = make_core()
    priority_scheduling(core)
    held = add_req(core, "h", 1, 0.0, where="kv_holding_waiting")
    add_req(core, "k", 0, 1.0, where="kv_holding_waiting")
    old = add_req(core, "old", 1, 0.0, where="running")
    young = add_req(core, "young", 1, 5.0, where="running")
    assert SET_PRIORITY(core, "h", 0) and core.scheduler.kv_holding_waiting.order() == ["h", "k"]
    assert held.priority == 0 and len(core.scheduler.waiting) == 0
    victim = max(core.scheduler.running, key=lambda r: (r.priority, r.arrival_time))  # vLLM's
    assert victim is young
    assert SET_PRIORITY(core, "young", 0) and young.priority == 0
    assert core.scheduler.running == [old, young]  # not moved, only changed
    assert max(core.scheduler.running, key=lambda r: (r.priority, r.arrival_time)) is old


def test_set_priority_refuses_unknown_finished_and_fcfs_requests() -> None:
    core, _ = make_core()
    priority_scheduling(core)
    done = add_req(core, "done", 1, 0.0)
    done.finished = True
    assert SET_PRIORITY(core, "nobody", 0) is False
    assert SET_PRIORITY(core, "done", 0) is False and done.priority == 1
    fcfs, _ = make_core()
    priority_scheduling(fcfs, Policy.FCFS)
    request = add_req(fcfs, "r", 0, 0.0)
    assert SET_PRIORITY(fcfs, "r", 5) is False and request.priority == 0
    fcfs.scheduler.policy = "fcfs"  # a plain string is told apart as well
    assert SET_PRIORITY(fcfs, "r", 5) is False
    fcfs.scheduler.policy = "PRIORITY"
    assert SET_PRIORITY(fcfs, "r", 5) is True and request.priority == 5


def test_set_priority_never_raises_into_the_engine_core(monkeypatch, caplog) -> None:
    core, _ = make_core()
    priority_scheduling(core)
    request = add_req(core, "r", 1, 0.0)

    def broken(_request) -> None:
        raise RuntimeError("heap corrupted")

    monkeypatch.setattr(core.scheduler.waiting, "remove_request", broken)
    with plugin_log(caplog, logging.ERROR):
        assert SET_PRIORITY(core, "r", 0) is False
        assert SET_PRIORITY(core, "r", "high") is False  # not an int: refused, not raised
    assert "dynbranch_set_priority('r', 0) failed" in caplog.text
    assert request.priority == 1 and core.scheduler.waiting.order() == ["r"]  # untouched
    core.scheduler = SimpleNamespace()  # internals it does not know
    assert SET_PRIORITY(core, "r", 0) is False
