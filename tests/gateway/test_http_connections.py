"""Slow and broken HTTP clients are bounded (``http.connections``): a connection that sends
nothing, headers that never finish, a body shorter than its length or a chunked body stopped
mid-chunk each get a 408 and lose their connection at the deadline; a malformed chunked body is a
400 at once; an idle keep-alive connection closes; past ``max_connections`` a new connection is
answered 503 with Retry-After; and the front still answers a well-formed request after all of
it. Deadlines are shortened to a fraction of a second so the test is quick; the defaults are in
``GatewaySettings``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator

import pytest

from tests.factories import MODEL, engine_agent, gateway

LIMIT_S = 0.4
MAX_CONNECTIONS = 6
GOOD = json.dumps({"model": MODEL, "prompt": "hello", "max_tokens": 2,
                   "temperature": 0}).encode()


@pytest.fixture
async def port() -> AsyncIterator[int]:
    async with engine_agent() as eng, gateway(
            [eng.address], http_port=0, http_header_timeout_s=LIMIT_S,
            http_body_timeout_s=LIMIT_S, http_keepalive_timeout_s=LIMIT_S,
            http_max_connections=MAX_CONNECTIONS) as gw:
        yield gw.http_port


async def _exchange(port: int, data: bytes, wait_s: float = 5.0) -> tuple[bytes, float]:
    """Send ``data``, read until the server closes; what came back and how long it took."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    start = time.monotonic()
    writer.write(data)
    await writer.drain()
    try:
        reply = await asyncio.wait_for(reader.read(), wait_s)  # until EOF
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    return reply, time.monotonic() - start


def _status(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/1.1 ") else 0


HEAD = b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"


@pytest.mark.parametrize("data", [
    b"",  # a connection that sends nothing
    b"POST /v1/completions HTTP/1.1\r\nhost: x\r\n",  # headers that never finish
    HEAD + b"content-length: 100\r\n\r\n{",  # a body shorter than its length
    HEAD + b"transfer-encoding: chunked\r\n\r\n40\r\n{\"model\"",  # a chunk never finished
], ids=["idle", "partial-headers", "short-body", "stopped-chunk"])
async def test_a_slow_client_gets_408_at_the_deadline(port: int, data: bytes) -> None:
    reply, took = await _exchange(port, data)
    assert _status(reply) == 408, reply
    assert LIMIT_S * 0.8 <= took < LIMIT_S + 2.0


async def test_a_malformed_chunked_body_is_refused_at_once(port: int) -> None:
    reply, took = await _exchange(port, HEAD + b"transfer-encoding: chunked\r\n\r\n" + GOOD)
    assert _status(reply) == 400, reply
    assert took < LIMIT_S


async def test_idle_keepalive_closes_and_connections_are_capped(port: int) -> None:
    # A served request, then the connection idles: closed after the keep-alive timeout.
    request = HEAD + f"content-length: {len(GOOD)}\r\n\r\n".encode() + GOOD
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    first = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert _status(first) == 200, first
    start = time.monotonic()
    await asyncio.wait_for(reader.read(), 5)  # the rest of the answer, then EOF
    assert time.monotonic() - start < LIMIT_S + 2.0
    writer.close()

    # At the cap a new connection is answered 503 with Retry-After; freed, one is served again.
    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(MAX_CONNECTIONS)]
    await asyncio.sleep(0.05)
    reply, _ = await _exchange(port, b"")
    assert _status(reply) == 503 and b"retry-after: 1" in reply.lower(), reply
    for _, w in held:
        w.close()
    await asyncio.sleep(0.1)
    reply, _ = await _exchange(port, request.replace(b"host: x\r\n", b"host: x\r\n"
                                                     b"connection: close\r\n"))
    assert _status(reply) == 200, reply
