"""The protocols of the gateway's HTTP front, one :class:`Wire` each: how a body is parsed into
the front's one arrival (``http.arrival``) and how an answer, a stream and an error are rendered
back. Everything between parsing and rendering (the demand, auth, tags, reuse, settlement,
tracing) is the front's and the same for every wire.

``WIRES`` is the one table of them: the front's generation routes and the metrics' protocol
labels are derived from it. A new protocol is its wire module (its :class:`Endpoint`, parser,
bodies, events and errors) and one entry here."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from services.common.values.errors import DynbranchError
from services.gateway.http import messages, responses
from services.gateway.http.arrival import Arrival, Endpoint
from services.gateway.http.bodies import INTERNAL_ERROR, error_status, response_body
from services.gateway.http.messages import MESSAGES
from services.gateway.http.responses import RESPONSES
from services.gateway.http.schema import CHAT, COMPLETION, parse_request
from services.gateway.http.stream import Item, sse_events
from services.gateway.values import Answer


@dataclass(frozen=True, slots=True)
class Wire:
    """One protocol's edge: its parser into the arrival, its answer body, its event stream and
    its error shape; everything between them is shared."""

    endpoint: Endpoint
    parse: Callable[[Any], Arrival]
    body: Callable[[Arrival, str, int, Sequence[Answer]], dict[str, Any]]
    events: Callable[[Arrival, str, int, Item, asyncio.Queue[Item],
                      Sequence[asyncio.Task[Answer]]], AsyncIterator[bytes]]
    error: Callable[[DynbranchError], tuple[int, dict[str, Any]]]
    internal_error: dict[str, Any]


def _openai_errors(endpoint: Endpoint) -> Callable[[DynbranchError], tuple[int, dict[str, Any]]]:
    return lambda exc: error_status(exc, endpoint)


#: Every wire by its endpoint; the one table of the front's protocols (module docstring).
WIRES: dict[Endpoint, Wire] = {w.endpoint: w for w in (
    Wire(CHAT, lambda b: parse_request(b, CHAT), response_body, sse_events,
         _openai_errors(CHAT), INTERNAL_ERROR),
    Wire(COMPLETION, lambda b: parse_request(b, COMPLETION), response_body, sse_events,
         _openai_errors(COMPLETION), INTERNAL_ERROR),
    Wire(RESPONSES, responses.parse_responses, responses.response_body,
         responses.response_events, _openai_errors(RESPONSES), INTERNAL_ERROR),
    Wire(MESSAGES, messages.parse_messages, messages.message_body, messages.message_events,
         messages.error_status, messages.INTERNAL_ERROR),
)}
#: The wire whose error shape answers a request on no protocol's route (OpenAI's).
DEFAULT_WIRE = WIRES[CHAT]



__all__ = ["DEFAULT_WIRE", "WIRES", "Wire"]
