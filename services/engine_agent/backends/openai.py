"""``openai`` backend: any OpenAI-compatible server (``vllm serve``, SGLang's server), remote.

``/v1/completions`` with streaming (``/v1/chat/completions`` for a chat spec: tools, tool choice
and response format pass through to the server, which renders them with the model's chat
template and parses the calls; the streamed call deltas are joined here); abort by closing the
stream (vLLM aborts a request when its
client disconnects); load from ``/metrics`` by name; prefix residency from the engine's KV-cache
events over ZMQ (``kv_events``), matched against the prompt's tokens from ``/tokenize``.

Prefix leases need the engine's block pool, which a remote server does not expose: this backend
says so (``leases_supported=False``, ``lease_prefix`` raises ``Unimplemented``) and the delivery
path falls back to Cache-first. ``Allocated`` is a proxy here: it is sent with the first streamed
token (late by the prefill), with the cached-token count the residency map predicts.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx

from services.common.values.chat import ToolCall, ToolChoice
from services.common.values.errors import (
    FailedPrecondition,
    InvalidArgument,
    PayloadTooLarge,
    Unavailable,
)
from services.common.values.generation import FinishReason, GenerationRequest, Priority, Usage
from services.engine_agent.backend import (
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


class OpenAIBackend(RemoteBackend):
    """``EngineBackend`` over an OpenAI-compatible ``/v1/completions`` server."""

    backend_name = "openai"
    tools_supported = True

    @classmethod
    def from_settings(cls, settings: Any) -> OpenAIBackend:
        """Build from ``EngineAgentSettings`` (``engine_url``, ``kv_events_endpoint``)."""
        if not settings.engine_url:
            raise InvalidArgument("engine_url", "the openai backend needs the server's URL")
        endpoint = settings.kv_events_endpoint
        return cls(RemoteSettings(
            base_url=settings.engine_url, model=settings.model,
            max_running=settings.max_running or 256, block_size=settings.block_size,
            kv_blocks_total=settings.kv_blocks, kv_events_endpoint=endpoint,
            kv_events_replay_endpoint=_replay_endpoint(endpoint),
            fill_priority=settings.fill_priority))

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
        chunks = self._chunks(stream, path, body)
        async with contextlib.aclosing(chunks):
            async for chunk in chunks:
                usage = chunk.get("usage") or usage
                for choice in chunk.get("choices") or ():
                    delta = choice.get("delta") or {}
                    _join_calls(calls, delta.get("tool_calls") or ())
                    text = choice.get("text") or delta.get("content") or ""
                    tokens = choice.get("token_ids")
                    count = len(tokens) if tokens is not None else (1 if text else 0)
                    if count or text:
                        if (alloc := self._first_token(stream, predicted)) is not None:
                            yield alloc
                        stream.completion_tokens += count
                        stream.text += text
                        yield TokenDelta(text, count)
                    if choice.get("finish_reason"):
                        reason = finish_reason_named(choice["finish_reason"])
                        # vLLM's servers say which stop string matched; others do not
                        matched = choice.get("stop_reason")
                        stop = matched if isinstance(matched, str) else ""
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
