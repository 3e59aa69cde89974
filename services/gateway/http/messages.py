"""Anthropic's Messages API (``POST /v1/messages``, ``POST /v1/messages/count_tokens``) on the
gateway's HTTP front: requests normalized into the front's arrival (``http.arrival``), answers,
streamed events and errors rendered back in Anthropic's shapes (plain dicts).

``system`` becomes a leading system message, a ``tool_use`` block a tool call of its assistant
turn (``input`` as canonical JSON arguments), each ``tool_result`` block a ``tool`` message
(before the user turn's text, as Anthropic requires them first), ``tools`` with
``input_schema`` chat function tools, and ``tool_choice`` ``auto``/``any``/``tool``/``none`` the
chat choices ``auto``/``required``/a named function/``none``; the conversation is then rendered
and specced by ``http.chat.conversation`` like a chat request's, so it has the same prompt and
reuse name as the same conversation sent as chat; ``output_config.format`` is chat's
``json_schema`` response format. ``cache_control`` is accepted and ignored (engines cache
prefixes on their own); images, documents, thinking, effort and server tools are refused by
name, and so is a ``count_tokens`` field that endpoint does not take (``max_tokens``, say).
Sampling: ``temperature`` defaults to 1.0 as in Anthropic's API (newer Anthropic clients no
longer send it; pass ``extra_body={"temperature": 0}`` for a reusable deterministic answer).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from services.common.runtime.convert import MAX_STOP_CHARS, MAX_STOP_STRINGS
from services.common.values.chat import ToolChoice, canonical_json, schema_problem
from services.common.values.errors import (
    DeadlineExceeded,
    DynbranchError,
    InvalidArgument,
    NotFound,
    PayloadTooLarge,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    quoted,
)
from services.common.values.generation import FinishReason
from services.gateway.http.arrival import (
    Arrival,
    Endpoint,
    field_of,
    json_type,
    parse_context,
    ranged,
    refuse,
    required_string,
    stops_of,
    top_k_of,
)
from services.gateway.http.bodies import ARGUMENT_FRAGMENT_CHARS, BodyTooLarge, param_of
from services.gateway.http.chat import ParsedChat, answered, conversation, function_tool
from services.gateway.http.stream import Item, named_sse, one_choice, unsent
from services.gateway.values import Answer

log = logging.getLogger(__name__)

#: Known fields whose values this gateway cannot honour.
_UNSUPPORTED: dict[str, Callable[[Any], bool]] = {
    "thinking": lambda v: v is not None and not (isinstance(v, dict)
                                                 and v.get("type") == "disabled"),
    "container": lambda v: v is not None,
    "mcp_servers": bool,
    "context_management": lambda v: v is not None,
}
#: The fields a ``count_tokens`` request may hold (Anthropic's endpoint takes these and refuses
#: any other, e.g. ``max_tokens``, by name); thinking, MCP servers and context management only
#: in their "off" values, as for a Messages request.
_COUNT_FIELDS = ("model", "messages", "system", "tools", "tool_choice", "thinking",
                 "mcp_servers", "context_management", "output_config")
_CHOICES = {"auto": ToolChoice.AUTO, "any": ToolChoice.REQUIRED, "tool": ToolChoice.FUNCTION,
            "none": ToolChoice.NONE}
#: Anthropic's Messages endpoint (its ``count_tokens`` route is the front's, beside it).
MESSAGES = Endpoint("message", "/v1/messages", "anthropic_messages", "msg_", "messages",
                    api_key_header=True)


# -- requests ---------------------------------------------------------------------------------


def parse_messages(body: Any) -> Arrival:
    """Validate a Messages request; errors name the offending field."""
    parsed = _conversation(body)
    max_tokens = field_of(body, "max_tokens", "an integer")
    if max_tokens is None:
        raise InvalidArgument("max_tokens", "required")
    metadata = field_of(body, "metadata", "an object", {})
    field_of(metadata, "user_id", "a string", where="metadata.")
    for hint in ("service_tier", "speed", "inference_geo", "user_profile_id", "workspace_id"):
        field_of(body, hint, "a string")  # hints: accepted, they change no output
    stops = body.get("stop_sequences")
    if stops is not None and not isinstance(stops, list):
        raise InvalidArgument("stop_sequences", "must be an array of strings")
    return Arrival(
        endpoint=MESSAGES, model=field_of(body, "model", "a string", ""),
        prompt=parsed.prompt, stream=field_of(body, "stream", "a boolean", False),
        include_usage=False, max_tokens=max_tokens,
        temperature=ranged(body, "temperature", 1.0, 0.0, 1.0),
        top_p=ranged(body, "top_p", 1.0, 0.0, 1.0, low_open=True), top_k=top_k_of(body),
        seed=None, stop=stops_of("stop_sequences", stops, MAX_STOP_STRINGS, MAX_STOP_CHARS),
        ignore_eos=False, context=parse_context(body), conversation=parsed)


def parse_count(body: Any) -> Arrival:
    """A ``count_tokens`` request: the conversation of a Messages request, counted by a greedy
    one-token generation (its prompt tokens are the engine tokenizer's count). A field that is
    not one of ``_COUNT_FIELDS`` is refused by name, as Anthropic's API does."""
    extra = sorted(k for k in body if k not in _COUNT_FIELDS) if isinstance(body, dict) else ()
    if extra:
        raise InvalidArgument(extra[0], f"Extra inputs are not permitted (count_tokens takes "
                                        f"{', '.join(_COUNT_FIELDS)})")
    parsed = _conversation(body)
    return Arrival(endpoint=MESSAGES, model=field_of(body, "model", "a string", ""),
                   prompt=parsed.prompt, stream=False, include_usage=False, max_tokens=1,
                   temperature=0.0, top_p=1.0, top_k=0, seed=None, stop=(), ignore_eos=False,
                   conversation=parsed)


def _conversation(body: Any) -> ParsedChat:
    """``system``, ``messages``, ``tools`` and ``tool_choice`` as one normalized conversation."""
    if not isinstance(body, dict):
        raise InvalidArgument("body", f"must be a JSON object, got {json_type(body)}")
    refuse(body, _UNSUPPORTED)
    messages = _system(body.get("system"))
    value = body.get("messages")
    if not isinstance(value, list) or not value:
        raise InvalidArgument("messages", "must be a non-empty array of messages")
    called: set[str] = set()
    for i, message in enumerate(value):
        messages += _message(f"messages[{i}]", message, called)
    names: set[str] = set()
    tools = [_tool(i, t, names) for i, t in enumerate(field_of(body, "tools", "an array", []))]
    choice, name, parallel = _tool_choice(body.get("tool_choice"), names)
    return conversation(messages, tools, choice, name, parallel, _format(body))


def _format(body: dict[str, Any]) -> dict[str, Any] | None:
    """``output_config.format`` (structured outputs) as a normalized chat response format."""
    config = field_of(body, "output_config", "an object", {})
    if config.get("effort") is not None:
        raise InvalidArgument("output_config.effort", "is not supported by this gateway")
    fmt = field_of(config, "format", "an object", None, where="output_config.")
    if fmt is None:
        return None
    if fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise InvalidArgument("output_config.format", "must be {'type': 'json_schema', "
                                                      "'schema': {...}}")
    problem = schema_problem(fmt["schema"])
    if problem is not None:
        raise InvalidArgument("output_config.format.schema", problem)
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt["schema"]}}


def _system(value: Any) -> list[dict[str, Any]]:
    if value is None or value == "":
        return []
    text = value if isinstance(value, str) else _texts("system", value)
    return [{"role": "system", "content": text}]


def _texts(where: str, blocks: Any) -> str:
    """Text blocks joined as chat joins text parts; other blocks are refused by name."""
    if not isinstance(blocks, list):
        raise InvalidArgument(where, "must be a string or an array of text blocks")
    texts = []
    for j, block in enumerate(blocks):
        if not isinstance(block, dict) or block.get("type") != "text":
            raise InvalidArgument(f"{where}[{j}].type", "only 'text' blocks are supported here")
        texts.append(required_string(block, "text", f"{where}[{j}]", empty=True))
    return "\n".join(texts)


def _message(where: str, message: Any, called: set[str]) -> list[dict[str, Any]]:
    """One Anthropic message as normalized chat messages (a user turn with tool results is
    one ``tool`` message per result, then its text); ``called`` collects the ``tool_use`` ids
    so far, which every ``tool_result`` must answer."""
    if not isinstance(message, dict):
        raise InvalidArgument(where, f"must be an object, got {json_type(message)}")
    role = message.get("role")
    if role not in ("user", "assistant"):
        raise InvalidArgument(f"{where}.role", "must be 'user' or 'assistant'")
    content = message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise InvalidArgument(f"{where}.content", "must be a string or an array of blocks")
    allowed = ("text", "tool_use") if role == "assistant" else ("text", "tool_result")
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        at = f"{where}.content[{j}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind not in allowed:
            raise InvalidArgument(f"{at}.type", f"{role} blocks may be "
                                                f"{' or '.join(map(repr, allowed))}")
        if kind == "text":
            texts.append(required_string(block, "text", at, empty=True))
        elif kind == "tool_use":
            args = block.get("input")
            if not isinstance(args, dict):
                raise InvalidArgument(f"{at}.input", "must be an object")
            calls.append({"id": required_string(block, "id", at), "type": "function",
                          "function": {"name": required_string(block, "name", at),
                                       "arguments": canonical_json(args)}})
            called.add(calls[-1]["id"])
        else:
            use_id = required_string(block, "tool_use_id", at)
            answered(called, use_id, f"{at}.tool_use_id")
            results.append({"role": "tool", "content": _result(at, block),
                            "tool_call_id": use_id})
    if role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts)}
        if calls:
            out["tool_calls"] = calls
        return [out]
    if texts or not results:
        results.append({"role": "user", "content": "\n".join(texts)})
    return results


def _result(where: str, block: dict[str, Any]) -> str:
    """A tool result's content (an error result is marked, so the model reads it as one)."""
    content = block.get("content", "")
    text = content if isinstance(content, str) else _texts(f"{where}.content", content)
    is_error = field_of(block, "is_error", "a boolean", False, where=f"{where}.")
    return f"Error: {text}" if is_error else text


def _tool(i: int, tool: Any, names: set[str]) -> dict[str, Any]:
    where = f"tools[{i}]"
    if not isinstance(tool, dict) or tool.get("type", "custom") not in ("custom", None):
        raise InvalidArgument(f"{where}.type", "only custom tools (name, description, "
                                               "input_schema) are supported")
    if not isinstance(tool.get("input_schema"), dict):
        raise InvalidArgument(f"{where}.input_schema", "required (a JSON schema object)")
    return function_tool(where, tool, "input_schema", names)


def _tool_choice(value: Any, names: set[str]) -> tuple[ToolChoice, str, bool]:
    if value is None:
        return ToolChoice.AUTO, "", True
    kind = value.get("type") if isinstance(value, dict) else None
    if not isinstance(kind, str) or kind not in _CHOICES:
        raise InvalidArgument("tool_choice.type", "must be 'auto', 'any', 'tool' or 'none'")
    assert isinstance(value, dict)
    parallel = not field_of(value, "disable_parallel_tool_use", "a boolean", False,
                            where="tool_choice.")
    choice, name = _CHOICES[kind], ""
    if choice is not ToolChoice.AUTO and choice is not ToolChoice.NONE and not names:
        raise InvalidArgument("tool_choice", f"{kind!r} needs tools")
    if choice is ToolChoice.FUNCTION:
        named = value.get("name")
        if not isinstance(named, str) or named not in names:
            raise InvalidArgument("tool_choice.name", f"names {quoted(named)}, which is not in "
                                                      f"tools")
        name = named
    return choice, name, parallel


# -- answers ----------------------------------------------------------------------------------


def stop_reason(answer: Answer) -> str:
    """Why the answer ended, as Anthropic names it."""
    if answer.tool_calls:
        return "tool_use"
    if answer.finish_reason is FinishReason.LENGTH:
        return "max_tokens"
    return "stop_sequence" if stop_sequence(answer) else "end_turn"


def stop_sequence(answer: Answer) -> str | None:
    """The stop sequence that ended the answer (None: none did, or the engine did not say)."""
    if answer.tool_calls or answer.finish_reason is not FinishReason.STOP:
        return None
    return answer.stop_string or None


def usage_body(answer: Answer) -> dict[str, Any]:
    """Anthropic's usage: input tokens the engine computed, those it read from its cache."""
    u = answer.usage
    return {"input_tokens": u.prompt_tokens - u.cached_prompt_tokens,
            "output_tokens": u.completion_tokens, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": u.cached_prompt_tokens}


def _input(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return {}  # a backend returns calls only with parsed arguments; never expected


def content_blocks(answer: Answer) -> list[dict[str, Any]]:
    """Its text (unless it only calls tools), then a ``tool_use`` block per call."""
    blocks = ([{"type": "text", "text": answer.text}] if answer.text or not answer.tool_calls
              else [])
    return blocks + [{"type": "tool_use", "id": c.id, "name": c.name,
                      "input": _input(c.arguments)} for c in answer.tool_calls]


def _message_body(req: Arrival, rid: str, answer: Answer | None) -> dict[str, Any]:
    return {"id": rid, "type": "message", "role": "assistant", "model": req.model,
            "content": content_blocks(answer) if answer else [],
            "stop_reason": stop_reason(answer) if answer else None,
            "stop_sequence": stop_sequence(answer) if answer else None,
            "usage": usage_body(answer) if answer else {"input_tokens": 0, "output_tokens": 0}}


def message_body(req: Arrival, rid: str, created: int, answers: Sequence[Answer]
                 ) -> dict[str, Any]:
    """The Message of a finished answer."""
    return _message_body(req, rid, answers[0])


async def message_events(req: Arrival, rid: str, created: int, first: Item, queue: Any,
                         choices: Sequence[Any]) -> AsyncIterator[bytes]:
    """``message_start``, per content block ``content_block_start``, its ``text_delta`` or
    ``input_json_delta`` deltas and ``content_block_stop``, then ``message_delta`` (stop
    reason, usage) and ``message_stop``. A request that may call tools streams its text at the
    end, since only the finished output tells text from a call."""
    def event(kind: str, **fields: Any) -> bytes:
        return named_sse({"type": kind, **fields})

    hold = req.chat_spec is not None and req.chat_spec.may_call
    sent: list[str] = []
    try:
        yield event("message_start", message=_message_body(req, rid, None))
        answer: Answer | None = None
        async for piece in one_choice(first, queue, choices[0]):
            if isinstance(piece, Answer):
                answer = piece
                break
            if hold:
                continue
            if not sent:
                yield event("content_block_start", index=0,
                            content_block={"type": "text", "text": ""})
            sent.append(piece)
            yield event("content_block_delta", index=0,
                        delta={"type": "text_delta", "text": piece})
        assert answer is not None  # one_choice ends with the answer or raises
        text_block = bool(answer.text or not answer.tool_calls)
        if text_block:
            if not sent:
                yield event("content_block_start", index=0,
                            content_block={"type": "text", "text": ""})
            rest = unsent(answer.text, "".join(sent), rid) if sent else answer.text
            if rest:
                yield event("content_block_delta", index=0,
                            delta={"type": "text_delta", "text": rest})
            yield event("content_block_stop", index=0)
        for k, call in enumerate(answer.tool_calls, start=int(text_block)):
            yield event("content_block_start", index=k, content_block={
                "type": "tool_use", "id": call.id, "name": call.name, "input": {}})
            args = canonical_json(_input(call.arguments))
            step = ARGUMENT_FRAGMENT_CHARS
            for i in range(0, len(args), step):
                yield event("content_block_delta", index=k, delta={
                    "type": "input_json_delta", "partial_json": args[i:i + step]})
            yield event("content_block_stop", index=k)
        yield event("message_delta", delta={"stop_reason": stop_reason(answer),
                                            "stop_sequence": stop_sequence(answer)},
                    usage=usage_body(answer))
        yield event("message_stop")
    except DynbranchError as exc:  # after the first byte the status is sent: report inline
        status, body = error_status(exc)
        if status == 500:
            log.error("http: stream %s: internal error: %s", rid, exc, exc_info=exc)
        yield named_sse(body)
    except Exception:  # the detail goes to the log, never to the client
        log.exception("http: stream %s failed", rid)
        yield named_sse(INTERNAL_ERROR)


# -- errors -----------------------------------------------------------------------------------


def error_body(type_: str, message: str) -> dict[str, Any]:
    """Anthropic's error shape."""
    return {"type": "error", "error": {"type": type_, "message": message}}


INTERNAL_ERROR = error_body("api_error", "internal error")

#: Error class → (HTTP status, Anthropic error type); most specific class first.
_ERRORS: tuple[tuple[type[DynbranchError], int, str], ...] = (
    (BodyTooLarge, 413, "request_too_large"),
    (PayloadTooLarge, 400, "invalid_request_error"),
    (InvalidArgument, 400, "invalid_request_error"),
    (Unauthenticated, 401, "authentication_error"),
    (NotFound, 404, "not_found_error"),
    (ResourceExhausted, 529, "overloaded_error"),
    (Unavailable, 503, "api_error"),
    (DeadlineExceeded, 504, "timeout_error"),
)


def error_status(exc: DynbranchError) -> tuple[int, dict[str, Any]]:
    """HTTP status and Anthropic error body for ``exc`` (500 ``api_error`` with a generic
    message unless the error is one a client may see); a field error names the field."""
    found = next((row for row in _ERRORS if isinstance(exc, row[0])), None)
    if found is None or not exc.client_visible:
        return 500, INTERNAL_ERROR
    _, status, type_ = found
    message = exc.client_message()
    if isinstance(exc, InvalidArgument):
        param = param_of(exc.field, MESSAGES)
        message = f"{param}: {message.removeprefix(f'{exc.field}: ')}"
    return status, error_body(type_, message)


__all__ = ["INTERNAL_ERROR", "MESSAGES", "content_blocks", "error_body", "error_status",
           "message_body", "message_events", "parse_count", "parse_messages", "stop_reason",
           "stop_sequence", "usage_body"]
