"""What the remote HTTP backends (``openai``, ``sglang``) share.

The HTTP client, the ``/metrics`` poller (load views from the engine's own metrics, by name),
the KV-event subscriber and residency map (``kv_events``), request bookkeeping, the loop that
consumes a streamed reply (``_chunks``: server-sent events to JSON chunks), and abort by
closing the request's stream. The engine's block pool is in another process: without the
dynbranch plugin's lease channel (the ``openai`` backend's ``lease_channel``, ``leases``) there
are no prefix leases (``leases_supported=False``, ``lease_prefix`` raises ``Unimplemented``, the
delivery path falls back to Cache-first) and ``Allocated`` is a proxy, sent with the first
streamed token (late by the prefill).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from services.common.values.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    Unavailable,
    Unimplemented,
    quoted,
)
from services.common.values.generation import (
    FinishReason,
    GenerationRequest,
    LoadReport,
    Priority,
    Timings,
    Usage,
)
from services.engine_agent.backend import (
    Allocated,
    BackendInfo,
    Finished,
    GenerationEvent,
    PrefixLookup,
)
from services.engine_agent.backends.http import (
    error_message,
    estimate_tokens,
    http_error,
    iter_sse_data,
)
from services.engine_agent.backends.remote.engine_metrics import (
    FLAVORS,
    EngineSnapshot,
    parse_metrics,
)
from services.engine_agent.backends.remote.kv_events import KVEventSubscriber
from services.engine_agent.backends.vllm.settings import validate_sampling

logger = logging.getLogger(__name__)

LEASES_UNAVAILABLE = ("prefix leases are not available on a remote engine; "
                      "delivery falls back to Cache-first")
#: Seconds an idle pooled connection is kept: under the 5 s after which the servers' uvicorn
#: closes an idle keep-alive connection, so the client seldom reuses one the server is closing.
KEEPALIVE_EXPIRY_S = 2.0



@dataclass(frozen=True, slots=True)
class RemoteSettings:
    """Where the server is and the facts its API may not tell (0: ask the server)."""

    base_url: str
    model: str
    flavor: str = "vllm"
    max_model_len: int = 0
    max_running: int = 256
    block_size: int = 0
    kv_blocks_total: int = 0
    poll_interval_s: float = 0.25
    connect_timeout_s: float = 5.0
    request_timeout_s: float = 600.0
    ready_timeout_s: float = 0.0
    kv_events_endpoint: str = ""
    kv_events_replay_endpoint: str = ""
    kv_events_topic: str = ""
    api_key: str = ""
    #: The dynbranch vLLM plugin's lease channel (``ipc://...``); "": no prefix leases.
    lease_channel: str = ""
    #: How long the start-up handshake waits for the lease channel.
    lease_handshake_s: float = 3.0
    #: Request priority sent for fills (canonical: 0); None: send none (see the engine agent's
    #: ``fill_priority`` setting for each server's convention).
    fill_priority: int | None = None

    def priority_of(self, fill: bool) -> int | None:
        """The ``priority`` field of a request body, or None when priorities are off."""
        if self.fill_priority is None:
            return None
        return self.fill_priority if fill else 0


@dataclass(slots=True)
class RemoteStream:
    """Bookkeeping of one in-flight HTTP generation."""

    request: GenerationRequest
    prompt_tokens: int
    started: float
    response: httpx.Response | None = None
    aborted: bool = False
    allocated: bool = False
    completion_tokens: int = 0
    first_token_at: float = 0.0
    text: str = ""
    #: An adopted fill the server moved to canonical priority (no longer fill occupancy).
    raised: bool = False


class RemoteBackend:
    """Shared machinery of the HTTP backends; subclasses speak one request format."""

    backend_name = "remote"
    #: Whether the backend serves chat specs (tool calling, JSON output).
    tools_supported = False

    def __init__(self, settings: RemoteSettings, client: httpx.AsyncClient | None = None) -> None:
        self.settings = settings
        self._names = FLAVORS[settings.flavor]
        headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
        self._client = client or httpx.AsyncClient(
            base_url=settings.base_url, headers=headers,
            timeout=httpx.Timeout(settings.request_timeout_s, connect=settings.connect_timeout_s),
            limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S))
        self._own_client = client is None
        self._snapshot = EngineSnapshot(0, 0, 0.0)
        self._active: dict[str, RemoteStream] = {}
        self._facts: dict[str, int] = {}
        self._poller: asyncio.Task[None] | None = None
        self.subscriber: KVEventSubscriber | None = None
        self._started = False
        self._closed = False

    # ---- lifecycle ------------------------------------------------------------------------

    @property
    def info(self) -> BackendInfo:
        """Static facts, from the settings and what the server told at start."""
        s, f = self.settings, self._facts
        return BackendInfo(
            backend=self.backend_name, model=s.model,
            max_model_len=f.get("max_model_len", s.max_model_len),
            block_size=f.get("block_size", s.block_size) or 1,
            kv_blocks_total=f.get("num_blocks", s.kv_blocks_total),
            max_running=f.get("max_running", s.max_running),
            leases_supported=self.leases_on, tools_supported=self.tools_supported,
            extra={"url": s.base_url, **self._lease_facts(),
                   "residency": "kv-events" if s.kv_events_endpoint else "none"},
        )

    @property
    def leases_on(self) -> bool:
        """Whether this backend has prefix leases now (subclasses with a lease channel)."""
        return False

    def _lease_facts(self) -> dict[str, str]:
        """What ``info.extra`` says about leases and the allocation signal."""
        return {"leases": LEASES_UNAVAILABLE, "allocated_signal": "first streamed token (proxy)"}

    async def start(self) -> None:
        """Check the server, read its facts, start the metrics poller and event subscriber."""
        if self._started:
            return
        if self._closed:
            raise FailedPrecondition("backend is closed")
        await self._wait_ready()
        await self._discover()
        await self.refresh_load()
        if self.settings.kv_events_endpoint:
            self.subscriber = KVEventSubscriber(
                self.settings.kv_events_endpoint, self.settings.kv_events_replay_endpoint or None,
                topic=self.settings.kv_events_topic)
            await self.subscriber.start()
        self._poller = asyncio.create_task(self._poll(), name=f"{self.backend_name}-metrics")
        self._started = True

    async def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.settings.ready_timeout_s
        while True:
            try:
                resp = await self.get("/health")
                if resp.status_code == 200:
                    return
            except httpx.HTTPError as exc:
                if time.monotonic() >= deadline:
                    raise Unavailable(f"engine at {self.settings.base_url} is down: {exc}") from exc
            if time.monotonic() >= deadline:
                raise Unavailable(f"engine at {self.settings.base_url} is not healthy")
            await asyncio.sleep(0.5)

    async def _discover(self) -> None:
        """Fill ``self._facts`` from the server (subclasses)."""

    async def close(self) -> None:
        """Abort every stream, stop polling and subscribing; idempotent."""
        if self._closed:
            return
        self._closed = True
        for rid in list(self._active):
            with contextlib.suppress(Exception):
                await self.abort(rid)
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._poller
        if self.subscriber is not None:
            await self.subscriber.close()
        if self._own_client:
            await self._client.aclose()

    # ---- load -----------------------------------------------------------------------------

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.settings.poll_interval_s)
            with contextlib.suppress(Exception):
                await self.refresh_load()

    async def get(self, path: str) -> httpx.Response:
        """GET ``path`` (idempotent), within the connect timeout; once more when the server
        dropped the pooled connection as it was reused (it closed a keep-alive connection at
        the moment a request went out on it: ``RemoteProtocolError``, nothing was served)."""
        try:
            return await self._client.get(path, timeout=self.settings.connect_timeout_s)
        except httpx.RemoteProtocolError:
            return await self._client.get(path, timeout=self.settings.connect_timeout_s)

    async def refresh_load(self) -> LoadReport:
        """Scrape ``/metrics`` now."""
        try:
            resp = await self.get("/metrics")
        except httpx.HTTPError as exc:
            raise Unavailable(f"metrics of {self.settings.base_url} unreachable: {exc}") from exc
        if resp.status_code == 200:
            self._snapshot = parse_metrics(self._metrics_page(resp.text), self._names)
            for key, value in (("block_size", self._snapshot.block_size),
                               ("num_blocks", self._snapshot.num_blocks)):
                if value:
                    self._facts[key] = value
        return self.load()

    def _metrics_page(self, text: str) -> str:
        """The part of a ``/metrics`` page the load is read from (subclasses: all of it)."""
        return text

    @property
    def snapshot(self) -> EngineSnapshot:
        """The latest scrape."""
        return self._snapshot

    def load(self) -> LoadReport:
        """Latest scraped load, with fill occupancy tracked here."""
        info = self.info
        base = self._snapshot.to_load(info.max_running, info.block_size, info.kv_blocks_total)
        fills = [a for a in self._active.values()
                 if a.request.priority == Priority.FILL and a.allocated and not a.raised]
        size = max(base.block_size, 1)
        fill_blocks = sum(math.ceil((a.prompt_tokens + a.completion_tokens) / size) for a in fills)
        return LoadReport(
            running=base.running, waiting=base.waiting, max_running=base.max_running,
            kv_blocks_used=base.kv_blocks_used, kv_blocks_total=base.kv_blocks_total,
            fill_running=len(fills), fill_kv_blocks=fill_blocks, block_size=base.block_size,
            prefix_query_tokens=base.prefix_query_tokens, prefix_hit_tokens=base.prefix_hit_tokens)

    # ---- prefix residency -----------------------------------------------------------------

    async def tokenize(self, prompt: str) -> list[int] | None:
        """The prompt's token ids as the server sees them; None when it cannot say."""
        return None

    def _predicted_cached(self, ids: list[int] | None) -> int:
        if not ids or self.subscriber is None:
            return 0
        size = self.subscriber.residency.block_size or self.info.block_size
        resident = self.subscriber.residency.resident_tokens(ids)
        # the engine recomputes the last prompt token, so a hit stops at a block before it
        return min(resident, (len(ids) - 1) // size * size)

    async def lookup_prefix(self, prompt: str) -> PrefixLookup:
        """Resident prefix from the KV-event residency map (0 when events are not configured)."""
        ids = await self.tokenize(prompt)
        n = len(ids) if ids is not None else estimate_tokens(prompt)
        return PrefixLookup(n, self._predicted_cached(ids), self.info.block_size)

    async def lease_prefix(self, prompt_or_token_ids: Any, lease_id: str, ttl_s: float) -> int:
        """Not available remotely."""
        raise Unimplemented(LEASES_UNAVAILABLE)

    async def release_lease(self, lease_id: str) -> int:
        """Nothing is ever leased remotely."""
        return 0

    async def lease_stats(self) -> dict[str, int]:
        """Always empty remotely."""
        return {"leases": 0, "blocks": 0, "granted": 0, "released": 0, "expired": 0}

    # ---- generation -----------------------------------------------------------------------

    async def abort(self, request_id: str) -> bool:
        """Abort by closing the request's stream (the server aborts on disconnect)."""
        stream = self._active.get(request_id)
        if stream is None or stream.aborted:
            return False
        stream.aborted = True
        await self._abort_remote(request_id)
        if stream.response is not None:
            await stream.response.aclose()
        return True

    async def _abort_remote(self, request_id: str) -> None:
        """An explicit abort call where the server has one (SGLang)."""

    def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        """Submit and stream Queued, Allocated (proxy), TokenDeltas and Finished."""
        if not self._started or self._closed:
            raise Unavailable("backend is not started")
        if not request.request_id:
            raise InvalidArgument("request_id", "must not be empty")
        if request.request_id in self._active:
            raise AlreadyExists(f"request {quoted(request.request_id)} is already running")
        validate_sampling(request.sampling)
        if not request.prompt:
            raise InvalidArgument("prompt", "must not be empty")
        stream = RemoteStream(request, 0, time.monotonic())
        self._active[request.request_id] = stream
        return self._run(stream)

    async def _run(self, stream: RemoteStream) -> AsyncIterator[GenerationEvent]:
        rid = stream.request.request_id
        try:
            async for event in self._exchange(stream):
                yield event
        except (httpx.StreamError, httpx.ReadError, httpx.RemoteProtocolError):
            if not stream.aborted:
                raise Unavailable(f"stream of {rid} broke") from None
            yield self._aborted(stream)
        except httpx.HTTPError as exc:
            raise Unavailable(f"engine at {self.settings.base_url}: {exc}") from exc
        finally:
            self._active.pop(rid, None)

    def _aborted(self, stream: RemoteStream) -> Finished:
        usage = Usage(stream.prompt_tokens, 0, stream.completion_tokens)
        return Finished(FinishReason.ABORT, stream.text, usage, self._timings(stream))

    def _timings(self, stream: RemoteStream) -> Timings:
        # Remotely the queue is not observable: prefill_s spans submit → first token.
        now = time.monotonic()
        first = stream.first_token_at or now
        return Timings(0.0, first - stream.started, now - first, now - stream.started)

    def _first_token(self, stream: RemoteStream, cached: int) -> Allocated | None:
        """Note the first token; the proxy ``Allocated`` unless the exact one was sent."""
        if not stream.first_token_at:
            stream.first_token_at = time.monotonic()
        if stream.allocated:
            return None
        stream.allocated = True
        return Allocated(cached, stream.first_token_at - stream.started)

    async def _open(self, stream: RemoteStream, path: str, body: dict[str, Any]) -> httpx.Response:
        req = self._client.build_request("POST", path, json=body,
                                         headers={"X-Request-Id": stream.request.request_id})
        try:
            resp = await self._client.send(req, stream=True)
        except httpx.HTTPError as exc:
            raise Unavailable(f"engine at {self.settings.base_url}: {exc}") from exc
        stream.response = resp
        if resp.status_code != 200:
            await resp.aread()
            await resp.aclose()
            raise http_error(resp.status_code, error_message(resp))
        return resp

    async def _chunks(self, stream: RemoteStream, path: str, body: dict[str, Any]
                      ) -> AsyncGenerator[dict[str, Any], None]:
        """POST ``body`` and yield the streamed JSON chunks until ``[DONE]`` or an abort.

        An inline error chunk raises (``_chunk_error`` reads its message); the response is
        closed however the loop ends. Subclasses parse the chunks of their own protocol.
        """
        resp = await self._open(stream, path, body)
        async with contextlib.aclosing(resp), contextlib.aclosing(iter_sse_data(resp)) as lines:
            async for data in lines:
                if data == "[DONE]" or stream.aborted:
                    return
                chunk = json.loads(data)
                if "error" in chunk:
                    raise http_error(400, self._chunk_error(chunk["error"]))
                yield chunk

    def _chunk_error(self, error: Any) -> str:
        """The message of an inline error chunk (subclasses know their server's shape)."""
        return str(error)

    async def _exchange(self, stream: RemoteStream) -> AsyncIterator[GenerationEvent]:
        """One request's HTTP exchange as events (subclasses)."""
        raise NotImplementedError
        yield  # pragma: no cover


__all__ = [
    "LEASES_UNAVAILABLE",
    "RemoteBackend",
    "RemoteSettings",
    "RemoteStream",
]
