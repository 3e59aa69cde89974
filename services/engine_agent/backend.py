"""The ``EngineBackend`` protocol and the plain values that cross it (DESIGN.md §3 engine_agent).

Every backend (``sim``, ``vllm``, ``openai``, ``sglang``) implements this protocol; the servicer
translates protos to these values and back, so backends never see gRPC.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from services.common.values.chat import ToolCall
from services.common.values.generation import (
    FinishReason,
    GenerationRequest,
    LoadReport,
    Priority,
    Timings,
    Usage,
)


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
    #: Function calls parsed from the output (``text`` is then the content outside them).
    tool_calls: tuple[ToolCall, ...] = ()
    #: The stop string that ended the generation ("" for the end-of-sequence token, the length
    #: limit, or an engine that does not say which).
    stop_string: str = ""


GenerationEvent = Queued | Allocated | TokenDelta | Finished

#: Finish reasons by the names vLLM, OpenAI-compatible servers and SGLang give them.
FINISH_REASONS = {"length": FinishReason.LENGTH, "stop": FinishReason.STOP,
                  "abort": FinishReason.ABORT}


def finish_reason_named(name: str) -> FinishReason:
    """Our reason for an engine's finish-reason name; ``ERROR`` for a name we do not know."""
    return FINISH_REASONS.get(name, FinishReason.ERROR)


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
    #: Whether the backend serves chat specs (tool calling, JSON output).
    tools_supported: bool = False
    extra: dict[str, str] = field(default_factory=dict)


@runtime_checkable
class EngineBackend(Protocol):
    """What an engine agent needs from an engine.

    ``generate`` is an async generator: closing it (or cancelling its consumer) aborts the
    request and frees its slot and KV blocks at once. Errors are ``services.common.values.errors``
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


@runtime_checkable
class PriorityPort(Protocol):
    """A backend that can move a request between priority classes while it queues or runs: a
    fill adopted by a canonical demand is raised to canonical priority, and lowered back when
    its adopter goes away (``running.RunningFills``). ``sim``, ``vllm`` (embedded, with the
    plugin and ``scheduling_policy: priority``) and ``openai`` (in front of a ``vllm serve``
    with the plugin's lease channel and the priority policy) have it; ``sglang`` does not
    (SGLang 0.5.23 has no way to change a submitted request's priority). A backend without it,
    or whose ``set_priority`` answers False, still streams an adopted fill, at the priority it
    was submitted with."""

    async def set_priority(self, request_id: str, priority: Priority) -> bool:
        """Move the queued or running request to ``priority``; False when it is not live (or
        the engine cannot move it now)."""


__all__ = [
    "FINISH_REASONS", "Allocated", "BackendInfo", "EngineBackend", "Finished", "GenerationEvent",
    "PrefixLookup", "PriorityPort", "Queued", "TokenDelta", "finish_reason_named",
]
