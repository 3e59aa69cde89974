"""The ``EngineBackend`` protocol and the plain values that cross it (DESIGN.md §3 engine_agent).

Every backend (``sim``, ``vllm``, ``openai``, ``sglang``) implements this protocol; the servicer
translates protos to these values and back, so backends never see gRPC.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


class Priority(enum.IntEnum):
    """Priority class of a generation (values match ``dynbranch.v1.PriorityClass``)."""

    CANONICAL = 1
    FILL = 2


class FinishReason(enum.IntEnum):
    """Why a generation ended (values match ``dynbranch.v1.FinishReason``)."""

    LENGTH = 1
    STOP = 2
    ABORT = 3
    ERROR = 4


@dataclass(frozen=True, slots=True)
class Sampling:
    """Sampling parameters; every field can change the output."""

    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False

    @property
    def deterministic(self) -> bool:
        """Greedy, or sampled with an explicit seed: the only results that may be reused."""
        return self.temperature == 0.0 or self.seed is not None


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One generation as a backend receives it."""

    request_id: str
    model: str
    prompt: str
    sampling: Sampling
    priority: Priority = Priority.CANONICAL


@dataclass(frozen=True, slots=True)
class Usage:
    """Token accounting of one generation."""

    prompt_tokens: int
    cached_prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True, slots=True)
class Timings:
    """Per-phase timings in engine seconds (simulated seconds for ``sim``)."""

    queue_s: float
    prefill_s: float
    decode_s: float
    total_s: float


@dataclass(frozen=True, slots=True)
class Queued:
    """The request entered the waiting queue."""

    prompt_tokens: int
    queue_position: int


@dataclass(frozen=True, slots=True)
class Allocated:
    """First KV allocation with positive-token work for the request."""

    cached_prompt_tokens: int
    queue_s: float


@dataclass(frozen=True, slots=True)
class TokenDelta:
    """Newly generated text."""

    text: str
    tokens: int


@dataclass(frozen=True, slots=True)
class Finished:
    """End of a generation; always the last event."""

    reason: FinishReason
    text: str
    usage: Usage
    timings: Timings


GenerationEvent = Queued | Allocated | TokenDelta | Finished


@dataclass(frozen=True, slots=True)
class LoadReport:
    """Live load of one engine."""

    running: int
    waiting: int
    max_running: int
    kv_blocks_used: int
    kv_blocks_total: int
    fill_running: int = 0
    fill_kv_blocks: int = 0
    block_size: int = 16
    prefix_query_tokens: int = 0
    prefix_hit_tokens: int = 0

    @property
    def pressure(self) -> float:
        """A scalar load in [0, inf) for routing: slot share plus queue and KV share."""
        slots = (self.running + self.waiting) / max(self.max_running, 1)
        kv = self.kv_blocks_used / max(self.kv_blocks_total, 1)
        return slots + kv


@dataclass(frozen=True, slots=True)
class PrefixLookup:
    """Resident prefix of a prompt."""

    prompt_tokens: int
    resident_tokens: int
    block_size: int


@dataclass(frozen=True, slots=True)
class BackendInfo:
    """Static facts about an engine."""

    backend: str
    model: str
    max_model_len: int
    block_size: int
    kv_blocks_total: int
    max_running: int
    leases_supported: bool = False
    simulated: bool = False
    extra: dict[str, str] = field(default_factory=dict)


@runtime_checkable
class EngineBackend(Protocol):
    """What an engine agent needs from an engine.

    ``generate`` is an async generator: closing it (or cancelling its consumer) aborts the
    request and frees its slot and KV blocks at once. Errors are ``services.common.errors``
    classes (``InvalidArgument`` for bad fields, ``PayloadTooLarge`` for an over-long prompt,
    ``AlreadyExists`` for a duplicate request id, ``Unavailable`` when the engine is down).
    """

    @property
    def info(self) -> BackendInfo: ...

    async def start(self) -> None:
        """Bring the engine up; idempotent."""

    def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        """Submit and stream the lifecycle events of one generation."""

    async def abort(self, request_id: str) -> bool:
        """Abort a queued or running request; False when unknown or already finished."""

    def load(self) -> LoadReport:
        """Current load (cheap; called for every load view)."""

    async def lookup_prefix(self, prompt: str) -> PrefixLookup:
        """Leading tokens of ``prompt`` resident in the prefix cache."""

    async def close(self) -> None:
        """Abort everything, release every reference, stop the engine; idempotent."""


__all__ = [
    "Allocated", "BackendInfo", "EngineBackend", "FinishReason", "Finished", "GenerationEvent",
    "GenerationRequest", "LoadReport", "PrefixLookup", "Priority", "Queued", "Sampling",
    "Timings", "TokenDelta", "Usage",
]
