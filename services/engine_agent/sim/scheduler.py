"""Continuous-batching scheduler of the simulated engine (after vLLM v1's ``Scheduler``).

Each step gets a token budget. Running sequences go first, decodes before prefill chunks, in
admission order; then waiting sequences are admitted FIFO, canonical before fill, with a
prefix-cache hit and a prefill chunk of at most the remaining budget. A running sequence that
cannot get a block preempts the newest running fill (else the newest sequence), which returns
to the front of its queue and later recomputes with prefix hits. A canonical request that
cannot be admitted likewise preempts running fills, so fills never starve canonical work.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from services.common.values.generation import Priority
from services.engine_agent.sim.cost_model import StepWork
from services.engine_agent.sim.kv_cache import KVCacheManager
from services.engine_agent.sim.sequence import SeqState, Sequence


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
                 preempt_fills: bool = True) -> None:
        self.kv = kv
        self.max_running = max_running
        self.max_batched_tokens = max_batched_tokens
        self.preempt_fills = preempt_fills
        self.waiting: dict[Priority, OrderedDict[str, Sequence]] = {
            Priority.CANONICAL: OrderedDict(), Priority.FILL: OrderedDict()}
        self.running: dict[str, Sequence] = {}
        self.num_preemptions = 0
        self.blocked_blocks = 0  # free blocks the last failed admission lacked (0: none)

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
        return ahead

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
        for queue in self.waiting.values():  # CANONICAL first (dict order)
            if queue:
                return next(iter(queue.values()))
        return None

    def _admit(self, seq: Sequence, plan: StepPlan) -> bool:
        if len(self.running) >= self.max_running:
            return False
        computed = self.kv.computed_blocks(seq)
        hit = len(computed) * self.kv.block_size
        n = min(len(seq.token_ids) - hit, plan.budget)
        if not self.kv.allocate(seq, n, computed):
            self.blocked_blocks = max(self.kv.shortfall(seq, n, computed), 0)
            return False
        self.kv.pool.record_query(len(seq.token_ids), hit)
        del self.waiting[seq.priority][seq.request_id]
        self.running[seq.request_id] = seq
        seq.state = SeqState.RUNNING
        seq.hit_tokens = hit
        plan.take(seq, n)
        if not seq.allocated:
            plan.newly_allocated.append(seq)
        return True

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


__all__ = ["Scheduler", "StepPlan"]
