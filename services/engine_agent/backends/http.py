"""HTTP helpers of the remote backends (``openai``, ``sglang``): an engine's HTTP errors as ours,
server-sent-event payloads, error bodies and a token estimate."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import httpx

from services.common.values.errors import (
    DynbranchError,
    InvalidArgument,
    NotFound,
    PayloadTooLarge,
    Unavailable,
)

_TOO_LONG = ("maximum context length", "too long", "longer than", "exceeds", "context length")


def http_error(status: int, message: str) -> DynbranchError:
    """An engine's HTTP error as one of ours."""
    lowered = message.lower()
    if status in (400, 413, 422) and any(k in lowered for k in _TOO_LONG):
        return PayloadTooLarge("prompt", message)
    if status == 404:
        return NotFound(message)
    if status in (400, 422):
        return InvalidArgument("request", message)
    if status in (429, 503) or status >= 500:
        return Unavailable(f"engine answered {status}: {message}")
    return DynbranchError(f"engine answered {status}: {message}")


async def iter_sse_data(response: httpx.Response) -> AsyncGenerator[str, None]:
    """The ``data:`` payloads of a server-sent-event stream, ``[DONE]`` included."""
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            yield line[5:].strip()


def error_message(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:500]
    err = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(err, dict):
        return str(err.get("message") or err.get("detail") or err)
    return str(err)[:500]


def estimate_tokens(prompt: str) -> int:
    """A rough token count (4 bytes a token) where the server cannot tokenize for us."""
    return max(1, len(prompt.encode()) // 4)


__all__ = ["error_message", "estimate_tokens", "http_error", "iter_sse_data"]
