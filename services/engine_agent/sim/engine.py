"""The simulated engine: submit/abort, the asyncio step loop, the simulated clock, events.

Protocol-free core of the ``sim`` backend (DESIGN.md §3 engine_agent). One owned task runs
steps: schedule, price the step with the cost preset, sleep ``step_s × time_scale`` of wall
time (only yielding at scale 0), then apply it (advance KV, sample tokens, finish). Reported
timings are simulated engine seconds whatever the scale. With no runnable work the task
waits on an event (or until the next load from the CPU tier completes), never spinning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable

from services.common.values.errors import (
    AlreadyExists,
    InvalidArgument,
    PayloadTooLarge,
    Unavailable,
    quoted,
)
from services.common.values.generation import (
    FinishReason,
    GenerationRequest,
    LoadReport,
    Priority,
    Timings,
    Usage,
)
from services.engine_agent.backend import Allocated, Finished, PrefixLookup, Queued
from services.engine_agent.sim.block_pool import BlockPool, PrefixHashes
from services.engine_agent.sim.cost_model import CostPreset
from services.engine_agent.sim.kv_cache import KVCacheManager
from services.engine_agent.sim.leases import SimLeases
from services.engine_agent.sim.offload import HostTier, OffloadSpec
from services.engine_agent.sim.scheduler import QueuePolicy, Scheduler, StepPlan
from services.engine_agent.sim.sequence import SeqState, Sequence
from services.engine_agent.sim.tokenizer import PseudoText, ScriptedText, encode, text_key
from services.engine_agent.sim.tools import scripted_output

log = logging.getLogger(__name__)

#: Wall-clock lag behind the paced schedule beyond which the loop re-anchors.
_MAX_LAG_S = 0.05


class SimEngine:
    """A continuous-batching engine model with paged KV, prefix caching and a cost model."""

    def __init__(self, preset: CostPreset, *, model: str | None = None, time_scale: float = 0.0,
                 output_len_range: tuple[int, int] = (32, 512), preempt_fills: bool = True,
                 clock: Callable[[], float] = time.monotonic, queue_policy: QueuePolicy = "fcfs",
                 offload: OffloadSpec | None = None) -> None:
        if time_scale < 0:
            raise ValueError(f"time_scale must be >= 0, got {time_scale}")
        lo, hi = output_len_range
        if not 1 <= lo <= hi:
            raise ValueError(f"output_len_range must satisfy 1 <= lo <= hi, got {output_len_range}")
        self.preset = preset
        self.model = model or preset.model.name
        self.time_scale = time_scale
        self.max_model_len = preset.context_len
        self.pool = BlockPool(preset.kv_blocks, preset.block_size)
        self.prefix_hashes = PrefixHashes(preset.block_size)
        self.tier = HostTier(offload) if offload is not None else None
        self.kv = KVCacheManager(self.pool, self.tier)
        self._output_len_range = output_len_range
        self._live: dict[str, Sequence] = {}
        self._wake = asyncio.Event()
        self._mono = clock  # wall clock that paces steps (a replay passes a virtual one)
        self.leases = SimLeases(self.kv, clock, self._wake.set, self.prefix_hashes)
        self.scheduler = Scheduler(self.kv, max_running=preset.max_running,
                                   max_batched_tokens=preset.max_batched_tokens,
                                   preempt_fills=preempt_fills, queue_policy=queue_policy,
                                   pinned=self.leases.holds_for, tier=self.tier, clock=clock,
                                   time_scale=time_scale)
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._clock = 0.0  # simulated seconds at the end of the last step
        self._step: tuple[float, float, float] | None = None  # (sim start, dt, wall start)
        self._anchor = (0.0, 0.0)  # (wall, sim) pair that paces the sleeps
        self.steps = 0

    # --- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the step loop; idempotent."""
        if self._closed:
            raise Unavailable("engine is closed")
        self._ensure_loop()

    def _ensure_loop(self) -> None:
        if self._task is None:
            self._anchor = (self._mono(), self._clock)
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-engine")

    async def close(self) -> None:
        """Abort every request, release every pin, stop and await the loop; idempotent."""
        self._closed = True
        for seq in list(self._live.values()):
            self._finish(seq, FinishReason.ABORT)
        if released := self.leases.release_all():
            log.warning("released %d leased blocks still held at close", released)
        task, self._task = self._task, None
        if task is not None:
            task.cancel()  # it may be sleeping through a long step
            await asyncio.wait([task])

    # --- requests ----------------------------------------------------------------------------
    def submit(self, request: GenerationRequest) -> Sequence:
        """Validate and queue a request; events accumulate on the returned sequence."""
        if self._closed:
            raise Unavailable("engine is closed")
        self._validate(request)
        prompt_ids = encode(request.prompt)
        self._check_fits(len(prompt_ids))
        hashes = list(self.prefix_hashes(prompt_ids))
        seq = Sequence(request, prompt_ids, hashes, self._pseudo_text(request), self.now())
        self._live[request.request_id] = seq
        ahead = self.scheduler.add(seq)
        seq.events.append(Queued(prompt_tokens=len(prompt_ids), queue_position=ahead))
        self._ensure_loop()
        self._wake.set()
        return seq

    def abort(self, request_id: str) -> bool:
        """Abort a queued or running request, freeing its slot and blocks now."""
        seq = self._live.get(request_id)
        if seq is None:
            return False
        self._finish(seq, FinishReason.ABORT)
        return True

    def set_priority(self, request_id: str, priority: Priority) -> bool:
        """Move a queued or running request to ``priority`` (see ``Scheduler.reprioritize``);
        False when it is not live."""
        seq = self._live.get(request_id)
        if seq is None:
            return False
        self.scheduler.reprioritize(seq, priority)
        self._wake.set()
        return True

    def abort_seq(self, seq: Sequence) -> None:
        """Abort ``seq`` unless it already finished (the consumer went away)."""
        if seq.state is not SeqState.FINISHED:
            self._finish(seq, FinishReason.ABORT)

    async def wait(self, seq: Sequence) -> None:
        """Wait until ``seq`` has new events."""
        waiter = asyncio.get_running_loop().create_future()
        seq.waiter = waiter
        try:
            await waiter
        finally:
            seq.waiter = None

    def _validate(self, request: GenerationRequest) -> None:
        if not request.request_id:
            raise InvalidArgument("request_id", "must not be empty")
        if request.request_id in self._live:
            raise AlreadyExists(f"request {quoted(request.request_id)} is already running")
        if request.model != self.model:
            raise InvalidArgument(
                "model", f"unknown model {quoted(request.model)}; serving {self.model!r}")
        if not request.prompt:
            raise InvalidArgument("prompt", "must not be empty")
        _validate_sampling(request, self.max_model_len)

    def _check_fits(self, prompt_tokens: int) -> None:
        limit = min(self.max_model_len - 1, self.pool.num_blocks * self.pool.block_size - 1)
        if prompt_tokens > limit:
            raise PayloadTooLarge(
                "prompt", f"{prompt_tokens} tokens exceed the limit of {limit} (max_model_len "
                f"{self.max_model_len}, KV pool {self.pool.num_blocks} blocks of "
                f"{self.pool.block_size}, one token left for the output)")

    def _pseudo_text(self, request: GenerationRequest) -> PseudoText:
        s = request.sampling
        if s.temperature == 0.0:
            key = text_key(request.prompt, "greedy")
        elif s.seed is not None:
            key = text_key(request.prompt, repr((s.temperature, s.top_p, s.top_k, s.seed)))
        else:
            key = random.getrandbits(64)  # unseeded sampling may differ run to run
        script = scripted_output(request.chat, key) if request.chat is not None else None
        if script is not None:  # a tool call or a JSON answer, spelled out (sim_tools)
            return ScriptedText(script)
        lo, hi = self._output_len_range
        eos_at = lo + (key >> 32) % (hi - lo + 1)
        return PseudoText(key, eos_at)

    # --- queries -----------------------------------------------------------------------------
    def now(self) -> float:
        """Simulated seconds (interpolated inside a step when sleeps are scaled)."""
        if self._step is None or self.time_scale == 0:
            return self._clock
        start, dt, wall = self._step
        return start + min(max((self._mono() - wall) / self.time_scale, 0.0), dt)

    @property
    def busy_s(self) -> float:
        """Simulated seconds spent in steps so far (the clock advances only while stepping)."""
        return self._clock

    def load(self) -> LoadReport:
        """Current load of the engine."""
        fills = [s for s in self.scheduler.running.values() if s.priority is Priority.FILL]
        return LoadReport(
            running=len(self.scheduler.running), waiting=self.scheduler.num_waiting,
            max_running=self.scheduler.max_running, kv_blocks_used=self.pool.num_used,
            kv_blocks_total=self.pool.num_blocks, fill_running=len(fills),
            fill_kv_blocks=sum(len(s.blocks) for s in fills), block_size=self.pool.block_size,
            prefix_query_tokens=self.pool.prefix_query_tokens,
            prefix_hit_tokens=self.pool.prefix_hit_tokens)

    def lookup_prefix(self, prompt: str) -> PrefixLookup:
        """Tokens of ``prompt`` that a submission now would hit (whole blocks, not the last)."""
        ids = encode(prompt)
        max_blocks = max(len(ids) - 1, 0) // self.pool.block_size
        hits = self.kv.resident_prefix(ids, max_blocks)
        size = self.pool.block_size
        return PrefixLookup(prompt_tokens=len(ids), resident_tokens=len(hits) * size,
                            block_size=size)

    def running_seq(self, request_id: str) -> Sequence | None:
        """The live sequence of a request, if any."""
        return self._live.get(request_id)

    # --- the step loop -----------------------------------------------------------------------
    async def _run(self) -> None:
        try:
            await self._loop()
        except Exception:  # a bug must not hang callers: end every request as an error
            log.exception("sim engine loop failed; failing every live request")
            self._closed = True
            for seq in list(self._live.values()):
                self._finish(seq, FinishReason.ERROR)

    async def _loop(self) -> None:
        while not self._closed:
            self._wake.clear()
            plan = self.scheduler.schedule() if self.scheduler.has_work() else None
            if plan is not None and plan.preempted and not plan.scheduled:
                continue  # a preemption changed the queues: schedule again before idling
            if plan is None or not plan.scheduled:
                await self._idle()
                self._anchor = (self._mono(), self._clock)
                continue
            await self._run_step(plan)

    async def _idle(self) -> None:
        """Wait for new work, or until the earliest KV load from the CPU tier completes."""
        load_at = self.scheduler.next_load_at()
        if load_at is None:
            await self._wake.wait()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), max(0.0, load_at - self._mono()))

    async def _run_step(self, plan: StepPlan) -> None:
        dt = self.preset.step_time(plan.work())
        self._emit_allocated(plan)
        self._step = (self._clock, dt, self._mono())
        await self._sleep(dt)
        self._step = None
        self._clock += dt
        self.steps += 1
        self._apply(plan)

    async def _sleep(self, dt: float) -> None:
        if self.time_scale == 0 or dt == 0:
            await asyncio.sleep(0)  # still let submitters and consumers run between steps
            return
        wall, sim = self._anchor  # pace against an anchor so timer overshoot does not add up
        now = self._mono()
        delay = wall + (self._clock + dt - sim) * self.time_scale - now
        if delay < -_MAX_LAG_S:  # far behind (a blocked loop): re-anchor instead of racing
            self._anchor = (now, self._clock)
            delay = dt * self.time_scale
        await asyncio.sleep(max(delay, 0.0))

    def _emit_allocated(self, plan: StepPlan) -> None:
        for seq in plan.newly_allocated:
            if seq in plan.scheduled and seq.state is SeqState.RUNNING:
                seq.allocated = True
                seq.alloc_s = self._clock
                seq.cached_prompt_tokens = min(seq.hit_tokens, seq.num_prompt)
                seq.events.append(Allocated(cached_prompt_tokens=seq.cached_prompt_tokens,
                                            queue_s=self._clock - seq.submit_s))
                self.leases.on_allocated(seq)
                seq.notify()

    def _apply(self, plan: StepPlan) -> None:
        """Apply a finished step: computed tokens, cached blocks, sampled tokens, finishes."""
        for seq, n in plan.scheduled.items():
            if seq.state is not SeqState.RUNNING:
                continue  # aborted while the step ran; its blocks are already free
            seq.num_computed += n
            self.kv.cache_full_blocks(seq)
            if seq.num_pending > 0:
                continue  # a prefill chunk; the prompt is not done yet
            reason = seq.sample(self.max_model_len)
            if seq.first_token_s is None:
                seq.first_token_s = self._clock
            if reason is not None:
                self._finish(seq, reason)
            else:
                seq.notify()

    def _finish(self, seq: Sequence, reason: FinishReason) -> None:
        self.scheduler.remove(seq)
        del self._live[seq.request_id]
        seq.flush_text()
        seq.finished = Finished(reason=reason, text=seq.text, usage=Usage(
            prompt_tokens=seq.num_prompt, cached_prompt_tokens=seq.cached_prompt_tokens,
            completion_tokens=seq.output_tokens), timings=self._timings(seq),
            stop_string=seq.stop_string if reason is FinishReason.STOP else "")
        seq.notify()
        self._wake.set()

    def _timings(self, seq: Sequence) -> Timings:
        end = self.now()
        alloc = end if seq.alloc_s is None else seq.alloc_s
        first = end if seq.first_token_s is None else seq.first_token_s
        return Timings(queue_s=alloc - seq.submit_s, prefill_s=first - alloc,
                       decode_s=end - first, total_s=end - seq.submit_s)


def _validate_sampling(request: GenerationRequest, max_model_len: int) -> None:
    s = request.sampling
    if not 1 <= s.max_tokens <= max_model_len:
        raise InvalidArgument("max_tokens", f"must be in [1, {max_model_len}], got {s.max_tokens}")
    if s.temperature < 0:
        raise InvalidArgument("temperature", f"must be >= 0, got {s.temperature}")
    if not 0 < s.top_p <= 1:
        raise InvalidArgument("top_p", f"must be in (0, 1], got {s.top_p}")
    if s.top_k < 0:
        raise InvalidArgument("top_k", f"must be >= 0 (0 disables), got {s.top_k}")
    if any(not stop for stop in s.stop):
        raise InvalidArgument("stop", "stop strings must not be empty")
    if not isinstance(request.priority, Priority):
        raise InvalidArgument("priority", f"unknown priority {quoted(request.priority)}")


__all__ = ["SimEngine"]
