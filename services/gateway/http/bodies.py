"""OpenAI response, streamed-chunk and error bodies for the gateway's HTTP front (plain dicts)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from services.common.values.chat import ToolCall
from services.common.values.errors import (
    AlreadyExists,
    DeadlineExceeded,
    DynbranchError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PayloadTooLarge,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)
from services.common.values.generation import FinishReason, Usage
from services.gateway.http.arrival import Arrival, Endpoint, ModelNotFound
from services.gateway.values import Answer

FINISH_REASONS = {FinishReason.STOP: "stop", FinishReason.LENGTH: "length",
                  FinishReason.ABORT: "abort", FinishReason.ERROR: "error"}


# -- responses ------------------------------------------------------------------------------


def usage_body(u: Usage) -> dict[str, Any]:
    """OpenAI's usage object."""
    return {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
            "total_tokens": u.prompt_tokens + u.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": u.cached_prompt_tokens}}


def finish_reason(answer: Answer) -> str:
    """OpenAI's name for why the answer ended (``tool_calls`` when it carries calls)."""
    if answer.tool_calls:
        return "tool_calls"
    return FINISH_REASONS.get(answer.finish_reason, "stop")


def total_usage(answers: Sequence[Answer]) -> Usage:
    """Usage of a request's choices: the prompt once, every choice's completion tokens."""
    first = answers[0].usage
    return Usage(first.prompt_tokens, first.cached_prompt_tokens,
                 sum(a.usage.completion_tokens for a in answers))


def tool_call_body(call: ToolCall) -> dict[str, Any]:
    """One entry of ``message.tool_calls``."""
    return {"id": call.id, "type": "function",
            "function": {"name": call.name, "arguments": call.arguments}}


def message_body(answer: Answer) -> dict[str, Any]:
    """The assistant message of a chat choice (content null when it only calls tools)."""
    content = answer.text if answer.text or not answer.tool_calls else None
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if answer.tool_calls:
        message["tool_calls"] = [tool_call_body(c) for c in answer.tool_calls]
    return message


def response_body(req: Arrival, rid: str, created: int, answers: Sequence[Answer]
                  ) -> dict[str, Any]:
    """A complete (non-streamed) response with one choice per answer."""
    choices = []
    for index, answer in enumerate(answers):
        choice: dict[str, Any] = {"index": index}
        if req.chat:
            choice["message"] = message_body(answer)
        else:
            choice["text"] = answer.text
        choices.append(choice | {"logprobs": None, "finish_reason": finish_reason(answer)})
    return {"id": rid, "object": req.endpoint.value, "created": created, "model": req.model,
            "choices": choices, "usage": usage_body(total_usage(answers))}


def chunk_body(req: Arrival, rid: str, created: int, *, index: int = 0, text: str = "",
               role: bool = False, finish: str | None = None,
               tool_call: dict[str, Any] | None = None) -> dict[str, Any]:
    """One streamed chunk of choice ``index``: the assistant role (chat, first), a text piece, a
    tool-call delta, or the finish."""
    if req.chat:
        delta: dict[str, Any] = {}
        if role:
            delta = {"role": "assistant", "content": ""}
        elif tool_call is not None:
            delta = {"tool_calls": [tool_call]}
        elif text:
            delta = {"content": text}
        choice: dict[str, Any] = {"index": index, "delta": delta}
        kind = "chat.completion.chunk"
    else:
        choice, kind = {"index": index, "text": text}, req.endpoint.value  # a completion's object
    choice |= {"logprobs": None, "finish_reason": finish}
    body = {"id": rid, "object": kind, "created": created, "model": req.model,
            "choices": [choice]}
    if req.include_usage:
        body["usage"] = None
    return body


#: Characters of a call's arguments per streamed fragment.
ARGUMENT_FRAGMENT_CHARS = 16


def tool_call_deltas(calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    """Streamed deltas of tool calls as OpenAI sends them: per call, its index, id and name
    with empty arguments first, then the arguments in fragments."""
    deltas: list[dict[str, Any]] = []
    for index, call in enumerate(calls):
        deltas.append({"index": index, "id": call.id, "type": "function",
                       "function": {"name": call.name, "arguments": ""}})
        args = call.arguments
        deltas += [{"index": index, "function": {"arguments": args[i:i + ARGUMENT_FRAGMENT_CHARS]}}
                   for i in range(0, len(args), ARGUMENT_FRAGMENT_CHARS)]
    return deltas


def usage_chunk(req: Arrival, rid: str, created: int, usage: Usage) -> dict[str, Any]:
    """The last chunk when ``stream_options.include_usage`` is set: no choices, the usage."""
    body = chunk_body(req, rid, created)
    body["choices"] = []
    body["usage"] = usage_body(usage)
    return body


# -- errors ---------------------------------------------------------------------------------


class BodyTooLarge(InvalidArgument):
    """The request body is larger than the front accepts (HTTP 413)."""


#: Error class → (HTTP status, OpenAI error type, code); most specific class first.
_ERRORS: tuple[tuple[type[DynbranchError], int, str, str | None], ...] = (
    (BodyTooLarge, 413, "invalid_request_error", "request_too_large"),
    (ModelNotFound, 404, "invalid_request_error", "model_not_found"),
    (PayloadTooLarge, 400, "invalid_request_error", "context_length_exceeded"),
    (InvalidArgument, 400, "invalid_request_error", None),
    (Unauthenticated, 401, "authentication_error", "invalid_api_key"),
    (NotFound, 404, "invalid_request_error", "not_found"),
    (AlreadyExists, 409, "invalid_request_error", "conflict"),
    (FailedPrecondition, 400, "invalid_request_error", "failed_precondition"),
    (ResourceExhausted, 429, "rate_limit_error", "overloaded"),
    (Unavailable, 503, "server_error", "unavailable"),
    (DeadlineExceeded, 504, "server_error", "deadline_exceeded"),
    (Unimplemented, 501, "server_error", "unimplemented"),
)


def error_body(message: str, type_: str, param: str | None, code: str | None
               ) -> dict[str, Any]:
    """OpenAI's error object."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


INTERNAL_ERROR = error_body("internal error", "server_error", None, "internal_error")


def param_of(field: str, endpoint: Endpoint | None) -> str:
    """The request field an error is about, named as the endpoint's request names it."""
    name = field.removeprefix("demand.").removeprefix("sampling.")
    return endpoint.prompt_field if endpoint is not None and name == "prompt" else name


def error_status(exc: DynbranchError, endpoint: Endpoint | None = None
                 ) -> tuple[int, dict[str, Any]]:
    """HTTP status and OpenAI error object for ``exc`` (500 and a generic message unless the
    error is one a client may see); ``param`` names the request field."""
    found = next((row for row in _ERRORS if isinstance(exc, row[0])), None)
    if found is None or not exc.client_visible:
        return 500, INTERNAL_ERROR
    _, status, type_, code = found
    param, message = None, exc.client_message()
    if isinstance(exc, InvalidArgument):
        param = param_of(exc.field, endpoint)
        message = f"{param}: {message.removeprefix(f'{exc.field}: ')}"
    elif isinstance(exc, ModelNotFound):
        param = "model"
    return status, error_body(message, type_, param, code)


__all__ = ["ARGUMENT_FRAGMENT_CHARS", "FINISH_REASONS", "INTERNAL_ERROR", "BodyTooLarge",
           "ModelNotFound", "chunk_body", "error_body", "error_status", "finish_reason",
           "message_body", "param_of", "response_body", "tool_call_deltas", "total_usage",
           "usage_body", "usage_chunk"]
