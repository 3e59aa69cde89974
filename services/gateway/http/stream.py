"""The HTTP front's streaming machinery: SSE events, disconnect watching and the call stream."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from services.common.values.errors import DynbranchError, Unavailable
from services.gateway.http.arrival import Arrival
from services.gateway.http.bodies import (
    INTERNAL_ERROR,
    chunk_body,
    error_status,
    finish_reason,
    tool_call_deltas,
    total_usage,
    usage_chunk,
)
from services.gateway.values import Answer

log = logging.getLogger(__name__)
T = TypeVar("T")


class ClientGone(Exception):
    """The client disconnected before its answer was ready."""


def sse(body: Mapping[str, Any]) -> bytes:
    """One server-sent event carrying ``body`` as compact JSON."""
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def named_sse(body: Mapping[str, Any]) -> bytes:
    """One server-sent event named by its body's ``type`` (the Responses and Messages
    streams: ``event: <type>`` then the data)."""
    return f"event: {body['type']}\n".encode() + sse(body)


async def _disconnected(receive: Receive) -> None:
    """Return once the client has gone (the request body must already be consumed)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(waitable: asyncio.Future[T], request: Request) -> T:
    """``waitable``'s result; cancels it and raises ``ClientGone`` if the client leaves first."""
    watcher = asyncio.ensure_future(_disconnected(request.receive))
    try:
        both: set[asyncio.Future[Any]] = {waitable, watcher}
        await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
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
    """An SSE response that cancels its calls however the stream ends (also on disconnect)."""

    def __init__(self, content: AsyncIterator[bytes], calls: Sequence[asyncio.Task[Answer]],
                 headers: Mapping[str, str]) -> None:
        super().__init__(content, media_type="text/event-stream", headers=headers)
        self.calls = list(calls)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            for call in self.calls:
                call.cancel()


#: A streamed event of choice ``index``: a text delta, or None once its call finished.
Item = tuple[int, str | None]


async def one_choice(first: Item, queue: asyncio.Queue[Item], call: asyncio.Task[Answer]
                     ) -> AsyncIterator[str | Answer]:
    """The events of a one-choice stream (Responses, Messages): its non-empty text deltas,
    then its answer (raises the call's error)."""
    item = first
    while item[1] is not None:
        if item[1]:
            yield item[1]
        item = await queue.get()
    yield outcome(call)


def unsent(text: str, sent: str, rid: str) -> str:
    """What of the final text the deltas did not carry (a library hit or promoted fill
    arrives whole)."""
    if text.startswith(sent):
        return text[len(sent):]
    log.warning("http: stream %s: streamed text is not a prefix of the answer", rid)
    return ""


async def sse_events(req: Arrival, rid: str, created: int, first: Item,
                     queue: asyncio.Queue[Item], choices: Sequence[asyncio.Task[Answer]]
                     ) -> AsyncIterator[bytes]:
    """SSE events: per choice the role (chat), text deltas, any unsent rest or the tool calls,
    the finish; then usage and [DONE]. ``choices[i]`` is choice i's call (greedy choices share
    one). A request that may call tools streams its text whole at the end, since only the
    finished output tells text from a call."""
    sent: list[list[str]] = [[] for _ in choices]
    hold = req.chat_spec is not None and req.chat_spec.may_call
    open_choices = len(choices)
    try:
        if req.chat:
            for index in range(len(choices)):
                yield sse(chunk_body(req, rid, created, index=index, role=True))
        item = first
        while True:
            index, text = item
            if text is None:
                answer = outcome(choices[index])
                for body in _finish(req, rid, created, index, answer, "".join(sent[index])):
                    yield sse(body)
                open_choices -= 1
                if not open_choices:
                    break
            elif text and not hold:
                sent[index].append(text)
                yield sse(chunk_body(req, rid, created, index=index, text=text))
            item = await queue.get()
        if req.include_usage:
            yield sse(usage_chunk(req, rid, created, total_usage([outcome(c) for c in choices])))
        yield b"data: [DONE]\n\n"
    except DynbranchError as exc:  # after the first byte the status is sent: report inline
        status, body = error_status(exc, req.endpoint)
        if status == 500:
            log.error("http: stream %s: internal error: %s", rid, exc, exc_info=exc)
        yield sse(body)
    except Exception:  # the detail goes to the log, never to the client
        log.exception("http: stream %s failed", rid)
        yield sse(INTERNAL_ERROR)


def _finish(req: Arrival, rid: str, created: int, index: int, answer: Answer, sent: str
            ) -> list[dict[str, Any]]:
    """The last chunks of one choice: unsent text (a library hit or promoted fill arrives
    whole, as one chunk), tool-call deltas, the finish."""
    rest = unsent(answer.text, sent, rid)
    bodies = [chunk_body(req, rid, created, index=index, text=rest)] if rest else []
    bodies += [chunk_body(req, rid, created, index=index, tool_call=delta)
               for delta in tool_call_deltas(answer.tool_calls)]
    return bodies + [chunk_body(req, rid, created, index=index, finish=finish_reason(answer))]


__all__ = ["CallStream", "ClientGone", "Item", "named_sse", "one_choice", "outcome", "sse",
           "sse_events", "unless_disconnected", "unsent"]
