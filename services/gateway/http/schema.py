"""OpenAI request shapes for the gateway's HTTP front (plain dicts, no transport); the
response, chunk and error bodies are in ``openai_bodies``.

Requests are parsed the way OpenAI parses them: unknown fields are ignored, ``null`` means
"not given", and a known field of the wrong type is refused naming the field. Fields this gateway
cannot honour (log-probabilities, penalties, audio, the deprecated ``functions`` ...) are refused
rather than silently ignored, because ignoring them would change what the caller gets.

Chat messages, tools, ``tool_choice`` and ``response_format`` are parsed in ``http.chat``: one
prompt through :func:`render_chat`, a fixed ChatML rendering, so the same conversation always
renders the same bytes and reuses the same library entry, plus a chat spec for tool calling and
JSON output. ``n`` (at most :data:`MAX_N`) asks for that many choices.

Defaults: ``max_tokens`` is 16 for completions (OpenAI's default) and
:data:`CHAT_DEFAULT_MAX_TOKENS` for chat (OpenAI's "up to the context" would make every default
chat request as long as the model allows); both are clamped to the model's limit. ``temperature``
defaults to 1.0 as in OpenAI, so a request that sets neither ``temperature: 0`` nor ``seed`` is
sampled and never served from, nor stored in, the library.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from services.common.values.chat import ChatSpec
from services.common.values.errors import InvalidArgument
from services.common.values.generation import Sampling
from services.gateway.http.chat import ParsedChat, parse_chat, render_chat

#: ``max_tokens`` when a completion request sets none (OpenAI's default).
COMPLETION_DEFAULT_MAX_TOKENS = 16
#: ``max_tokens`` when a chat request sets none (clamped to the model's limit).
CHAT_DEFAULT_MAX_TOKENS = 256
#: OpenAI accepts at most four stop sequences.
MAX_STOP = 4
MAX_STOP_CHARS = 256
MAX_SEED = (1 << 64) - 1
#: Most choices one request may ask for.
MAX_N = 16


class Endpoint(enum.Enum):
    """The two generation endpoints."""

    CHAT = "chat.completion"
    COMPLETION = "text_completion"

    @property
    def id_prefix(self) -> str:
        """Prefix of response ids (``chatcmpl-`` / ``cmpl-``)."""
        return "chatcmpl-" if self is Endpoint.CHAT else "cmpl-"


_KINDS: dict[str, Callable[[Any], bool]] = {
    "a string": lambda v: isinstance(v, str),
    "an integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "a number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "a boolean": lambda v: isinstance(v, bool),
    "an object": lambda v: isinstance(v, dict),
}

#: Known fields whose non-default values this gateway cannot honour.
_UNSUPPORTED: dict[str, Callable[[Any], bool]] = {
    "logprobs": lambda v: v not in (None, False, 0),
    "top_logprobs": lambda v: v not in (None, 0),
    "echo": lambda v: v not in (None, False),
    "best_of": lambda v: v not in (None, 1),
    "suffix": lambda v: v not in (None, ""),
    "presence_penalty": lambda v: v not in (None, 0),
    "frequency_penalty": lambda v: v not in (None, 0),
    "logit_bias": bool,
    "functions": bool,
    "function_call": lambda v: v is not None,
    "audio": lambda v: v is not None,
    "modalities": lambda v: v not in (None, ["text"]),
    "prediction": lambda v: v is not None,
    "web_search_options": lambda v: v is not None,
    "reasoning_effort": lambda v: v is not None,
    "verbosity": lambda v: v is not None,
}
#: Chat-only fields a completion request may not carry.
_CHAT_ONLY = ("tools", "tool_choice", "parallel_tool_calls", "response_format")


def _json_type(value: Any) -> str:
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
             dict: "object", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _field(body: Mapping[str, Any], name: str, kind: str, default: Any = None) -> Any:
    """``body[name]`` checked against ``kind`` (one of ``_KINDS``); null or absent → default."""
    value = body.get(name)
    if value is None:
        return default
    if not _KINDS[kind](value):
        raise InvalidArgument(name, f"must be {kind}, got {_json_type(value)}")
    return value


@dataclass(frozen=True, slots=True)
class WorkflowContext:
    """Template context of a tagged request (the ``dynbranch`` body extension)."""

    inputs: tuple[tuple[str, str], ...] = ()
    outputs: tuple[tuple[str, str], ...] = ()
    offered: tuple[str, ...] = ()
    observation: str = ""


@dataclass(frozen=True, slots=True)
class ApiRequest:
    """One parsed generation request, before the gateway's limits are applied."""

    endpoint: Endpoint
    model: str
    prompt: str
    stream: bool
    include_usage: bool
    max_tokens: int | None
    temperature: float
    top_p: float
    top_k: int
    seed: int | None
    stop: tuple[str, ...]
    ignore_eos: bool
    #: The field ``max_tokens`` came from (``max_completion_tokens`` for newer chat clients).
    max_tokens_field: str = "max_tokens"
    #: Template context from the ``dynbranch`` body extension (``extra_body`` in the SDK).
    context: WorkflowContext = WorkflowContext()
    #: Choices asked for (``n``).
    n: int = 1
    #: Tool calling or JSON output (chat only).
    chat_spec: ChatSpec | None = None
    #: The parsed conversation (chat only): last tool result, last called functions.
    conversation: ParsedChat | None = None

    @property
    def chat(self) -> bool:
        """Whether this is a chat request."""
        return self.endpoint is Endpoint.CHAT

    def sampling(self, max_tokens_limit: int) -> Sampling:
        """Sampling parameters, ``max_tokens`` checked against the model's limit."""
        default = (CHAT_DEFAULT_MAX_TOKENS if self.chat else COMPLETION_DEFAULT_MAX_TOKENS)
        max_tokens = self.max_tokens
        if max_tokens is None:
            max_tokens = min(default, max_tokens_limit)
        elif max_tokens < 1:
            raise InvalidArgument(self.max_tokens_field, f"must be >= 1, got {max_tokens}")
        elif max_tokens > max_tokens_limit:
            raise InvalidArgument(self.max_tokens_field,
                                  f"must be <= {max_tokens_limit}, got {max_tokens}")
        return Sampling(max_tokens=max_tokens, temperature=self.temperature, top_p=self.top_p,
                        top_k=self.top_k, seed=self.seed, stop=self.stop,
                        ignore_eos=self.ignore_eos)


def _strings(where: str, value: Any, mapping: bool) -> Any:
    if mapping:
        if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            raise InvalidArgument(where, "must be an object of strings")
        return tuple(sorted(value.items()))
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise InvalidArgument(where, "must be a list of non-empty strings")
    return tuple(value)


def parse_context(body: Mapping[str, Any]) -> WorkflowContext:
    """The ``dynbranch`` extension object: template inputs, upstream outputs, offered
    candidates and the latest observation (what the gRPC ``StageDemand`` carries)."""
    ext = _field(body, "dynbranch", "an object", {})
    unknown = sorted(set(ext) - {"inputs", "outputs", "offered", "observation"})
    if unknown:
        raise InvalidArgument(f"dynbranch.{unknown[0]}", "unknown field")
    return WorkflowContext(
        inputs=_strings("dynbranch.inputs", ext.get("inputs", {}), True),
        outputs=_strings("dynbranch.outputs", ext.get("outputs", {}), True),
        offered=_strings("dynbranch.offered", ext.get("offered", []), False),
        observation=_field(ext, "observation", "a string", ""))


def parse_request(body: Any, endpoint: Endpoint) -> ApiRequest:
    """Validate a decoded JSON body; errors name the offending field."""
    if not isinstance(body, dict):
        raise InvalidArgument("body", f"must be a JSON object, got {_json_type(body)}")
    for name, unsupported in _UNSUPPORTED.items():
        if unsupported(body.get(name)):
            raise InvalidArgument(name, "is not supported by this gateway")
    n = _field(body, "n", "an integer", 1)
    if not 1 <= n <= MAX_N:
        raise InvalidArgument("n", f"must be in [1, {MAX_N}], got {n}")
    _field(body, "user", "a string")  # accepted and ignored, as OpenAI ignores it for output
    stream = _field(body, "stream", "a boolean", False)
    options = _field(body, "stream_options", "an object", {})
    max_tokens, max_tokens_field = _max_tokens(body, endpoint)
    conversation = None
    if endpoint is Endpoint.CHAT:
        conversation = parse_chat(body)
        prompt = conversation.prompt
    else:
        for name in _CHAT_ONLY:
            if body.get(name) is not None:
                raise InvalidArgument(name, "is supported on /v1/chat/completions only")
        prompt = _prompt(body.get("prompt"))
    return ApiRequest(
        n=n, chat_spec=conversation.spec if conversation else None, conversation=conversation,
        endpoint=endpoint, model=_field(body, "model", "a string", ""), prompt=prompt,
        stream=stream, include_usage=_field(options, "include_usage", "a boolean", False),
        max_tokens=max_tokens, max_tokens_field=max_tokens_field,
        temperature=_ranged(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_ranged(body, "top_p", 1.0, 0.0, 1.0, low_open=True),
        top_k=_top_k(body), seed=_seed(body), stop=_stop(body.get("stop")),
        ignore_eos=_field(body, "ignore_eos", "a boolean", False),
        context=parse_context(body))


def _max_tokens(body: Mapping[str, Any], endpoint: Endpoint) -> tuple[int | None, str]:
    value = _field(body, "max_tokens", "an integer")
    if endpoint is Endpoint.CHAT:
        newer = _field(body, "max_completion_tokens", "an integer")
        if newer is not None:
            return newer, "max_completion_tokens"
    return value, "max_tokens"


def _ranged(body: Mapping[str, Any], name: str, default: float, low: float, high: float,
            low_open: bool = False) -> float:
    value = float(_field(body, name, "a number", default))
    if not (low < value if low_open else low <= value) or not value <= high:
        bracket = "(" if low_open else "["
        raise InvalidArgument(name, f"must be in {bracket}{low:g}, {high:g}], got {value:g}")
    return value


def _top_k(body: Mapping[str, Any]) -> int:
    value = _field(body, "top_k", "an integer", 0)  # vLLM's extension; -1 also means "off"
    if value < -1:
        raise InvalidArgument("top_k", f"must be >= -1, got {value}")
    return max(value, 0)


def _seed(body: Mapping[str, Any]) -> int | None:
    value = _field(body, "seed", "an integer")
    if value is not None and not 0 <= value <= MAX_SEED:
        raise InvalidArgument("seed", f"must be in [0, 2^64), got {value}")
    return value


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise InvalidArgument("stop", "must be a string or an array of strings")
    if len(stops) > MAX_STOP or any(not s or len(s) > MAX_STOP_CHARS for s in stops):
        raise InvalidArgument("stop", f"at most {MAX_STOP} non-empty strings of at most "
                                      f"{MAX_STOP_CHARS} characters")
    return tuple(stops)


def _prompt(value: Any) -> str:
    if value is None:
        raise InvalidArgument("prompt", "required")
    if isinstance(value, list):
        if len(value) != 1:
            raise InvalidArgument("prompt", f"exactly one prompt is supported, got {len(value)}")
        value = value[0]
    if not isinstance(value, str):
        raise InvalidArgument("prompt", "must be a string (token-id prompts are not supported)")
    return value


__all__ = ["CHAT_DEFAULT_MAX_TOKENS", "COMPLETION_DEFAULT_MAX_TOKENS", "MAX_N", "ApiRequest",
           "Endpoint", "parse_request", "render_chat"]
