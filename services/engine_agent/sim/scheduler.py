"""Continuous-batching scheduler of the simulated engine (after vLLM v1's ``Scheduler``).

Each step gets a token budget. Running sequences go first, decodes before prefill chunks, in
admission order; then waiting sequences are admitted in queue order, canonical before fill, with
a prefix-cache hit and a prefill chunk of at most the remaining budget; the first that cannot be
admitted ends admission for the step (head-of-line, like vLLM's FCFS). A running sequence that
cannot get a block preempts the newest running fill (else the newest sequence), which returns
to the front of its queue and later recomputes with prefix hits. A canonical request that
cannot be admitted likewise preempts running fills, so fills never starve canonical work.

Queue order (``queue_policy``): ``fcfs`` is arrival order (vLLM's default). ``program`` is
Continuum's (Li et al. 2026, arXiv:2511.02230; ``ContinuumRequestQueue.peek_request`` in
``vllm/v1/core/sched/request_queue.py`` of Hanchenli/vllm-continuum): waiting requests whose
program holds a pinned prefix first, then program-level FCFS, by the arrival of the program's
first request.

With a CPU tier (``offload.HostTier``) a waiting request whose prefix continues into the tier
gets blocks for those tokens and waits, skipped, while they load; then it is admitted with them
computed (vLLM's ``WAITING_FOR_REMOTE_KVS``).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal, get_args

from services.common.values.generation import Priority
from services.engine_agent.sim.block_pool import KVBlock
from services.engine_agent.sim.cost_model import StepWork
from services.engine_agent.sim.kv_cache import KVCacheManager
from services.engine_agent.sim.offload import HostTier
from services.engine_agent.sim.sequence import SeqState, Sequence

QueuePolicy = Literal["fcfs", "program"]
#: The queue policies, in one place (derived from ``QueuePolicy``).
QUEUE_POLICIES: tuple[str, ...] = get_args(QueuePolicy)
#: Programs whose first arrival is remembered (the oldest are forgotten beyond this).
MAX_PROGRAMS = 65_536
#: A load this close to done counts as done: a timer due sooner than the event loop's clock
#: resolution fires without time passing, so waiting for the last fraction would spin.
LOAD_SLACK_S = 2e-3


@dataclass(slots=True)
class StepPlan:
    """What one step computes: new tokens per sequence (dicts keep scheduling order)."""

    budget: int
    scheduled: dict[Sequence, int] = field(default_factory=dict)
    starts: dict[Sequence, int] = field(default_factory=dict)
    newly_allocated: list[Sequence] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)

    def take(self, seq: Sequence, n: int) -> None:
        """Schedule ``n`` tokens of ``seq``."""
        self.scheduled[seq] = n
        self.starts[seq] = seq.num_computed
        self.budget -= n

    def drop(self, seq: Sequence) -> None:
        """Unschedule ``seq`` (it was preempted) and refund its tokens."""
        n = self.scheduled.pop(seq, 0)
        self.starts.pop(seq, None)
        self.budget += n

    def work(self) -> StepWork:
        """The step's totals for the cost model."""
        work = StepWork()
        for seq, n in self.scheduled.items():
            start = self.starts[seq]
            work.add(start, n, start + n == len(seq.token_ids))
        return work


class Scheduler:
    """Waiting queues, the running set, and the per-step scheduling decision."""

    def __init__(self, kv: KVCacheManager, *, max_running: int, max_batched_tokens: int,
                 preempt_fills: bool = True, queue_policy: QueuePolicy = "fcfs",
                 pinned: Callable[[Sequence], bool] | None = None,
                 tier: HostTier | None = None, clock: Callable[[], float] | None = None,
                 time_scale: float = 0.0) -> None:
        if queue_policy not in QUEUE_POLICIES:
            raise ValueError(f"queue_policy must be one of {', '.join(QUEUE_POLICIES)}, "
                             f"got {queue_policy!r}")
        if tier is not None and clock is None:
            raise ValueError("a CPU tier needs the engine's clock to time its loads")
        self.kv = kv
        self.max_running = max_running
        self.max_batched_tokens = max_batched_tokens
        self.preempt_fills = preempt_fills
        self.queue_policy = queue_policy
        self._pinned = pinned or (lambda seq: False)
        self.tier, self._clock, self._time_scale = tier, clock, time_scale
        self.waiting: dict[Priority, OrderedDict[str, Sequence]] = {
            Priority.CANONICAL: OrderedDict(), Priority.FILL: OrderedDict()}
        self.running: dict[str, Sequence] = {}
        self.num_preemptions = 0
        self.blocked_blocks = 0  # free blocks the last failed admission lacked (0: none)
        self._arrivals = itertools.count()
        self._programs: OrderedDict[str, int] = OrderedDict()  # program -> first arrival

    @property
    def num_waiting(self) -> int:
        """Sequences in the waiting queues."""
        return sum(map(len, self.waiting.values()))

    def has_work(self) -> bool:
        """Whether any sequence is waiting or running."""
        return bool(self.running) or self.num_waiting > 0

    def add(self, seq: Sequence) -> int:
        """Queue a new sequence; returns how many waiting sequences are ahead of it."""
        ahead = len(self.waiting[Priority.CANONICAL])
        if seq.priority is Priority.FILL:
            ahead += len(self.waiting[Priority.FILL])
        self.waiting[seq.priority][seq.request_id] = seq
        if seq.program not in self._programs:
            self._programs[seq.program] = next(self._arrivals)
            while len(self._programs) > MAX_PROGRAMS:
                self._programs.popitem(last=False)
        return ahead

    def reprioritize(self, seq: Sequence, priority: Priority) -> None:
        """Move ``seq`` to another priority class (a fill adopted by a canonical demand, or one
        its adopter gave up on). Waiting, it joins that class's queue in arrival order, as
        vLLM's priority queue orders by (priority, arrival); running, it keeps its slot and
        stops (or starts) being a preemption victim of its old class."""
        if seq.priority is priority:
            return
        queue = self.waiting[seq.priority]
        waiting = queue.pop(seq.request_id, None)
        seq.priority = priority
        if waiting is None:
            return
        target = self.waiting[priority]
        target[seq.request_id] = seq
        for later in [s for s in target.values() if s.submit_s > seq.submit_s]:
            target.move_to_end(later.request_id)

    def next_load_at(self) -> float | None:
        """When the earliest KV load from the CPU tier completes (None: no load under way)."""
        done = [seq.load_done_at for queue in self.waiting.values() for seq in queue.values()
                if seq.load_done_at is not None]
        return min(done) if done else None

    def remove(self, seq: Sequence) -> None:
        """Take a finished or aborted sequence out and free its blocks now."""
        if self.running.pop(seq.request_id, None) is None:
            self.waiting[seq.priority].pop(seq.request_id, None)
        self.kv.free(seq)
        seq.state = SeqState.FINISHED

    def schedule(self) -> StepPlan:
        """Decide the next step."""
        plan = StepPlan(budget=self.max_batched_tokens)
        self.blocked_blocks = 0
        for decode in (True, False):
            for seq in list(self.running.values()):
                if (seq.num_pending == 1) == decode and seq.request_id in self.running:
                    self._schedule_running(seq, plan)
        if not plan.preempted:  # like vLLM: no admissions in a step that had to preempt
            self._schedule_waiting(plan)
        return plan

    def _schedule_running(self, seq: Sequence, plan: StepPlan) -> None:
        n = min(seq.num_pending, plan.budget)
        if n <= 0:
            return
        while not self.kv.allocate(seq, n):
            victim = self._victim()
            self._preempt(victim, plan)
            if victim is seq:
                return
        plan.take(seq, n)

    def _schedule_waiting(self, plan: StepPlan) -> None:
        while plan.budget > 0:
            seq = self._head()
            if seq is None:
                return
            if self._admit(seq, plan):
                continue
            if not (seq.priority is Priority.CANONICAL and self._preempt_newest_fill(plan)):
                return

    def _head(self) -> Sequence | None:
        """The next waiting sequence to admit (a KV load still under way is skipped)."""
        return next(self._in_order(), None)

    def _in_order(self) -> Iterator[Sequence]:
        now = self._clock() if self._clock is not None else 0.0
        for queue in self.waiting.values():  # CANONICAL first (dict order)
            seqs = queue.values()
            if self.queue_policy == "program" and len(queue) > 1:
                seqs = sorted(seqs, key=self._program_key)  # type: ignore[assignment]
            for seq in seqs:
                if seq.load_done_at is None or seq.load_done_at <= now + LOAD_SLACK_S:
                    yield seq

    def _program_key(self, seq: Sequence) -> tuple[bool, int]:
        # sorted() is stable: one program's requests keep their arrival order
        return (not self._pinned(seq), self._programs.get(seq.program, -1))

    def _admit(self, seq: Sequence, plan: StepPlan) -> bool:
        """Admit ``seq`` (True), or start its load from the CPU tier (True: it waits, skipped,
        and the next request may go), or find it cannot be admitted now (False)."""
        if len(self.running) >= self.max_running:
            return False
        if seq.load_done_at is not None:
            self._finish_load(seq)
        computed: list[KVBlock] = []
        if seq.blocks:  # it holds blocks loaded from the CPU tier: only its chunk is new
            hit = seq.hit_tokens + seq.loaded_tokens
        else:
            computed = self.kv.computed_blocks(seq)
            hit = len(computed) * self.kv.block_size
            if self.tier is not None:
                loading = self._start_load(seq, computed)
                if loading is not None:
                    return loading
            seq.loaded_tokens = 0
        n = min(seq.num_pending - len(computed) * self.kv.block_size, plan.budget)
        if not self.kv.allocate(seq, n, computed):
            self.blocked_blocks = max(self.kv.shortfall(seq, n, computed), 0)
            return False
        self.kv.pool.record_query(len(seq.token_ids), hit)
        self._run(seq, plan, n, hit)
        return True

    def _run(self, seq: Sequence, plan: StepPlan, n: int, hit: int) -> None:
        del self.waiting[seq.priority][seq.request_id]
        self.running[seq.request_id] = seq
        seq.state = SeqState.RUNNING
        seq.hit_tokens = hit
        plan.take(seq, n)
        if not seq.allocated:
            plan.newly_allocated.append(seq)

    def _start_load(self, seq: Sequence, computed: list[KVBlock]) -> bool | None:
        """Give ``seq`` blocks for the tokens the CPU tier holds past ``computed`` and start
        their load (True); None when the tier holds none; False when the blocks are short."""
        assert self.tier is not None and self._clock is not None
        size = self.kv.block_size
        limit = (len(seq.token_ids) - 1) // size  # like a GPU hit: never the last token's block
        loaded = self.tier.hits(seq.block_hashes, len(computed), limit)
        if loaded == 0:
            return None
        if not self.kv.allocate(seq, loaded * size, computed):
            self.blocked_blocks = max(self.kv.shortfall(seq, loaded * size, computed), 0)
            return False
        seq.loaded_tokens = loaded * size
        seq.hit_tokens = len(computed) * size
        seq.load_done_at = self.tier.schedule_load(self._clock(), loaded, self._time_scale)
        return True

    def _finish_load(self, seq: Sequence) -> None:
        """The load completed: its tokens are computed, its blocks findable (and stored)."""
        seq.load_done_at = None
        seq.num_computed += seq.loaded_tokens
        self.kv.cache_full_blocks(seq)

    def _victim(self) -> Sequence:
        """The newest running fill, else the newest running sequence."""
        for seq in reversed(self.running.values()):
            if seq.priority is Priority.FILL:
                return seq
        return next(reversed(self.running.values()))

    def _preempt_newest_fill(self, plan: StepPlan) -> bool:
        if not self.preempt_fills:
            return False
        victim = self._victim() if self.running else None
        if victim is None or victim.priority is not Priority.FILL:
            return False
        self._preempt(victim, plan)
        return True

    def _preempt(self, seq: Sequence, plan: StepPlan) -> None:
        """Recompute preemption: free the blocks (they stay cached) and requeue at the front."""
        plan.drop(seq)
        del self.running[seq.request_id]
        self.kv.free(seq)
        seq.num_computed = 0
        seq.state = SeqState.WAITING
        seq.preemptions += 1
        queue = self.waiting[seq.priority]
        queue[seq.request_id] = seq
        queue.move_to_end(seq.request_id, last=False)
        plan.preempted.append(seq)
        self.num_preemptions += 1


__all__ = ["QUEUE_POLICIES", "QueuePolicy", "Scheduler", "StepPlan"]
