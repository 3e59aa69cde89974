"""One generation inside the simulated engine: tokens, KV bookkeeping, output text, events."""

from __future__ import annotations

import asyncio
import enum
from collections import deque

from services.common.values.generation import FinishReason, GenerationRequest
from services.engine_agent.backend import Finished, GenerationEvent, TokenDelta
from services.engine_agent.sim.block_pool import KVBlock
from services.engine_agent.sim.tokenizer import EOS_TOKEN_ID, PseudoText


class SeqState(enum.Enum):
    """Where a sequence is in the engine."""

    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class Sequence:
    """Engine-side state of one request (vLLM's ``Request``)."""

    __slots__ = (
        "request", "request_id", "priority", "sampling", "token_ids", "num_prompt",
        "block_hashes", "num_computed", "blocks", "num_cached_blocks", "state", "allocated",
        "hit_tokens", "cached_prompt_tokens", "output_tokens", "text", "emitted",
        "submit_s", "alloc_s", "first_token_s", "events", "pending_text", "pending_tokens",
        "finished", "waiter", "preemptions", "_pseudo", "_holdback", "stop_string",
        "program", "load_done_at", "loaded_tokens",
    )

    def __init__(self, request: GenerationRequest, prompt_ids: tuple[int, ...],
                 block_hashes: list[int], pseudo: PseudoText, submit_s: float) -> None:
        self.request = request
        self.request_id = request.request_id
        self.priority = request.priority
        self.sampling = request.sampling
        self.token_ids = list(prompt_ids)
        self.num_prompt = len(prompt_ids)
        self.block_hashes = block_hashes  # chained hashes of full blocks of token_ids
        self.num_computed = 0  # tokens whose KV is computed (or hit in the cache)
        self.blocks: list[KVBlock] = []
        self.num_cached_blocks = 0  # leading blocks already registered in the prefix cache
        self.state = SeqState.WAITING
        self.allocated = False  # Allocated was emitted
        self.hit_tokens = 0  # prefix hit at the latest admission
        self.cached_prompt_tokens = 0
        self.output_tokens = 0
        self.text = ""
        self.emitted = 0  # chars of text already handed to a TokenDelta
        self.submit_s = submit_s
        self.alloc_s: float | None = None
        self.first_token_s: float | None = None
        self.events: deque[GenerationEvent] = deque()  # Queued / Allocated, in order
        self.pending_text: list[str] = []  # TokenDelta not yet taken by the consumer
        self.pending_tokens = 0
        self.finished: Finished | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.preemptions = 0
        self._pseudo = pseudo
        stop = request.sampling.stop
        # Text that could still turn into a stop string is held back (vLLM's stop buffer).
        self._holdback = max(map(len, stop)) - 1 if stop else 0
        #: The stop string that ended the text ("" until one does).
        self.stop_string = ""
        #: The program (agent workflow) it belongs to: program-level FCFS orders by this.
        self.program = request.program or request.request_id
        #: Engine wall time its KV load from the CPU tier completes (None: no load under way).
        self.load_done_at: float | None = None
        #: Prompt tokens loaded from the CPU tier at its admission (reported as cached).
        self.loaded_tokens = 0

    @property
    def num_pending(self) -> int:
        """Tokens to compute before the next token can be sampled."""
        return len(self.token_ids) - self.num_computed

    def sample(self, max_model_len: int) -> FinishReason | None:
        """Append the next output token; the finish reason when it ends the generation."""
        token_id, piece = self._pseudo.next()
        self.token_ids.append(token_id)
        self.output_tokens += 1
        self.pending_tokens += 1
        eos = token_id == EOS_TOKEN_ID and not self.sampling.ignore_eos
        reason = None
        if eos or self._append_text(piece):
            reason = FinishReason.STOP
        elif self.output_tokens >= self.sampling.max_tokens or len(self.token_ids) >= max_model_len:
            reason = FinishReason.LENGTH
        self._stage_text(final=reason is not None)
        return reason

    def _append_text(self, piece: str) -> bool:
        """Add ``piece`` to the text; True (and cut the text) when a stop string appears."""
        old_len = len(self.text)
        self.text += piece
        stop = self.sampling.stop
        if not stop:
            return False
        start = max(0, old_len - self._holdback)
        hits = [(i, s) for s in stop if (i := self.text.find(s, start)) >= 0]
        if not hits:
            return False
        at, self.stop_string = min(hits)
        self.text = self.text[:at]
        return True

    def _stage_text(self, final: bool) -> None:
        """Move newly visible text into the pending TokenDelta."""
        end = len(self.text) if final else len(self.text) - self._holdback
        if end > self.emitted:
            self.pending_text.append(self.text[self.emitted:end])
            self.emitted = end

    def flush_text(self) -> None:
        """Release held-back text (the generation is ending)."""
        self._stage_text(final=True)

    def take_delta(self) -> TokenDelta:
        """The pending tokens and text as one event (deltas merge while nobody reads)."""
        delta = TokenDelta(text="".join(self.pending_text), tokens=self.pending_tokens)
        self.pending_text.clear()
        self.pending_tokens = 0
        return delta

    def notify(self) -> None:
        """Wake the consumer waiting for events."""
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def __repr__(self) -> str:
        return (f"Sequence({self.request_id!r}, {self.state.value}, computed={self.num_computed}"
                f"/{len(self.token_ids)}, blocks={len(self.blocks)})")


__all__ = ["SeqState", "Sequence"]
