"""The generation vocabulary every service shares: sampling, priorities, finish reasons, usage,
timings, a generation request and an engine's load report (DESIGN.md §3).

The engine agent's backends produce these, the gateway builds and reads them, and the proto
converters in ``services.common.runtime.convert`` map them to and from ``dynbranch.v1`` messages.
Plain
frozen values; nothing here imports a service.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from services.common.values.chat import ChatSpec


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
    #: Tool calling or JSON output: backends with a chat template render this themselves.
    chat: ChatSpec | None = None
    #: The program (agent workflow) the call belongs to, for engines that order their queue
    #: by program (program-level FCFS); "" when unknown (the request is its own program).
    program: str = ""


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
class Progress:
    """What an adopted fill has done, as its engine agent streams it (``EngineAgent.Adopt``):
    the first event is a snapshot (its text so far), each later one what the engine added."""

    #: New output text since the previous event (the first: everything so far); "" unless the
    #: adopter asked for text (a streamed demand).
    text: str = ""
    #: Output tokens produced so far (cumulative).
    tokens: int = 0
    #: The fill holds KV and runs (it was allocated; a preempted fill stays allocated here).
    allocated: bool = False
    #: First event only: the fill now runs at canonical priority (False: the backend cannot
    #: raise it, or it is not running any more).
    raised: bool = False
    #: The fill ended; the last event (its result went to the fill's own caller).
    finished: bool = False


__all__ = ["FinishReason", "GenerationRequest", "LoadReport", "Priority", "Progress", "Sampling",
           "Timings", "Usage"]
