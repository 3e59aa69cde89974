"""The sim's scheduler (``sim.scheduler``, vLLM v1's): canonical work is admitted before fills,
the running set and the token budget bound a step, and a canonical request that does not fit
preempts the newest running fill (recompute preemption: it requeues at the front)."""

from __future__ import annotations

import dataclasses

import pytest

from services.common.values.generation import Priority
from services.engine_agent.sim.block_pool import BlockPool, hash_full_blocks
from services.engine_agent.sim.kv_cache import KVCacheManager
from services.engine_agent.sim.scheduler import Scheduler
from services.engine_agent.sim.sequence import SeqState, Sequence
from services.engine_agent.sim.tokenizer import PseudoText
from tests.engine_agent.sim_factories import make_request


def seq(rid: str, n: int, priority: Priority = Priority.CANONICAL, start: int = 0) -> Sequence:
    ids = list(range(start, start + n))
    return Sequence(make_request(rid, priority=priority), tuple(ids), hash_full_blocks(ids, 4),
                    PseudoText(1, None), 0.0)


def scheduler(blocks: int = 16, max_running: int = 4, budget: int = 64) -> Scheduler:
    return Scheduler(KVCacheManager(BlockPool(blocks, 4)), max_running=max_running,
                     max_batched_tokens=budget)


def test_canonical_work_is_admitted_before_fills_within_the_budget() -> None:
    s = scheduler(budget=20)
    fill, canonical = seq("f", 8, Priority.FILL, 100), seq("c", 16)
    assert s.add(fill) == 0 and s.add(canonical) == 0  # a fill waits behind canonical work
    plan = s.schedule()
    assert list(plan.scheduled.items()) == [(canonical, 16), (fill, 4)]  # 20 tokens in all
    assert canonical.state is SeqState.RUNNING and plan.budget == 0


def test_the_running_set_is_bounded() -> None:
    s = scheduler(max_running=1)
    a, b = seq("a", 4), seq("b", 4, start=50)
    s.add(a)
    s.add(b)
    plan = s.schedule()
    assert list(plan.scheduled) == [a] and s.num_waiting == 1


def test_a_canonical_request_preempts_the_newest_fill_when_blocks_run_out() -> None:
    s = scheduler(blocks=4, budget=64)
    fill = seq("f", 12, Priority.FILL, 100)  # 3 of the 4 blocks
    s.add(fill)
    s.schedule()
    canonical = seq("c", 8)  # needs 2 blocks: only 1 is free
    s.add(canonical)
    plan = s.schedule()
    assert fill in plan.preempted and fill.state is SeqState.WAITING and fill.preemptions == 1
    assert next(iter(s.waiting[Priority.FILL])) == "f"  # requeued at the front
    assert s.num_preemptions == 1
    assert plan.scheduled == {canonical: 8}  # admitted in the blocks the fill gave back


def program_seq(rid: str, program: str, n: int = 4, start: int = 0) -> Sequence:
    ids = list(range(start, start + n))
    request = dataclasses.replace(make_request(rid), program=program)
    return Sequence(request, tuple(ids), hash_full_blocks(ids, 4), PseudoText(1, None), 0.0)


def test_program_fcfs_admits_by_the_program_s_first_arrival_pinned_programs_first() -> None:
    pinned = {"c2"}
    s = Scheduler(KVCacheManager(BlockPool(64, 4)), max_running=1, max_batched_tokens=64,
                  queue_policy="program", pinned=lambda q: q.request_id in pinned)
    first = [program_seq(f"{p}0", p, start=10 * i) for i, p in enumerate("abc")]
    for q in first:
        s.add(q)
    order = []
    for _ in range(3):
        plan = s.schedule()
        (running,) = plan.scheduled
        order.append(running.request_id)
        s.remove(running)
    assert order == ["a0", "b0", "c0"]
    # Later turns of the same programs arrive in reverse order: program c's earlier turn came
    # first... but c2's prefix is pinned, so it goes first; then a before b by first arrival.
    for q in (program_seq("c2", "c", start=100), program_seq("b1", "b", start=200),
              program_seq("a1", "a", start=300)):
        s.add(q)
    order = []
    for _ in range(3):
        (running,) = s.schedule().scheduled
        order.append(running.request_id)
        s.remove(running)
    assert order == ["c2", "a1", "b1"]


def test_fcfs_keeps_arrival_order_and_an_unknown_queue_policy_is_refused() -> None:
    s = scheduler(max_running=1)
    for q in (program_seq("b1", "b"), program_seq("a1", "a", start=50)):
        s.add(q)
    assert [q.request_id for q in s.schedule().scheduled] == ["b1"]
    with pytest.raises(ValueError, match="queue_policy"):
        Scheduler(KVCacheManager(BlockPool(4, 4)), max_running=1, max_batched_tokens=4,
                  queue_policy="lifo")  # type: ignore[arg-type]


def test_a_raised_waiting_fill_joins_canonical_work_in_arrival_order() -> None:
    """Adoption (``Scheduler.reprioritize``): a fill raised to canonical priority goes behind
    canonical work that arrived before it and ahead of what arrived after, as vLLM's
    (priority, arrival) queue orders it; lowered again, it waits behind canonical work."""
    s = scheduler(max_running=1)
    early, fill, late = seq("early", 4), seq("fill", 4, Priority.FILL, 100), seq("late", 4, 0, 50)
    early.submit_s, fill.submit_s, late.submit_s = 1.0, 2.0, 3.0
    late.priority = Priority.CANONICAL
    for each in (early, fill, late):
        s.add(each)
    s.reprioritize(fill, Priority.CANONICAL)
    assert list(s.waiting[Priority.CANONICAL]) == ["early", "fill", "late"]
    assert not s.waiting[Priority.FILL] and fill.priority is Priority.CANONICAL
    s.reprioritize(fill, Priority.FILL)
    assert list(s.waiting[Priority.CANONICAL]) == ["early", "late"]
    assert list(s.waiting[Priority.FILL]) == ["fill"]


def test_a_raised_running_fill_is_no_longer_the_preemption_victim() -> None:
    s = scheduler(blocks=4, budget=64)
    fill = seq("f", 12, Priority.FILL, 100)  # 3 of the 4 blocks
    s.add(fill)
    s.schedule()
    s.reprioritize(fill, Priority.CANONICAL)
    canonical = seq("c", 8)  # needs 2 blocks: only 1 is free, and no fill runs now
    s.add(canonical)
    plan = s.schedule()
    assert fill.state is SeqState.RUNNING and fill.preemptions == 0
    assert canonical not in plan.scheduled and s.num_preemptions == 0
