"""A fake vLLM engine core for the plugin's tests (no vLLM needed): the scheduler, KV-cache
manager, coordinator and block pool attributes ``dynbranch_vllm_plugin`` reads.

The fake block pool keeps vLLM's reference-count semantics (``touch`` adds one and takes a free
block off the eviction queue, ``free_blocks`` drops one and queues it in the order given); block
hashes are the token ids of the prefix up to the block (``plain_hashes``).
"""

from __future__ import annotations

import contextlib
import heapq
import logging
from collections.abc import Iterator
from enum import Enum
from types import SimpleNamespace

import pytest
from dynbranch_vllm_plugin import engine_core as plugin
from dynbranch_vllm_plugin import leases as plugin_leases

BS = 4


class Block:
    def __init__(self, block_id: int) -> None:
        self.block_id, self.ref_cnt, self.block_hash = block_id, 0, None
        self.is_null = block_id == 0


class Pool:
    def __init__(self, n: int) -> None:
        self.hash_block_size, self.num_gpu_blocks = BS, n
        self.blocks = [Block(i) for i in range(n)]
        self.free_order: list[int] = [b.block_id for b in self.blocks[1:]]
        self.cached: dict[tuple, Block] = {}

    def touch(self, blocks) -> None:
        for b in blocks:
            if b.ref_cnt == 0:
                self.free_order.remove(b.block_id)
            b.ref_cnt += 1

    def free_blocks(self, blocks) -> None:
        for b in blocks:
            b.ref_cnt -= 1
            assert b.ref_cnt >= 0
            if b.ref_cnt == 0:
                self.free_order.append(b.block_id)

    def get_num_free_blocks(self) -> int:
        return len(self.free_order)

    def refs(self, ids: list[int]) -> list[int]:
        return [self.blocks[i].ref_cnt for i in ids]


class Coordinator:
    """Cache hits over ``Pool.cached``; the blocks each running request holds (group 0)."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.held: dict[str, list[Block]] = {}

    def find_longest_cache_hit(self, hashes, max_len):
        hit = []
        for h in hashes:
            if (len(hit) + 1) * BS > max_len or h not in self.pool.cached:
                break
            hit.append(self.pool.cached[h])
        return (hit,), len(hit) * BS, 0

    def get_blocks(self, request_id: str) -> tuple[list[Block], ...]:
        return (list(self.held.get(request_id, [])),)


def step(tokens: dict[str, int] | None = None, new: list | None = None) -> SimpleNamespace:
    """A ``SchedulerOutput`` with just the fields the hook reads."""
    tokens = tokens or {}
    return SimpleNamespace(scheduled_new_reqs=new or [], num_scheduled_tokens=tokens,
                           total_num_scheduled_tokens=sum(tokens.values()))


class Scheduler:
    """The scheduler's attributes the plugin reads; ``schedule()`` returns ``next_output``."""

    def __init__(self, manager: SimpleNamespace) -> None:
        self.kv_cache_manager, self.requests, self.max_num_running_reqs = manager, {}, 8
        self.next_output = step()

    def get_request_counts(self) -> tuple[int, int]:
        return 1, 2

    def schedule(self):
        return self.next_output


def make_core(n: int = 16):
    pool = Pool(n)
    manager = SimpleNamespace(block_pool=pool, enable_caching=True, coordinator=Coordinator(pool))
    scheduler = Scheduler(manager)
    cfg = SimpleNamespace(cache_config=SimpleNamespace(prefix_caching_hash_algo="sha256"),
                          scheduler_config=SimpleNamespace(max_num_seqs=8,
                                                           max_num_batched_tokens=64),
                          model_config=SimpleNamespace(max_model_len=64))
    return SimpleNamespace(scheduler=scheduler, vllm_config=cfg), pool


def run_request(core, pool: Pool, engine_id: str, block_ids: list[int]) -> None:
    """A request in the engine holding ``block_ids`` (its own references)."""
    blocks = [pool.blocks[i] for i in block_ids]
    pool.touch(blocks)
    core.scheduler.requests[engine_id] = object()
    core.scheduler.kv_cache_manager.coordinator.held[engine_id] = blocks


class Policy(Enum):
    """vLLM's ``SchedulingPolicy`` (its values: the plugin compares by value)."""

    FCFS = "fcfs"
    PRIORITY = "priority"


class Req:
    """A ``vllm.v1.request.Request`` as priority scheduling reads it: ordered by (priority,
    arrival time, id) like vLLM's ``Request.__lt__``."""

    def __init__(self, request_id: str, priority: int, arrival_time: float) -> None:
        self.request_id, self.priority, self.arrival_time = request_id, priority, arrival_time
        self.finished = False

    def is_finished(self) -> bool:
        return self.finished

    def __lt__(self, other: Req) -> bool:
        return ((self.priority, self.arrival_time, self.request_id)
                < (other.priority, other.arrival_time, other.request_id))


class PriorityQueue:
    """vLLM's ``PriorityRequestQueue``: a heap; ``remove_request`` raises ValueError when the
    request is not in it; iteration pops a copy, in scheduling order."""

    def __init__(self) -> None:
        self._heap: list[Req] = []

    def add_request(self, request: Req) -> None:
        heapq.heappush(self._heap, request)

    def remove_request(self, request: Req) -> None:
        self._heap.remove(request)
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Req]:
        heap = self._heap[:]
        while heap:
            yield heapq.heappop(heap)

    def order(self) -> list[str]:
        """Request ids in the order the scheduler would take them."""
        return [r.request_id for r in self]


def priority_scheduling(core, policy: Policy = Policy.PRIORITY) -> None:
    """Give the fake scheduler vLLM's two waiting queues, its running list and ``policy``."""
    sched = core.scheduler
    sched.policy, sched.running = policy, []
    sched.waiting, sched.kv_holding_waiting = PriorityQueue(), PriorityQueue()


def add_req(core, engine_id: str, priority: int, arrival: float,
            where: str = "waiting") -> Req:
    """A request known to the scheduler, in ``where`` (a waiting queue, or ``running``)."""
    request = Req(engine_id, priority, arrival)
    core.scheduler.requests[engine_id] = request
    if where == "running":
        core.scheduler.running.append(request)
    else:
        getattr(core.scheduler, where).add_request(request)
    return request


#: The plugin's loggers' parent (under ``vllm``, whose logger vLLM configures not to propagate).
PLUGIN_LOGGER = "vllm.dynbranch_vllm_plugin"


@contextlib.contextmanager
def plugin_log(caplog: pytest.LogCaptureFixture, level: int) -> Iterator[None]:
    """``caplog`` sees the plugin's records at ``level`` and above, also where vLLM's logging was
    configured earlier in the session (records may then be captured twice)."""
    logger = logging.getLogger(PLUGIN_LOGGER)
    logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(level, logger=PLUGIN_LOGGER):
            yield
    finally:
        logger.removeHandler(caplog.handler)


def plain_hashes(core, ids: list[int]) -> list[tuple]:
    """Block hashes the fakes use (monkeypatched over ``engine_core._block_hashes``)."""
    return [tuple(ids[:i + BS]) for i in range(0, len(ids) - BS + 1, BS)]


def cache_prefix(pool: Pool, ids: list[int], first_block: int) -> list[int]:
    """Mark the full blocks of ``ids`` as cached and free (a finished request's prefix)."""
    used = []
    for i in range(0, len(ids) - BS + 1, BS):
        block = pool.blocks[first_block + len(used)]
        block.block_hash = tuple(ids[:i + BS])
        pool.cached[block.block_hash] = block
        used.append(block.block_id)
    return used


def leased_prefix(core, pool: Pool, lease_id: str = "L") -> tuple[list[int], str]:
    """A cached three-block prefix, acquired under ``lease_id``; its ids and digest."""
    ids = list(range(13))
    cache_prefix(pool, ids, 1)
    view = plugin.dynbranch_resident(core, ids)
    assert plugin_leases.dynbranch_acquire(core, lease_id, view["block_ids"], view["digest"])
    return view["block_ids"], view["digest"]
