"""What the HTTP front tells an operator: a request counter and a latency histogram by route,
protocol, status and source, and one log line per 4xx/5xx response, rate-limited, that never
holds a body.

:class:`Observed` wraps the front's ASGI app (outermost, so a response Starlette makes itself,
a 404 or 405, is seen too). Every label comes from a bounded set:

- ``route``: the matched route's template (``/v1/chat/completions``,
  ``/v1/models/{model:path}``); a path no route matches is ``unmatched``, whatever it was;
- ``protocol``: the API the route belongs to (:data:`PROTOCOLS`); ``none`` when unmatched;
- ``status``: the status code sent (499: the client went away before its answer);
- ``source``: where the answer came from, as the response's ``x-dynbranch-source`` header says
  (``engine``, ``library``, ``promoted_fill``, ``joined``: the gateway's answer source, the
  same one the gRPC ``Call`` reports); ``none`` when the response carries no answer (errors,
  models, health).

Errors: each 4xx/5xx response logs one line, ``http: METHOD ROUTE -> STATUS: MESSAGE``, with
the message the client was told (from the error body the front sent, cut to
:data:`MAX_MESSAGE_CHARS`; the request body is never read here) and, for an internal error (500),
the exception's traceback. Lines are rate-limited per method, route, status and message (digits
masked; not the message for an unmatched path): one per 10 s, the next one saying how many
were held back. 5xx log at ERROR, 499 (the client left) at INFO, other 4xx at WARNING.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.routing import BaseRoute, Match

from services.common.values.throttled_log import ThrottledLog
from services.gateway.http.messages import MESSAGES
from services.gateway.http.wires import WIRES
from services.gateway.values import AnswerSource

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The API each route of the front belongs to (the ``protocol`` label): every wire's, and the
#: routes beside them.
PROTOCOLS: dict[str, str] = {
    **{w.endpoint.path: w.endpoint.protocol for w in WIRES.values()},
    f"{MESSAGES.path}/count_tokens": MESSAGES.protocol,
    "/v1/models": "openai_models",
    "/v1/models/{model:path}": "openai_models",
    "/healthz": "health",
}
UNMATCHED, NONE = "unmatched", "none"
SOURCES = frozenset(s.name.lower() for s in AnswerSource)
#: Key in the request's scope where the front leaves the exception an error response answers
#: (its traceback is logged for a 5xx).
FAULT = "dynbranch.fault"
#: Longest error message logged, and the most of an error body read to find it.
MAX_MESSAGE_CHARS = 300
MAX_ERROR_BODY = 8192
#: Seconds buckets: a health check takes milliseconds, a long generation minutes.
BUCKETS = (.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300)
LABELS = ("route", "protocol", "status", "source")
_DIGITS = re.compile(r"\d+")


class HttpMetrics:
    """The front's Prometheus metrics."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "dynbranch_gateway_http_requests_total",
            "HTTP requests the gateway's front answered, by route template (unmatched: no "
            "route), protocol (openai_chat, openai_completions, openai_responses, "
            "anthropic_messages, openai_models, health), status code (499: the client left "
            "first) and answer source (engine, library, promoted_fill or joined, as the "
            "x-dynbranch-source header says; none without an answer)",
            LABELS, registry=registry)
        self.seconds = Histogram(
            "dynbranch_gateway_http_request_seconds",
            "Seconds from an HTTP request's arrival to the last byte of its response (a "
            "stream's whole length), by route, protocol, status and source as the request "
            "counter has them",
            LABELS, registry=registry, buckets=BUCKETS)

    def observe(self, labels: tuple[str, str, str, str], seconds: float) -> None:
        """Count one answered request."""
        self.requests.labels(*labels).inc()
        self.seconds.labels(*labels).observe(seconds)


class _Sent:
    """What the app sent of one response."""

    __slots__ = ("body", "source", "status")

    def __init__(self) -> None:
        self.status = 0
        self.source = NONE
        self.body = b""

    def start(self, message: Message) -> None:
        self.status = int(message["status"])
        for name, value in message.get("headers", ()):
            if name.lower() == b"x-dynbranch-source":
                source = value.decode("latin-1")
                self.source = source if source in SOURCES else NONE

    def chunk(self, message: Message) -> None:
        if self.status >= 400 and len(self.body) < MAX_ERROR_BODY:
            self.body += bytes(message.get("body", b""))[:MAX_ERROR_BODY - len(self.body)]


class Observed:
    """The front's app, counted, timed and its errors logged (see the module's docstring)."""

    def __init__(self, app: App, metrics: HttpMetrics, routes: Sequence[BaseRoute],
                 errors: ThrottledLog | None = None) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes
        self.errors = errors or ThrottledLog(log)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        sent = _Sent()

        async def observed(message: Message) -> None:
            if message["type"] == "http.response.start":
                sent.start(message)
            elif message["type"] == "http.response.body":
                sent.chunk(message)
            await send(message)

        fault: BaseException | None = None
        try:
            await self.app(scope, receive, observed)
        except Exception as exc:
            fault = exc
            raise
        finally:
            self._record(scope, sent, time.monotonic() - started, fault)

    def _record(self, scope: Scope, sent: _Sent, seconds: float,
                fault: BaseException | None) -> None:
        route = self._route(scope)
        protocol = PROTOCOLS.get(route, NONE)
        route = route if route in PROTOCOLS else UNMATCHED
        status = sent.status or 500  # it raised before answering
        self.metrics.observe((route, protocol, str(status), sent.source), seconds)
        if status >= 400:
            self._log_error(scope, route, protocol, status, sent.body,
                            fault or scope.get(FAULT))

    def _route(self, scope: Scope) -> str:
        """The template of the route the request matched (as the router matches: a path whose
        route takes another method counts too), else ``unmatched``."""
        partial = UNMATCHED
        for route in self.routes:
            match, _ = route.matches(scope)
            if match is Match.FULL:
                return str(getattr(route, "path", UNMATCHED))
            if match is Match.PARTIAL and partial == UNMATCHED:
                partial = str(getattr(route, "path", UNMATCHED))
        return partial

    def _log_error(self, scope: Scope, route: str, protocol: str, status: int, body: bytes,
                   fault: BaseException | None) -> None:
        method = str(scope.get("method", ""))[:16]
        message = error_message(body, status)
        level = (logging.ERROR if status >= 500 else logging.INFO if status == 499
                 else logging.WARNING)
        traceback = fault if status == 500 else None  # an internal error: where it came from
        # one key per distinct fault; an unmatched path's message names the path: not keyed
        detail = "" if route == UNMATCHED else _DIGITS.sub("#", message)
        key = f"{method} {route} {status} {detail}"
        self.errors.log(level, key, "http: %s %s -> %d: %s", method, route, status, message,
                        exc_info=traceback,
                        extra={"method": method, "route": route, "protocol": protocol,
                               "status": status, "error": message})


def error_message(body: bytes, status: int) -> str:
    """The message an error body told the client (OpenAI's and Anthropic's ``error.message``,
    else the body's text), at most ``MAX_MESSAGE_CHARS``; for a body-less 499, that the client
    went away."""
    if status == 499 and not body:
        return "the client went away before its answer"
    text = body.decode("utf-8", "replace")
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, Mapping):
        error = parsed.get("error")
        found = error.get("message") if isinstance(error, Mapping) else parsed.get("message")
        if isinstance(found, str):
            text = found
    text = " ".join(text.split())  # one line, whatever it held
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[:MAX_MESSAGE_CHARS - 1] + "…"
    return text or "(no message)"


__all__ = ["FAULT", "PROTOCOLS", "HttpMetrics", "Observed", "error_message"]
