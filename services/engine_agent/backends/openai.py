"""``openai`` backend: any OpenAI-compatible server (``vllm serve``, SGLang's server), remote.

``/v1/completions`` with streaming (``/v1/chat/completions`` for a chat spec: tools, tool choice
and response format pass through to the server, which renders them with the model's chat
template and parses the calls; the streamed call deltas are joined here); abort by closing the
stream (vLLM aborts a request when its
client disconnects); load from ``/metrics`` by name; prefix residency from the engine's KV-cache
events over ZMQ (``kv_events``), matched against the prompt's tokens from ``/tokenize``.

Prefix leases need the engine's block pool, in the server's engine-core process. A ``vllm
serve`` with the dynbranch plugin (``plugins/vllm``) and its lease channel open
(``DYNBRANCH_LEASE_CHANNEL``) serves them; the ``lease_channel`` setting names that endpoint.
When the channel answers at start (``remote.leases``), this backend is a ``LeasePort``
(``leases_supported=True``; the provider tokenizes through ``/tokenize``) and its ``Allocated``
events are exact: the engine's first positive-token allocation of the request, asked for before
the request is sent. Without it (no setting, a server without the plugin or the channel) it
says so once, leases are off (``lease_prefix`` raises ``Unimplemented``), the delivery path falls
back to Cache-first, and ``Allocated`` is a proxy sent with the first streamed token (late by the
prefill), with the cached-token count the residency map predicts.

With the channel up and ``fill_priority`` set (the server runs ``--scheduling-policy priority``)
``set_priority`` moves a request between priorities in the engine core (the plugin's
``dynbranch_set_priority``): an adopted fill is raised to canonical priority. Without either it
answers False and an adopted fill runs on at the priority it was sent with.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx

from services.common.values.chat import ToolCall, ToolChoice
from services.common.values.errors import (
    DynbranchError,
    FailedPrecondition,
    InvalidArgument,
    PayloadTooLarge,
    Unavailable,
    Unimplemented,
)
from services.common.values.generation import FinishReason, GenerationRequest, Priority, Usage
from services.engine_agent.backend import (
    Allocated,
    Finished,
    GenerationEvent,
    Queued,
    TokenDelta,
    finish_reason_named,
)
from services.engine_agent.backends.http import (
    error_message,
    estimate_tokens,
    http_error,
    iter_sse_data,
)
from services.engine_agent.backends.remote.backend import (
    LEASES_UNAVAILABLE,
    RemoteBackend,
    RemoteSettings,
    RemoteStream,
)
from services.engine_agent.backends.remote.leases import FALLBACK, RemoteLeases, with_allocation
from services.engine_agent.leases.port import Handoff, PoolState, ResidentPrefix

logger = logging.getLogger(__name__)


class OpenAIBackend(RemoteBackend):
    """``EngineBackend`` over an OpenAI-compatible ``/v1/completions`` server; a ``LeasePort``
    when the server's lease channel answers (module docstring)."""

    backend_name = "openai"
    tools_supported = True

    def __init__(self, settings: RemoteSettings, client: httpx.AsyncClient | None = None) -> None:
        super().__init__(settings, client)
        self._leases = (RemoteLeases(settings.lease_channel, handshake_s=settings.lease_handshake_s,
                                     wait_s=settings.request_timeout_s)
                        if settings.lease_channel else None)

    @classmethod
    def from_settings(cls, settings: Any) -> OpenAIBackend:
        """Build from ``EngineAgentSettings`` (``engine_url``, ``kv_events_endpoint``,
        ``lease_channel``)."""
        if not settings.engine_url:
            raise InvalidArgument("engine_url", "the openai backend needs the server's URL")
        endpoint = settings.kv_events_endpoint
        return cls(RemoteSettings(
            base_url=settings.engine_url, model=settings.model,
            max_running=settings.max_running or 256, block_size=settings.block_size,
            kv_blocks_total=settings.kv_blocks, kv_events_endpoint=endpoint,
            kv_events_replay_endpoint=_replay_endpoint(endpoint),
            fill_priority=settings.fill_priority, lease_channel=settings.lease_channel))

    # ---- the lease channel ----------------------------------------------------------------

    async def start(self) -> None:
        """Start as every remote backend, then shake hands with the lease channel, if named."""
        started = self._started
        await super().start()
        if started or self._leases is None:
            return
        if self.settings.flavor != "vllm":
            logger.warning("lease channel %s: the %s server has no dynbranch plugin; %s",
                           self.settings.lease_channel, self.settings.flavor, FALLBACK)
            self._leases = None
        elif not await self._leases.open():
            self._leases = None

    async def close(self) -> None:
        """Close as every remote backend, then the lease channel; idempotent."""
        await super().close()
        if self._leases is not None:
            await self._leases.close()

    @property
    def leases_on(self) -> bool:
        """Whether the server's lease channel answered at start (and is not closed)."""
        return self._leases is not None and self._leases.running

    def _lease_facts(self) -> dict[str, str]:
        if not self.leases_on:
            return super()._lease_facts()
        return {"leases": f"lease channel {self.settings.lease_channel}",
                "allocated_signal": "exact (lease channel)"}

    def _lease_engine(self) -> RemoteLeases:
        if self._leases is None or not self.leases_on:
            raise FailedPrecondition(f"{LEASES_UNAVAILABLE} (no lease channel answered; the "
                                     f"engine agent setting lease_channel names it)")
        return self._leases

    # ---- LeasePort (the lease provider's mechanism, over the channel) ----------------------

    @property
    def lease_block_size(self) -> int:
        """Tokens per KV block (the engine core's, when the channel is up)."""
        if self._leases is not None and self.leases_on:
            return self._leases.lease_block_size
        return self.info.block_size

    async def resident(self, token_ids: Sequence[int]) -> ResidentPrefix:
        """The resident reusable prefix of ``token_ids`` (no references added)."""
        return await self._lease_engine().port.resident(token_ids)

    async def pool_state(self) -> PoolState:
        """Free blocks, queue lengths, the running limit, κ and what waiting work lacks."""
        return await self._lease_engine().port.pool_state()

    async def acquire(self, lease_id: str, block_ids: Sequence[int], digest: str) -> bool:
        """Add one reference to each block iff all are still resident under ``digest``."""
        return await self._lease_engine().port.acquire(lease_id, block_ids, digest)

    async def release(self, lease_id: str) -> int:
        """Drop exactly the lease's references; blocks released (0: none held)."""
        if not self.leases_on:
            return 0  # nothing was leased, or the channel is gone (leases expire there)
        return await self._lease_engine().port.release(lease_id)

    async def bind(self, lease_id: str, request_id: str) -> None:
        """Hand the lease to our request ``request_id`` at its first allocation."""
        await self._lease_engine().port.bind(lease_id, request_id)

    async def handoffs(self) -> list[Handoff]:
        """Handoffs since the last call, oldest first."""
        return await self._lease_engine().port.handoffs()

    async def lease_refs(self) -> dict[str, int]:
        """Blocks each live lease references."""
        return await self._lease_engine().port.lease_refs()

    # ---- PriorityPort (an adopted fill, over the channel; see running.RunningFills) --------

    async def set_priority(self, request_id: str, priority: Priority) -> bool:
        """Move our request to ``priority`` in the server's engine core; False without the
        lease channel or ``fill_priority``, when the request is not live here, or when the
        engine core does not have it (not yet, or any more) or runs "fcfs"."""
        value = self.settings.priority_of(priority == Priority.FILL)
        stream = self._active.get(request_id)
        if value is None or stream is None or stream.aborted or not self.leases_on:
            return False
        try:
            moved = bool(await self._lease_engine().call_utility(
                "dynbranch_set_priority", request_id, value))
        except DynbranchError as exc:  # the fill streams on at its old priority
            logger.warning("moving request %s to priority %d over the lease channel failed: %s",
                           request_id, value, exc)
            return False
        if moved:
            stream.raised = priority is Priority.CANONICAL
        return moved

    async def call_utility(self, name: str, *args: Any) -> Any:
        """Run one ``dynbranch_*`` utility on the server's engine core, over the channel."""
        return await self._lease_engine().call_utility(name, *args)

    async def block_refs(self, block_ids: Sequence[int]) -> list[int]:
        """Reference counts of the server's blocks (diagnostics and tests)."""
        refs = await self._lease_engine().call_utility("dynbranch_block_refs", list(block_ids))
        return [int(r) for r in refs]

    async def lease_prefix(self, prompt_or_token_ids: Any, lease_id: str, ttl_s: float) -> int:
        """A TTL lease on the prefix's resident blocks (blocks leased; 0: none resident)."""
        if not self.leases_on:
            raise Unimplemented(LEASES_UNAVAILABLE)
        if not lease_id:
            raise InvalidArgument("lease_id", "must not be empty")
        if ttl_s <= 0:
            raise InvalidArgument("ttl_s", "must be positive")
        ids = (await self.tokenize(prompt_or_token_ids) if isinstance(prompt_or_token_ids, str)
               else list(prompt_or_token_ids))
        grant = await self._lease_engine().call_utility("dynbranch_lease", lease_id, ids,
                                                        float(ttl_s))
        return int(grant["blocks"])

    async def release_lease(self, lease_id: str) -> int:
        """Drop a TTL lease's references (0: unknown, expired, or no channel)."""
        return await self.release(lease_id)

    async def lease_stats(self) -> dict[str, int]:
        """Live leases and blocks, lifetime grants, releases and expiries (engine side)."""
        if not self.leases_on:
            return await super().lease_stats()
        return dict(await self._lease_engine().call_utility("dynbranch_lease_stats"))

    async def _discover(self) -> None:
        resp = await self._client.get("/v1/models")
        if resp.status_code != 200:
            raise http_error(resp.status_code, error_message(resp))
        models = resp.json().get("data", [])
        entry = next((m for m in models if m.get("id") == self.settings.model), None)
        if entry is None:
            names = [m.get("id") for m in models]
            raise FailedPrecondition(f"model {self.settings.model!r} not served (has {names})")
        if entry.get("max_model_len"):
            self._facts["max_model_len"] = int(entry["max_model_len"])

    async def tokenize(self, prompt: str) -> list[int] | None:
        """Token ids from the server's ``/tokenize`` (vLLM); None where it has none."""
        if self.settings.flavor != "vllm":
            return None
        body = {"model": self.settings.model, "prompt": prompt, "add_special_tokens": True}
        try:
            resp = await self._client.post("/tokenize", json=body)
        except httpx.HTTPError as exc:
            raise Unavailable(f"engine at {self.settings.base_url}: {exc}") from exc
        if resp.status_code != 200:
            raise http_error(resp.status_code, error_message(resp))
        return list(resp.json()["tokens"])

    def _body(self, request: GenerationRequest) -> dict[str, Any]:
        s = request.sampling
        body: dict[str, Any] = {
            "model": request.model or self.settings.model, "prompt": request.prompt,
            "max_tokens": s.max_tokens, "temperature": s.temperature, "top_p": s.top_p,
            "stream": True, "stream_options": {"include_usage": True},
        }
        if s.seed is not None:
            body["seed"] = s.seed
        if s.stop:
            body["stop"] = list(s.stop)
        if self.settings.flavor in ("vllm", "sglang"):  # their extensions of the OpenAI schema
            body.update(top_k=s.top_k or -1, ignore_eos=s.ignore_eos)
        if self.settings.flavor == "vllm":
            body.update(request_id=request.request_id, return_token_ids=True)
        priority = self.settings.priority_of(request.priority == Priority.FILL)
        if priority is not None:
            body["priority"] = priority
        return body

    async def _exchange(self, stream: RemoteStream) -> AsyncIterator[GenerationEvent]:
        request = stream.request
        ids = await self.tokenize(request.prompt)
        stream.prompt_tokens = len(ids) if ids is not None else estimate_tokens(request.prompt)
        if ids is not None and len(ids) + request.sampling.max_tokens > self.info.max_model_len > 0:
            raise PayloadTooLarge("prompt", f"{len(ids)} prompt tokens + "
                                  f"{request.sampling.max_tokens} exceed {self.info.max_model_len}")
        predicted = self._predicted_cached(ids)
        yield Queued(stream.prompt_tokens, self._snapshot.waiting)
        reason, usage, stop = FinishReason.ERROR, None, ""
        calls: dict[int, dict[str, str]] = {}
        path, body = (("/v1/chat/completions", self._chat_body(request)) if request.chat
                      else ("/v1/completions", self._body(request)))
        # the exact allocation signal is asked for before the request goes out
        alloc = self._lease_engine().wait_allocated(request.request_id) if self.leases_on else None
        chunks = self._chunks(stream, path, body)
        merged = with_allocation(chunks, alloc, time.time()) if alloc is not None else chunks
        try:
            async with contextlib.aclosing(chunks), contextlib.aclosing(merged):
                async for chunk in merged:
                    if isinstance(chunk, Allocated):
                        stream.allocated = True
                        yield chunk
                        continue
                    usage = chunk.get("usage") or usage
                    for choice in chunk.get("choices") or ():
                        delta = choice.get("delta") or {}
                        _join_calls(calls, delta.get("tool_calls") or ())
                        text = choice.get("text") or delta.get("content") or ""
                        tokens = choice.get("token_ids")
                        count = len(tokens) if tokens is not None else (1 if text else 0)
                        if count or text:
                            if (proxy := self._first_token(stream, predicted)) is not None:
                                yield proxy
                            stream.completion_tokens += count
                            stream.text += text
                            yield TokenDelta(text, count)
                        if choice.get("finish_reason"):
                            reason = finish_reason_named(choice["finish_reason"])
                            # vLLM's servers say which stop string matched; others do not
                            matched = choice.get("stop_reason")
                            stop = matched if isinstance(matched, str) else ""
        finally:
            if alloc is not None and self._leases is not None:
                await self._leases.forget(request.request_id, alloc)
        if stream.aborted:
            yield self._aborted(stream)
            return
        tool_calls = tuple(ToolCall(c["id"], c["name"], c["arguments"])
                           for _, c in sorted(calls.items()))
        if tool_calls:
            reason, stop = FinishReason.STOP, ""
        yield Finished(reason, stream.text, self._usage(stream, usage), self._timings(stream),
                       tool_calls, stop if reason is FinishReason.STOP else "")

    def _chat_body(self, request: GenerationRequest) -> dict[str, Any]:
        """The chat-completions body of a chat spec: the sampling of ``_body``, the messages,
        tools, tool choice and response format as the caller sent them."""
        spec = request.chat
        assert spec is not None
        body = self._body(request)
        del body["prompt"]
        body.pop("return_token_ids", None)
        body["messages"] = spec.messages()
        if spec.tools_json:
            body["tools"] = spec.tools()
            body["parallel_tool_calls"] = spec.parallel_tool_calls
            body["tool_choice"] = ({"type": "function", "function": {"name": spec.tool_name}}
                                   if spec.tool_choice is ToolChoice.FUNCTION
                                   else str(spec.tool_choice))
        if spec.response_format_json:
            body["response_format"] = spec.response_format()
        return body

    @staticmethod
    def _usage(stream: RemoteStream, usage: dict[str, Any] | None) -> Usage:
        if not usage:
            return Usage(stream.prompt_tokens, 0, stream.completion_tokens)
        details = usage.get("prompt_tokens_details") or {}
        return Usage(int(usage.get("prompt_tokens", stream.prompt_tokens)),
                     int(details.get("cached_tokens") or 0),
                     int(usage.get("completion_tokens", stream.completion_tokens)))


def _join_calls(calls: dict[int, dict[str, str]], deltas: Any) -> None:
    """Accumulate streamed tool-call deltas (id and name first, then argument fragments)."""
    for delta in deltas:
        call = calls.setdefault(int(delta.get("index", 0)),
                                {"id": "", "name": "", "arguments": ""})
        call["id"] = delta.get("id") or call["id"]
        fn = delta.get("function") or {}
        call["name"] = fn.get("name") or call["name"]
        call["arguments"] += fn.get("arguments") or ""


def _replay_endpoint(endpoint: str) -> str:
    """Convention: ``ipc:///x/kv.ipc`` replays on ``ipc:///x/kv-replay.ipc``."""
    if endpoint.startswith("ipc://") and endpoint.endswith(".ipc"):
        return endpoint[:-4] + "-replay.ipc"
    return ""


__all__ = ["LEASES_UNAVAILABLE", "OpenAIBackend", "RemoteBackend", "RemoteSettings",
           "http_error", "iter_sse_data"]
