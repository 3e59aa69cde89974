"""The HTTP front's streaming machinery: SSE events, disconnect watching and the call stream."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from services.common.errors import DynbranchError, Unavailable
from services.gateway.http.bodies import (
    INTERNAL_ERROR,
    chunk_body,
    error_status,
    finish_reason,
    usage_chunk,
)
from services.gateway.http.schema import ApiRequest
from services.gateway.values import Answer

log = logging.getLogger(__name__)
T = TypeVar("T")


class ClientGone(Exception):
    """The client disconnected before its answer was ready."""


def sse(body: Mapping[str, Any]) -> bytes:
    """One server-sent event carrying ``body`` as compact JSON."""
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


async def _disconnected(receive: Receive) -> None:
    """Return once the client has gone (the request body must already be consumed)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(waitable: asyncio.Future[T], request: Request) -> T:
    """``waitable``'s result; cancels it and raises ``ClientGone`` if the client leaves first."""
    watcher = asyncio.ensure_future(_disconnected(request.receive))
    try:
        await asyncio.wait({waitable, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if waitable.done():
            return outcome(waitable)
        raise ClientGone
    finally:
        watcher.cancel()
        waitable.cancel()  # a no-op once done; stops the call when we leave early


def outcome(call: asyncio.Future[T]) -> T:
    """A finished call's result; a call the front cancelled at shutdown is ``Unavailable``."""
    if call.cancelled():
        raise Unavailable("the gateway is shutting down; retry on another replica")
    return call.result()


class CallStream(StreamingResponse):
    """An SSE response that cancels its call however the stream ends (also on disconnect)."""

    def __init__(self, content: AsyncIterator[bytes], call: asyncio.Task[Answer],
                 headers: Mapping[str, str]) -> None:
        super().__init__(content, media_type="text/event-stream", headers=headers)
        self.call = call

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.call.cancel()


async def sse_events(req: ApiRequest, rid: str, created: int, first: str | None,
                     queue: asyncio.Queue[str | None], call: asyncio.Task[Answer]
                     ) -> AsyncIterator[bytes]:
    """SSE events: role (chat), text deltas, any unsent rest, the finish, usage, [DONE]."""
    sent: list[str] = []
    try:
        if req.chat:
            yield sse(chunk_body(req, rid, created, role=True))
        item = first
        while item is not None:
            if item:
                sent.append(item)
                yield sse(chunk_body(req, rid, created, text=item))
            item = await queue.get()
        answer = outcome(call)
        rest = _rest(answer.text, "".join(sent), rid)
        if rest:  # a library hit or promoted fill arrives whole, as one chunk
            yield sse(chunk_body(req, rid, created, text=rest))
        yield sse(chunk_body(req, rid, created, finish=finish_reason(answer)))
        if req.include_usage:
            yield sse(usage_chunk(req, rid, created, answer.usage))
        yield b"data: [DONE]\n\n"
    except DynbranchError as exc:  # after the first byte the status is sent: report inline
        status, body = error_status(exc, req.chat)
        if status == 500:
            log.error("http: stream %s: internal error: %s", rid, exc, exc_info=exc)
        yield sse(body)
    except Exception:  # the detail goes to the log, never to the client
        log.exception("http: stream %s failed", rid)
        yield sse(INTERNAL_ERROR)


def _rest(text: str, sent: str, rid: str) -> str:
    """What of the final text the deltas did not carry."""
    if text.startswith(sent):
        return text[len(sent):]
    log.warning("http: stream %s: streamed text is not a prefix of the answer", rid)
    return ""


__all__ = ["CallStream", "ClientGone", "outcome", "sse", "sse_events", "unless_disconnected"]
