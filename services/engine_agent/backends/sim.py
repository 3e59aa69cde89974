"""``SimBackend``: the simulated engine behind the ``EngineBackend`` protocol.

A model of a continuous-batching engine, not an engine: every report that uses it says so
(``BackendInfo.simulated``). Build one from a preset name::

    backend = SimBackend("qwen3-32b-h200", time_scale=0.01, engine_id="sim-0", model="qwen3-32b")
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from services.common.values.generation import (
    FinishReason,
    GenerationRequest,
    LoadReport,
    Priority,
)
from services.common.values.leases import KAPPA_CHUNK_TOKENS
from services.engine_agent.backend import BackendInfo, Finished, GenerationEvent, PrefixLookup
from services.engine_agent.leases.port import Handoff, PoolState, ResidentPrefix
from services.engine_agent.sim.cost_model import CostPreset, StepWork, get_preset, load_preset_file
from services.engine_agent.sim.engine import SimEngine
from services.engine_agent.sim.offload import OffloadSpec
from services.engine_agent.sim.scheduler import QueuePolicy
from services.engine_agent.sim.tokenizer import encode
from services.engine_agent.sim.tools import parse_tool_calls


def _with_tool_calls(request: GenerationRequest, finished: Finished) -> Finished:
    """The finish with the simulated model's tool calls parsed out of its text."""
    if request.chat is None or finished.reason not in (FinishReason.STOP, FinishReason.LENGTH):
        return finished
    content, calls = parse_tool_calls(finished.text, request.chat, request.prompt)
    if not calls:
        return finished
    return dataclasses.replace(finished, reason=FinishReason.STOP, text=content, tool_calls=calls)


class SimBackend:
    """``EngineBackend`` over a ``SimEngine``; also the ``LeasePort`` of its block pool."""

    def __init__(self, preset: str | CostPreset = "qwen3-32b-h200", *, time_scale: float = 0.0,
                 engine_id: str = "sim-0", model: str | None = None,
                 output_len_range: tuple[int, int] = (32, 512),
                 preempt_fills: bool = True, clock: Callable[[], float] = time.monotonic,
                 queue_policy: QueuePolicy = "fcfs", offload_gib: float = 0.0) -> None:
        self.preset = get_preset(preset) if isinstance(preset, str) else preset
        self.engine_id = engine_id
        offload = OffloadSpec.from_preset(self.preset, offload_gib) if offload_gib > 0 else None
        self.engine = SimEngine(self.preset, model=model, time_scale=time_scale,
                                output_len_range=output_len_range, preempt_fills=preempt_fills,
                                clock=clock, queue_policy=queue_policy, offload=offload)
        chunk = StepWork()
        chunk.add(0, KAPPA_CHUNK_TOKENS, False)
        self._kappa_s = self.preset.step_time(chunk) * time_scale
        self._info = BackendInfo(
            backend="sim", model=self.engine.model, max_model_len=self.engine.max_model_len,
            block_size=self.preset.block_size, kv_blocks_total=self.preset.kv_blocks,
            max_running=self.preset.max_running, leases_supported=True, simulated=True,
            tools_supported=True,
            extra={"engine_id": engine_id, "preset": self.preset.name,
                   "time_scale": repr(time_scale), "queue_policy": queue_policy,
                   "offload_gib": repr(offload_gib)})

    @classmethod
    def from_settings(cls, settings: Any) -> SimBackend:
        """Build from ``EngineAgentSettings`` (preset or preset_file, overrides where non-zero)."""
        if settings.preset_file:
            preset = load_preset_file(settings.preset_file)[0]
        else:
            preset = get_preset(settings.preset)
        overrides = {key: value for key, value in (
            ("block_size", settings.block_size), ("num_kv_blocks", settings.kv_blocks),
            ("max_running", settings.max_running)) if value}
        if overrides:
            preset = preset.with_overrides(**overrides)
        return cls(preset, time_scale=settings.time_scale, engine_id=settings.engine_id,
                   model=settings.model, queue_policy=settings.queue_policy,
                   offload_gib=settings.kv_offload_gib)

    @property
    def info(self) -> BackendInfo:
        """Static facts about the simulated engine."""
        return self._info

    async def start(self) -> None:
        """Start the step loop; idempotent."""
        await self.engine.start()

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        """Submit and stream events; closing or cancelling the stream aborts the request."""
        engine = self.engine
        seq = engine.submit(request)
        try:
            while True:
                while seq.events:
                    yield seq.events.popleft()
                if seq.pending_tokens:
                    yield seq.take_delta()
                    continue
                if seq.finished is not None:
                    yield _with_tool_calls(request, seq.finished)
                    return
                await engine.wait(seq)
        finally:
            engine.abort_seq(seq)

    async def abort(self, request_id: str) -> bool:
        """Abort a queued or running request; False when unknown or already finished."""
        return self.engine.abort(request_id)

    async def set_priority(self, request_id: str, priority: Priority) -> bool:
        """``PriorityPort``: move a queued or running request to ``priority``."""
        return self.engine.set_priority(request_id, priority)

    def load(self) -> LoadReport:
        """Current load."""
        return self.engine.load()

    async def lookup_prefix(self, prompt: str) -> PrefixLookup:
        """Leading tokens of ``prompt`` a submission now would find in the prefix cache."""
        return self.engine.lookup_prefix(prompt)

    # --- LeasePort ----------------------------------------------------------------------------
    @property
    def lease_block_size(self) -> int:
        """Tokens per KV block."""
        return self.preset.block_size

    def tokenize(self, prompt: str) -> tuple[int, ...]:
        """Token ids of ``prompt`` exactly as the engine sees them."""
        return encode(prompt)

    async def resident(self, token_ids: Sequence[int]) -> ResidentPrefix:
        """The resident reusable prefix of ``token_ids``."""
        return self.engine.leases.resident(token_ids)

    async def pool_state(self) -> PoolState:
        """Free blocks, queues, the running limit and κ (one 512-token chunk's step, scaled)."""
        sched = self.engine.scheduler
        pool = self.engine.pool
        return PoolState(pool.num_free, pool.num_blocks, sched.num_waiting, len(sched.running),
                         sched.max_running, self._kappa_s,
                         sched.blocked_blocks if sched.num_waiting else 0)

    async def acquire(self, lease_id: str, block_ids: Sequence[int], digest: str) -> bool:
        """Add one reference to each block iff all still hold the prefix ``digest`` names."""
        return self.engine.leases.acquire(lease_id, block_ids, digest)

    async def release(self, lease_id: str) -> int:
        """Drop exactly the lease's references."""
        return self.engine.leases.release(lease_id)

    async def bind(self, lease_id: str, request_id: str) -> None:
        """Hand the lease off at ``request_id``'s first allocation if it owns every block."""
        self.engine.leases.bind(lease_id, request_id, self.engine.running_seq(request_id))

    async def handoffs(self) -> list[Handoff]:
        """Handoffs since the last call."""
        return self.engine.leases.drain_handoffs()

    async def lease_refs(self) -> dict[str, int]:
        """Blocks each live lease references."""
        return self.engine.leases.refs()

    async def close(self) -> None:
        """Abort everything, release every lease, stop the loop; idempotent."""
        await self.engine.close()


__all__ = ["SimBackend"]
