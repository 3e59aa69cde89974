"""In-memory engine servers for the remote backends' tests (``httpx.MockTransport``, no sockets).

``FakeEngine`` answers what every engine server has (``/health``, ``/metrics``, GET routes that
tell the server's facts) and paces a scripted reply into server-sent events; a subclass speaks
one engine's protocol in ``post`` (``FakeVllm`` in test_openai_backend.py, ``FakeSglang`` in
test_sglang_protocol.py). ``generate_and_abort`` drives a backend through a mid-stream abort.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import httpx

from services.common.values.generation import GenerationRequest
from services.engine_agent.backend import EngineBackend, GenerationEvent, TokenDelta

#: The event that ends every stream.
DONE = b"data: [DONE]\n\n"


def sse(payload: Any) -> bytes:
    """One server-sent event carrying ``payload`` as JSON."""
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def event_stream(events: AsyncIterator[bytes]) -> httpx.Response:
    """A 200 reply that streams ``events``."""
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=events)


class FakeEngine:
    """A scripted engine server; subclasses set ``metrics`` and ``facts`` and answer POSTs."""

    #: The ``/metrics`` text.
    metrics: ClassVar[str] = ""
    #: GET path → the JSON it answers (the server's facts).
    facts: ClassVar[dict[str, Any]] = {}

    def __init__(self, pieces: list[str], delay: float = 0.0) -> None:
        self.pieces, self.delay = pieces, delay
        self.sent = 0

    def client(self, base_url: str) -> httpx.AsyncClient:
        """A client whose every request this server answers."""
        return httpx.AsyncClient(transport=httpx.MockTransport(self.handle), base_url=base_url)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/health":
            return httpx.Response(200)
        if path == "/metrics":
            return httpx.Response(200, text=self.metrics)
        if path in self.facts:
            return httpx.Response(200, json=self.facts[path])
        return self.post(path, json.loads(request.content) if request.content else {}, request)

    def post(self, path: str, body: dict, request: httpx.Request) -> httpx.Response:
        """Answer a POST of the engine's protocol."""
        raise NotImplementedError

    async def paced(self) -> AsyncIterator[tuple[int, str, bool]]:
        """``(index, piece, is_last)`` for each scripted piece, ``delay`` apart."""
        for i, piece in enumerate(self.pieces):
            await asyncio.sleep(self.delay)
            self.sent += 1
            yield i, piece, i == len(self.pieces) - 1

    async def assert_stopped(self) -> None:
        """The client stopped reading: the stream makes no more progress."""
        before = self.sent
        await asyncio.sleep(0.15)
        assert self.sent == before < len(self.pieces)


async def generate_and_abort(backend: EngineBackend, request: GenerationRequest,
                             after: int) -> list[GenerationEvent]:
    """Every event of ``request``; aborted (successfully) at the delta that is event ``after``."""
    events: list[GenerationEvent] = []
    async for ev in backend.generate(request):
        events.append(ev)
        if isinstance(ev, TokenDelta) and len(events) == after:
            assert await backend.abort(request.request_id) is True
    return events
