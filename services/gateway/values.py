"""The gateway's plain values: which mechanisms are on, stage demands and answers as its core
sees them, and how a stage result is stored in the library (enough to answer a later demand
exactly). No protos, no gRPC; every gateway module may import this one, and it imports only
``services.common``."""

from __future__ import annotations

import contextvars
import enum
import itertools
import json
import logging
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from services.common.values.chat import ChatSpec, ToolCall
from services.common.values.errors import InvalidArgument, quoted

if TYPE_CHECKING:
    from services.gateway.templates.model import Stage
from services.common.values.generation import FinishReason, Sampling, Timings, Usage

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Features:
    """Which mechanisms are on; the experiment arms are combinations of these."""

    c1: bool = True
    c2: bool = True


class AnswerSource(enum.IntEnum):
    """Where an answer came from (values match ``dynbranch.v1.ResultSource``)."""

    ENGINE = 1
    LIBRARY = 2
    PROMOTED_FILL = 3
    #: The execution of an identical demand running when this one arrived (single-flight).
    JOINED = 4


@dataclass(frozen=True, slots=True)
class Demand:
    """One rendered stage a caller wants run; ``tenant`` always comes from the caller's key."""

    tenant: str
    request_id: str
    model: str
    prompt: str
    sampling: Sampling | None
    workflow_type: str = ""
    workflow_id: str = ""
    agent_id: str = ""
    template_id: str = ""
    stage_id: str = ""
    stage_version: int = 0
    #: Workflow inputs (``input.<name>``) known at this stage; fills are rendered from them.
    inputs: tuple[tuple[str, str], ...] = ()
    #: Outputs of upstream stages (``stages.<id>.output``) known at this stage.
    outputs: tuple[tuple[str, str], ...] = ()
    #: Harness-offered candidates when the stage is a decision point (offered spaces, HCI).
    offered: tuple[str, ...] = ()
    #: Latest observation (e.g. a retrieval result) for predictors that read it (ReAct).
    observation: str = ""
    #: Tool calling or JSON output (OpenAI chat requests): part of the reuse name.
    chat: ChatSpec | None = None
    #: The template stage a tagged demand names, resolved once where the demand enters the
    #: gateway (the edge, or ``GatewayCore.call`` for in-process callers); None when untagged.
    stage: Stage | None = field(default=None, compare=False)

    @property
    def tagged(self) -> bool:
        """Whether the demand names a registered template stage."""
        return bool(self.template_id and self.stage_id)


@dataclass(frozen=True, slots=True)
class Answer:
    """The result of one demand."""

    request_id: str
    text: str
    finish_reason: FinishReason
    usage: Usage
    timings: Timings
    source: AnswerSource
    engine_id: str = ""
    gateway_s: float = 0.0
    reuse_name: str = ""
    extra: dict[str, str] = field(default_factory=dict)
    tool_calls: tuple[ToolCall, ...] = ()
    #: Seconds spent waiting for engine work of another request (a fill step, a joined
    #: execution): engine time elsewhere, not the mesh's own.
    waited_s: float = 0.0
    #: The stop string that ended the generation ("" when none did, or it is not known).
    stop_string: str = ""

    @classmethod
    def of(cls, request_id: str, stored: StoredResult, source: AnswerSource, gateway_s: float,
           reuse_name: str, timings: Timings | None = None, engine_id: str = "") -> Answer:
        """The answer that ``stored`` gives a demand (``timings`` and ``engine_id``: of the
        demand's own execution; none for a result served or joined)."""
        return cls(request_id, stored.text, stored.finish_reason, stored.usage,
                   timings if timings is not None else ZERO_TIMINGS, source, engine_id,
                   gateway_s, reuse_name, tool_calls=stored.tool_calls,
                   stop_string=stored.stop_string)


class TextStream:
    """Where a streamed demand's text goes as it is produced (the SSE fronts' sink).

    ``source`` says whose execution produces the text: the demand's own (ENGINE) unless it
    adopted a fill still running for it (PROMOTED_FILL, set before the fill's first text). A
    demand that gives an adoption up and runs anew streams the same text again from its start
    (its stage is deterministic): ``restart`` makes the stream drop what it already sent."""

    __slots__ = ("_deliver", "_replay", "_sent", "source")

    def __init__(self, deliver: Callable[[str], None]) -> None:
        self._deliver = deliver
        self._sent: list[str] = []
        self._replay = ""
        self.source = AnswerSource.ENGINE

    def __call__(self, text: str) -> None:
        if self._replay:
            n = min(len(self._replay), len(text))
            if text[:n] != self._replay[:n]:
                _log.warning("a run anew streamed other text than the adopted fill had")
                self._replay = ""
            else:
                self._replay, text = self._replay[n:], text[n:]
        if text:
            self._sent.append(text)
            self._deliver(text)

    @property
    def sent(self) -> str:
        """The text delivered so far."""
        return "".join(self._sent)

    def restart(self) -> None:
        """A new execution will stream this text again from its start: drop what was sent."""
        self._replay = self.sent
        self.source = AnswerSource.ENGINE


#: The current demand's wait accumulator (``StageService.run`` sets it; ``charge_wait`` adds).
_WAITED: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar(
    "dynbranch_waited", default=None)


def start_wait_account() -> tuple[list[float], contextvars.Token[list[float] | None]]:
    """Start counting the current demand's waits on other requests' engine work."""
    account = [0.0]
    return account, _WAITED.set(account)


def charge_wait(seconds: float) -> None:
    """Add ``seconds`` waited on another request's engine work to the current demand."""
    account = _WAITED.get()
    if account is not None and seconds > 0:
        account[0] += seconds


def end_wait_account(token: contextvars.Token[list[float] | None]) -> None:
    """Stop counting (the demand is answered)."""
    _WAITED.reset(token)


_ID_PREFIX = secrets.token_hex(6)
_ID_SEQ = itertools.count(1)


def new_request_id() -> str:
    """A request id unique across gateways (random per process, then a counter): cheaper than a
    uuid4 on every demand."""
    return f"{_ID_PREFIX}-{next(_ID_SEQ)}"


ZERO_USAGE = Usage(0, 0, 0)
ZERO_TIMINGS = Timings(0.0, 0.0, 0.0, 0.0)


@dataclass(frozen=True, slots=True)
class StoredResult:
    """The recorded answer of one stage execution.

    ``reads`` are the ``(record_id, version)`` pairs of the gateway's own records (its corpus)
    the result was computed from; the gateway checks them against its records before it serves
    a stored result, so a library that disagrees with the corpus (a lost or restored csl store)
    can never serve older text. Empty for stages that read no gateway record.
    """

    text: str
    finish_reason: FinishReason
    usage: Usage
    reads: tuple[tuple[str, int], ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    stop_string: str = ""

    def encode(self) -> bytes:
        """Compact JSON bytes (the read pairs only when there are any or fields follow; the
        tool calls as ``[id, name, arguments]`` only when there are any or the stop string
        follows; the stop string only when there is one)."""
        u = self.usage
        fields: list[object] = [self.text, int(self.finish_reason), u.prompt_tokens,
                                u.cached_prompt_tokens, u.completion_tokens]
        if self.reads or self.tool_calls or self.stop_string:
            fields.append([list(r) for r in self.reads])
        if self.tool_calls or self.stop_string:
            fields.append([[c.id, c.name, c.arguments] for c in self.tool_calls])
        if self.stop_string:
            fields.append(self.stop_string)
        return json.dumps(fields, separators=(",", ":"), ensure_ascii=False).encode()

    @classmethod
    def decode(cls, data: bytes) -> StoredResult:
        """Inverse of :meth:`encode`; raises ValueError on foreign bytes."""
        try:
            text, reason, prompt, cached, completion, *rest = json.loads(data)
            reads = tuple((str(r), int(v)) for r, v in rest[0]) if rest else ()
            calls = (tuple(ToolCall(str(i), str(n), str(a)) for i, n, a in rest[1])
                     if len(rest) > 1 else ())
            stop = rest[2] if len(rest) > 2 else ""
            if len(rest) > 3 or not isinstance(stop, str):
                raise ValueError("trailing fields")
            return cls(text, FinishReason(reason), Usage(prompt, cached, completion), reads,
                       calls, stop)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"not a stored stage result: {exc}") from None


def unknown_model(model: str, served: Iterable[str]) -> InvalidArgument:
    """The error for a demand naming a model no engine serves (lists what is served)."""
    known = ", ".join(sorted(set(served))) or "none"
    return InvalidArgument("demand.model", f"unknown model {quoted(model)} (served: {known})")


__all__ = ["ZERO_TIMINGS", "ZERO_USAGE", "Answer", "Demand", "AnswerSource", "Features",
           "StoredResult", "TextStream", "charge_wait", "end_wait_account", "new_request_id",
           "start_wait_account", "unknown_model"]
