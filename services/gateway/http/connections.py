"""Slow and broken HTTP clients, bounded (issue: every connection the front holds is one a
client is using).

uvicorn closes an idle keep-alive connection (``timeout_keep_alive``) but has no deadline for a
connection that sends nothing, headers that never finish, or a body shorter than its
``Content-Length`` (or a chunked body that stops mid-chunk): each held a descriptor for as long
as the client liked. :func:`bounded_protocol` is uvicorn's httptools protocol with those
deadlines and a cap on open connections:

- **headers**: from the connection's first byte (or a keep-alive request's first byte) to the
  end of its headers, at most ``header_timeout_s``; a connection that sends nothing at all is
  closed after the same time;
- **body**: from the end of the headers to the end of the body, at most ``body_timeout_s``;
- past either the client gets ``408 Request Timeout`` and the connection closes (a request whose
  body was cut off this way reaches the app as a client that went away: nothing runs);
- **idle keep-alive**: uvicorn's own ``timeout_keep_alive`` (``keepalive_timeout_s``);
- **connections**: at most ``max_connections`` open at once; one more is answered ``503`` with
  ``Retry-After`` and closed at once, before it costs anything else.

A malformed chunked body is refused by the parser with a 400 the moment its framing is wrong;
one that stops inside a chunk is a slow body and ends at the body deadline.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from services.common.values.throttled_log import ThrottledLog

log = logging.getLogger(__name__)
_throttled = ThrottledLog(log)


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """What the front gives a client connection (the gateway's ``http_*`` settings)."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keepalive_timeout_s: float = 65.0
    max_connections: int = 1024


def _reply(status: bytes, extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 " + status + b"\r\ncontent-type: text/plain; charset=utf-8\r\n"
            b"content-length: 0\r\nconnection: close\r\n" + extra + b"\r\n")


_TIMEOUT = _reply(b"408 Request Timeout")
_FULL = _reply(b"503 Service Unavailable", b"retry-after: 1\r\n")


class BoundedHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol with header and body deadlines and a connection cap."""

    limits = ConnectionLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None

    # -- the connection ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            _throttled.warning("connections", "http: %d connections open (max_connections "
                               "%d): refusing new ones", len(self.connections) - 1,
                               self.limits.max_connections)
            self._refuse(_FULL)
            return
        self._arm(self.limits.header_timeout_s, "headers")  # sends nothing at all: closed too

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    # -- parser callbacks -------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._deadline is None:  # a keep-alive connection's next request
            self._arm(self.limits.header_timeout_s, "headers")

    def on_headers_complete(self) -> None:
        self._arm(self.limits.body_timeout_s, "body")
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    # -- deadlines --------------------------------------------------------------------------

    def _arm(self, delay_s: float, what: str) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(delay_s, self._expired, what)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self, what: str) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        started = self.cycle is not None and self.cycle.response_started
        _throttled.warning(f"timeout-{what}", "http: closed a connection whose %s did not "
                           "arrive in time", what)
        if started:  # the answer is on its way: only the connection can go
            self.transport.close()
        else:
            self._refuse(_TIMEOUT)

    def _refuse(self, reply: bytes) -> None:
        self._disarm()
        self.transport.write(reply)
        self.transport.close()


def bounded_protocol(limits: ConnectionLimits) -> type[BoundedHttp]:
    """The protocol class uvicorn serves with, bound to ``limits``."""
    return type("BoundedHttp", (BoundedHttp,), {"limits": limits})


__all__ = ["BoundedHttp", "ConnectionLimits", "bounded_protocol"]
