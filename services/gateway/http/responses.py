"""The OpenAI Responses API (``POST /v1/responses``) on the gateway's HTTP front: requests
normalized into the front's arrival (``http.arrival``), answers and streamed events rendered
back (plain dicts).

``input`` (a string, or ``message``, ``function_call`` and ``function_call_output`` items) and
``instructions`` become OpenAI chat messages (the instructions a leading system message, a
``function_call`` item a tool call of the assistant turn before it, its output a ``tool``
message), function ``tools`` become chat tools, and ``text.format`` a response format; the
conversation is then rendered and specced by ``http.chat.conversation`` like a chat request's,
so it has the same prompt and reuse name as the same conversation sent as chat.

Responses are not stored: ``store: true`` and ``previous_response_id`` are refused with 400
naming the field (send the whole conversation in ``input``), as are the fields this gateway
cannot honour (reasoning, hosted tools, background runs, log-probabilities ...).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from services.common.values.chat import schema_problem
from services.common.values.errors import DynbranchError, InvalidArgument
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
    seed_of,
    top_k_of,
)
from services.gateway.http.bodies import ARGUMENT_FRAGMENT_CHARS, INTERNAL_ERROR, error_status
from services.gateway.http.chat import answered, conversation, function_tool, tool_choice
from services.gateway.http.stream import Item, named_sse, one_choice, unsent
from services.gateway.values import Answer

log = logging.getLogger(__name__)

#: Known fields whose non-default values this gateway cannot honour.
_UNSUPPORTED: dict[str, Callable[[Any], bool]] = {
    "background": lambda v: v not in (None, False),
    "reasoning": lambda v: v not in (None, {}) and not (
        isinstance(v, dict) and all(x is None for x in v.values())),
    "include": bool,
    "top_logprobs": lambda v: v not in (None, 0),
    "truncation": lambda v: v not in (None, "disabled"),
    "prompt": lambda v: v is not None,
    "conversation": lambda v: v is not None,
    "max_tool_calls": lambda v: v is not None,
}
_ROLES = frozenset({"user", "assistant", "system", "developer"})
MAX_METADATA = 16
#: The Responses API's endpoint.
RESPONSES = Endpoint("response", "/v1/responses", "openai_responses", "resp_", "input")


# -- requests ---------------------------------------------------------------------------------


def parse_responses(body: Any) -> Arrival:
    """Validate a Responses request; errors name the offending field."""
    if not isinstance(body, dict):
        raise InvalidArgument("body", f"must be a JSON object, got {json_type(body)}")
    if body.get("store") is True:
        raise InvalidArgument("store", "responses are not stored by this gateway; send "
                                       "store: false and the whole conversation in input")
    if body.get("previous_response_id") is not None:
        raise InvalidArgument("previous_response_id", "responses are not stored by this "
                                                      "gateway; send the whole conversation "
                                                      "in input")
    refuse(body, _UNSUPPORTED)
    for name in ("user", "safety_identifier", "prompt_cache_key", "service_tier"):
        field_of(body, name, "a string")  # hints: accepted, they change no output
    messages = _input(body.get("input"))
    instructions = field_of(body, "instructions", "a string")
    if instructions:
        messages.insert(0, {"role": "system", "content": instructions})
    names: set[str] = set()
    tools = [_tool(i, t, names) for i, t in enumerate(field_of(body, "tools", "an array", []))]
    choice, name = tool_choice(_chat_choice(body.get("tool_choice")), tools)
    parallel = field_of(body, "parallel_tool_calls", "a boolean", True)
    text = field_of(body, "text", "an object", {})
    if text.get("verbosity") is not None:
        raise InvalidArgument("text.verbosity", "is not supported by this gateway")
    fmt = _format(field_of(text, "format", "an object", None, where="text."))
    parsed = conversation(messages, tools, choice, name, parallel, fmt)
    metadata = field_of(body, "metadata", "an object", {})
    if len(metadata) > MAX_METADATA or not all(isinstance(v, str) for v in metadata.values()):
        raise InvalidArgument("metadata", f"at most {MAX_METADATA} string values")
    echo = {"instructions": instructions, "metadata": metadata,
            "parallel_tool_calls": parallel, "tools": field_of(body, "tools", "an array", []),
            "tool_choice": body.get("tool_choice") or "auto",
            "text": {"format": text.get("format") or {"type": "text"}}}
    return Arrival(
        endpoint=RESPONSES, model=field_of(body, "model", "a string", ""),
        prompt=parsed.prompt, stream=field_of(body, "stream", "a boolean", False),
        include_usage=False, max_tokens=field_of(body, "max_output_tokens", "an integer"),
        max_tokens_field="max_output_tokens",
        temperature=ranged(body, "temperature", 1.0, 0.0, 2.0),
        top_p=ranged(body, "top_p", 1.0, 0.0, 1.0, low_open=True), top_k=top_k_of(body),
        seed=seed_of(body), stop=(), ignore_eos=False, context=parse_context(body),
        conversation=parsed, echo=echo)


def _input(value: Any) -> list[dict[str, Any]]:
    """``input`` as normalized chat messages."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise InvalidArgument("input", "must be a string or a non-empty array of items")
    messages: list[dict[str, Any]] = []
    called: set[str] = set()
    for i, item in enumerate(value):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise InvalidArgument(where, f"must be an object, got {json_type(item)}")
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            messages.append(_message(where, item))
        elif kind == "function_call":
            call: dict[str, Any] = {
                "id": required_string(item, "call_id", where), "type": "function",
                "function": {"name": required_string(item, "name", where),
                             "arguments": field_of(item, "arguments", "a string", "",
                                                   where=f"{where}.")}}
            last = messages[-1] if messages else None
            if last is None or last["role"] != "assistant":  # its own assistant turn
                last = {"role": "assistant", "content": ""}
                messages.append(last)
            last.setdefault("tool_calls", []).append(call)
            called.add(call["id"])
        elif kind == "function_call_output":
            call_id = required_string(item, "call_id", where)
            answered(called, call_id, f"{where}.call_id")
            messages.append({"role": "tool", "content": _output(where, item.get("output")),
                             "tool_call_id": call_id})
        else:
            raise InvalidArgument(f"{where}.type", "only 'message', 'function_call' and "
                                                   "'function_call_output' items are supported")
    return messages


def _message(where: str, item: dict[str, Any]) -> dict[str, Any]:
    role = item.get("role")
    if not isinstance(role, str) or role not in _ROLES:
        raise InvalidArgument(f"{where}.role", f"must be one of {', '.join(sorted(_ROLES))}")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list):
        raise InvalidArgument(f"{where}.content", "must be a string or an array of text parts")
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in ("input_text", "output_text"):
            raise InvalidArgument(f"{where}.content[{j}].type", "only 'input_text' and "
                                                                "'output_text' parts are "
                                                                "supported")
        texts.append(field_of(part, "text", "a string", "", where=f"{where}.content[{j}]."))
    return {"role": role, "content": "\n".join(texts)}  # as chat joins text parts


def _output(where: str, value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, dict) and p.get("type") == "input_text"
                                       and isinstance(p.get("text"), str) for p in value):
        return "\n".join(p["text"] for p in value)
    raise InvalidArgument(f"{where}.output", "must be a string or an array of input_text parts")


def _tool(i: int, tool: Any, names: set[str]) -> dict[str, Any]:
    where = f"tools[{i}]"
    if not isinstance(tool, dict) or tool.get("type") != "function":
        raise InvalidArgument(f"{where}.type", "only 'function' tools are supported")
    return function_tool(where, tool, "parameters", names)


def _chat_choice(value: Any) -> Any:
    """A Responses ``tool_choice`` in chat's spelling (``{"type": "function", "name": ...}``
    → ``{"type": "function", "function": {"name": ...}}``)."""
    if isinstance(value, dict):
        if value.get("type") != "function":
            raise InvalidArgument("tool_choice", "must be 'auto', 'none', 'required' or "
                                                 "{'type': 'function', 'name': ...}")
        return {"type": "function", "function": {"name": value.get("name")}}
    return value


def _format(value: Any) -> dict[str, Any] | None:
    """``text.format`` as a normalized chat response format."""
    kind = value.get("type") if value is not None else "text"
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind != "json_schema":
        raise InvalidArgument("text.format.type", "must be 'text', 'json_object' or "
                                                  "'json_schema'")
    assert value is not None
    if not isinstance(value.get("name"), str):
        raise InvalidArgument("text.format.name", "required")
    problem = None if value.get("schema") is None else schema_problem(value["schema"])
    if problem is not None:
        raise InvalidArgument("text.format.schema", problem)
    return {"type": "json_schema", "json_schema": {
        k: value[k] for k in ("name", "schema", "strict", "description") if k in value}}


# -- answers ----------------------------------------------------------------------------------


def _incomplete(answer: Answer) -> bool:
    return answer.finish_reason is FinishReason.LENGTH and not answer.tool_calls


def _message_item(rid: str, text: str, done: bool = True) -> dict[str, Any]:
    part = [{"type": "output_text", "text": text, "annotations": []}] if done else []
    return {"id": f"msg_{rid.removeprefix('resp_')}", "type": "message", "role": "assistant",
            "status": "completed" if done else "in_progress", "content": part}


def _call_item(call_id: str, name: str, arguments: str, done: bool = True) -> dict[str, Any]:
    return {"id": f"fc_{call_id}", "type": "function_call", "call_id": call_id, "name": name,
            "arguments": arguments, "status": "completed" if done else "in_progress"}


def output_items(rid: str, answer: Answer) -> list[dict[str, Any]]:
    """The output items of an answer: its text (unless it only calls tools), then its calls."""
    items = [_message_item(rid, answer.text)] if answer.text or not answer.tool_calls else []
    return items + [_call_item(c.id, c.name, c.arguments) for c in answer.tool_calls]


def response_body(req: Arrival, rid: str, created: int, answers: Sequence[Answer]
                  ) -> dict[str, Any]:
    """The Response object of a finished answer."""
    return _response(req, rid, created, answers[0])


def _response(req: Arrival, rid: str, created: int, answer: Answer | None) -> dict[str, Any]:
    """A Response object; ``answer`` None: the in-progress snapshot streams start with."""
    status, usage, output, details = "in_progress", None, [], None
    if answer is not None:
        incomplete = _incomplete(answer)
        status = "incomplete" if incomplete else "completed"
        details = {"reason": "max_output_tokens"} if incomplete else None
        output = output_items(rid, answer)
        u = answer.usage
        usage = {"input_tokens": u.prompt_tokens,
                 "input_tokens_details": {"cached_tokens": u.cached_prompt_tokens},
                 "output_tokens": u.completion_tokens,
                 "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": u.prompt_tokens + u.completion_tokens}
    return {"id": rid, "object": "response", "created_at": created, "status": status,
            "error": None, "incomplete_details": details, "model": req.model,
            "output": output, "max_output_tokens": req.max_tokens,
            "previous_response_id": None, "reasoning": {"effort": None, "summary": None},
            "store": False, "temperature": req.temperature, "top_p": req.top_p,
            "truncation": "disabled", "usage": usage, "user": None, **req.echo}


def _fragments(text: str) -> list[str]:
    return [text[i:i + ARGUMENT_FRAGMENT_CHARS]
            for i in range(0, len(text), ARGUMENT_FRAGMENT_CHARS)]


class _Events:
    """Numbers the events of one stream (``sequence_number``)."""

    def __init__(self) -> None:
        self.seq = 0

    def __call__(self, kind: str, **fields: Any) -> bytes:
        body = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return named_sse(body)


async def response_events(req: Arrival, rid: str, created: int, first: Item,
                          queue: Any, choices: Sequence[Any]) -> AsyncIterator[bytes]:
    """The documented event sequence: ``response.created``, ``response.in_progress``, per
    output item ``response.output_item.added``, its text or argument deltas and their
    ``...done`` events, ``response.output_item.done``; then ``response.completed`` (or
    ``response.incomplete``). A request that may call tools streams its text at the end."""
    event = _Events()
    hold = req.chat_spec is not None and req.chat_spec.may_call
    msg_id = _message_item(rid, "")["id"]
    sent: list[str] = []
    opened = False
    try:
        yield event("response.created", response=_response(req, rid, created, None))
        yield event("response.in_progress", response=_response(req, rid, created, None))
        answer: Answer | None = None
        async for piece in one_choice(first, queue, choices[0]):
            if isinstance(piece, Answer):
                answer = piece
                break
            if hold:
                continue
            if not opened:
                opened = True
                for opening in _open_text(event, msg_id, rid):
                    yield opening
            sent.append(piece)
            yield event("response.output_text.delta", item_id=msg_id, output_index=0,
                        content_index=0, delta=piece, logprobs=[])
        assert answer is not None  # one_choice ends with the answer or raises
        text_item = bool(answer.text or not answer.tool_calls)
        if text_item:
            if not opened:
                for opening in _open_text(event, msg_id, rid):
                    yield opening
            rest = unsent(answer.text, "".join(sent), rid) if sent else answer.text
            if rest:
                yield event("response.output_text.delta", item_id=msg_id, output_index=0,
                            content_index=0, delta=rest, logprobs=[])
            part = {"type": "output_text", "text": answer.text, "annotations": []}
            yield event("response.output_text.done", item_id=msg_id, output_index=0,
                        content_index=0, text=answer.text, logprobs=[])
            yield event("response.content_part.done", item_id=msg_id, output_index=0,
                        content_index=0, part=part)
            yield event("response.output_item.done", output_index=0,
                        item=_message_item(rid, answer.text))
        for k, call in enumerate(answer.tool_calls, start=int(text_item)):
            item = _call_item(call.id, call.name, "", done=False)
            yield event("response.output_item.added", output_index=k, item=item)
            for fragment in _fragments(call.arguments):
                yield event("response.function_call_arguments.delta", item_id=item["id"],
                            output_index=k, delta=fragment)
            yield event("response.function_call_arguments.done", item_id=item["id"],
                        output_index=k, name=call.name, arguments=call.arguments)
            yield event("response.output_item.done", output_index=k,
                        item=_call_item(call.id, call.name, call.arguments))
        final = _response(req, rid, created, answer)
        kind = ("response.incomplete" if final["status"] == "incomplete"
                else "response.completed")
        yield event(kind, response=final)
    except DynbranchError as exc:  # after the first byte the status is sent: report inline
        status, error = error_status(exc, RESPONSES)
        if status == 500:
            log.error("http: stream %s: internal error: %s", rid, exc, exc_info=exc)
        yield event("error", **_error_fields(error))
    except Exception:  # the detail goes to the log, never to the client
        log.exception("http: stream %s failed", rid)
        yield event("error", **_error_fields(INTERNAL_ERROR))


def _open_text(event: _Events, msg_id: str, rid: str) -> list[bytes]:
    return [event("response.output_item.added", output_index=0,
                  item=_message_item(rid, "", done=False)),
            event("response.content_part.added", item_id=msg_id, output_index=0,
                  content_index=0, part={"type": "output_text", "text": "",
                                         "annotations": []})]


def _error_fields(body: dict[str, Any]) -> dict[str, Any]:
    """The fields of a streamed ``error`` event from an OpenAI error object."""
    err = body["error"]
    return {"code": err.get("code") or err.get("type"), "message": err["message"],
            "param": err.get("param")}


__all__ = ["RESPONSES", "output_items", "parse_responses", "response_body", "response_events"]
