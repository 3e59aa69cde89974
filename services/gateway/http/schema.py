"""OpenAI chat and completion requests for the gateway's HTTP front (plain dicts, no
transport), parsed into the front's one arrival representation (``http.arrival``); the response,
chunk and error bodies are in ``http.bodies``.

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

from collections.abc import Callable, Mapping
from typing import Any

from services.common.values.errors import InvalidArgument
from services.gateway.http.arrival import (
    CHAT_DEFAULT_MAX_TOKENS,
    MAX_SEED,
    Arrival,
    Endpoint,
    WorkflowContext,
    field_of,
    json_type,
    parse_context,
    ranged,
    refuse,
    seed_of,
    stops_of,
    top_k_of,
)
from services.gateway.http.chat import parse_chat, render_chat

#: ``max_tokens`` when a completion request sets none (OpenAI's default).
COMPLETION_DEFAULT_MAX_TOKENS = 16
#: OpenAI accepts at most four stop sequences.
MAX_STOP = 4
MAX_STOP_CHARS = 256
#: Most choices one request may ask for.
MAX_N = 16
#: The arrival of a chat or completion request (the name this module always gave it).
ApiRequest = Arrival

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


#: OpenAI's chat completions and completions (their answers: ``bodies``; streams: ``stream``).
CHAT = Endpoint("chat.completion", "/v1/chat/completions", "openai_chat", "chatcmpl-",
                "messages", chat=True)
COMPLETION = Endpoint("text_completion", "/v1/completions", "openai_completions", "cmpl-",
                      "prompt")


def parse_request(body: Any, endpoint: Endpoint) -> ApiRequest:
    """Validate a decoded JSON body; errors name the offending field."""
    if not isinstance(body, dict):
        raise InvalidArgument("body", f"must be a JSON object, got {json_type(body)}")
    refuse(body, _UNSUPPORTED)
    n = field_of(body, "n", "an integer", 1)
    if not 1 <= n <= MAX_N:
        raise InvalidArgument("n", f"must be in [1, {MAX_N}], got {n}")
    field_of(body, "user", "a string")  # accepted and ignored, as OpenAI ignores it for output
    stream = field_of(body, "stream", "a boolean", False)
    options = field_of(body, "stream_options", "an object", {})
    max_tokens, max_tokens_field = _max_tokens(body, endpoint)
    conversation = None
    if endpoint.chat:
        conversation = parse_chat(body)
        prompt = conversation.prompt
    else:
        for name in _CHAT_ONLY:
            if body.get(name) is not None:
                raise InvalidArgument(name, "is supported on /v1/chat/completions only")
        prompt = _prompt(body.get("prompt"))
    return Arrival(
        n=n, conversation=conversation,
        default_max_tokens=(CHAT_DEFAULT_MAX_TOKENS if endpoint.chat
                            else COMPLETION_DEFAULT_MAX_TOKENS),
        endpoint=endpoint, model=field_of(body, "model", "a string", ""), prompt=prompt,
        stream=stream, include_usage=field_of(options, "include_usage", "a boolean", False),
        max_tokens=max_tokens, max_tokens_field=max_tokens_field,
        temperature=ranged(body, "temperature", 1.0, 0.0, 2.0),
        top_p=ranged(body, "top_p", 1.0, 0.0, 1.0, low_open=True),
        top_k=top_k_of(body), seed=seed_of(body),
        stop=stops_of("stop", body.get("stop"), MAX_STOP, MAX_STOP_CHARS),
        ignore_eos=field_of(body, "ignore_eos", "a boolean", False),
        context=parse_context(body))


def _max_tokens(body: Mapping[str, Any], endpoint: Endpoint) -> tuple[int | None, str]:
    value = field_of(body, "max_tokens", "an integer")
    if endpoint.chat:
        newer = field_of(body, "max_completion_tokens", "an integer")
        if newer is not None:
            return newer, "max_completion_tokens"
    return value, "max_tokens"


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


__all__ = ["CHAT", "CHAT_DEFAULT_MAX_TOKENS", "COMPLETION", "COMPLETION_DEFAULT_MAX_TOKENS",
           "MAX_N", "MAX_SEED", "ApiRequest", "Endpoint", "WorkflowContext", "parse_context",
           "parse_request", "render_chat"]
