"""The sim's scheduler (``sim.scheduler``, vLLM v1's): canonical work is admitted before fills,
the running set and the token budget bound a step, and a canonical request that does not fit
preempts the newest running fill (recompute preemption: it requeues at the front)."""

from __future__ import annotations

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
