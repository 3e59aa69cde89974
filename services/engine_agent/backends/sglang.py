"""``sglang`` backend: a remote SGLang server over its native API.

* ``POST /generate`` with ``{"text", "sampling_params", "rid", "stream": true}``
  (``GenerateReqInput``, ``python/sglang/srt/managers/io_struct.py``); the reply is server-sent
  events ``data: {"text", "output_ids", "meta_info"}`` ending with ``data: [DONE]``, errors as
  ``data: {"error": {"message"}}`` (``python/sglang/srt/entrypoints/http_server.py``).
  ``text`` is cumulative (``tokenizer_manager.py`` appends each detokenized piece to
  ``state.text``); an incremental server is tolerated. ``meta_info`` carries ``id``,
  ``prompt_tokens``, ``completion_tokens`` (cumulative), ``cached_tokens`` and ``finish_reason``
  (``null`` or ``{"type": "length"|"stop"|"abort", ...}``).
* ``POST /abort_request`` with ``{"rid", "abort_all": false}`` (``AbortReq``), and the stream is
  closed too: SGLang notices a disconnect only on its ~4 s poll.
* ``GET /metrics``: ``sglang:num_running_reqs``, ``sglang:num_queue_reqs``,
  ``sglang:token_usage``, ``sglang:cache_hit_rate``.

Verified live against SGLang 0.5.23 on the CPU (tests/real_engine/test_sglang_server.py; the
server from ``scripts/install_sglang.sh``, started by ``backends/servers.py``) as well as against
the schema (tests/engine_agent/test_sglang_protocol.py). As observed there: short outputs may
arrive in fewer chunks than tokens; a running request aborted by rid ends with
``{"type": "abort"}`` and its partial text, a queued one with none; the load gauges refresh at
prefill and every ``--decode-log-interval`` decode steps; with priority scheduling each gauge is
exported per priority beside its ``priority=""`` total (``totals_only``). Prefix leases (which
would map onto ``RadixCache.inc_lock_ref``/``dec_lock_ref``) need the engine in-process and are
not available remotely.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

from services.common.values.errors import InvalidArgument
from services.common.values.generation import (
    FinishReason,
    GenerationRequest,
    Priority,
    Sampling,
    Usage,
)
from services.engine_agent.backend import (
    Finished,
    GenerationEvent,
    Queued,
    TokenDelta,
    finish_reason_named,
)
from services.engine_agent.backends.http import estimate_tokens
from services.engine_agent.backends.remote.backend import (
    RemoteBackend,
    RemoteSettings,
    RemoteStream,
)


def sampling_params(s: Sampling) -> dict[str, Any]:
    """Our sampling values in SGLang's ``sampling_params`` schema (``sampling_params.py``)."""
    params: dict[str, Any] = {
        "max_new_tokens": s.max_tokens, "temperature": s.temperature, "top_p": s.top_p,
        "ignore_eos": s.ignore_eos,
    }
    if s.top_k > 0:  # SGLang: -1 disables top-k and 0 is rejected, so leave it out
        params["top_k"] = s.top_k
    if s.stop:
        params["stop"] = list(s.stop)
    if s.seed is not None:
        params["sampling_seed"] = s.seed
    return params


def matched_stop(meta: dict[str, Any]) -> str:
    """The stop string ``meta_info.finish_reason.matched`` names ("" for a token id or none)."""
    raw = meta.get("finish_reason")
    matched = raw.get("matched") if isinstance(raw, dict) else None
    return matched if isinstance(matched, str) else ""


def finish_reason(meta: dict[str, Any]) -> FinishReason | None:
    """``meta_info.finish_reason`` (``None``, a dict with ``type``, or a bare string)."""
    raw = meta.get("finish_reason")
    if raw is None:
        return None
    kind = raw.get("type") if isinstance(raw, dict) else raw
    return finish_reason_named(str(kind))


class SglangBackend(RemoteBackend):
    """``EngineBackend`` over SGLang's native ``/generate``."""

    backend_name = "sglang"

    def __init__(self, settings: RemoteSettings, client: Any = None) -> None:
        if settings.flavor != "sglang":
            settings = RemoteSettings(**{**_fields(settings), "flavor": "sglang"})
        super().__init__(settings, client)

    @classmethod
    def from_settings(cls, settings: Any) -> SglangBackend:
        """Build from ``EngineAgentSettings`` (``engine_url``)."""
        if not settings.engine_url:
            raise InvalidArgument("engine_url", "the sglang backend needs the server's URL")
        return cls(RemoteSettings(
            base_url=settings.engine_url, model=settings.model, flavor="sglang",
            max_running=settings.max_running or 256, block_size=settings.block_size,
            kv_blocks_total=settings.kv_blocks, fill_priority=settings.fill_priority))

    async def _discover(self) -> None:
        resp = await self.get("/get_server_info")
        if resp.status_code != 200:
            return  # optional: facts then come from the settings and /metrics
        info = resp.json()
        for key, fact in (("context_length", "max_model_len"),
                          ("max_running_requests", "max_running"),
                          ("page_size", "block_size"), ("max_total_num_tokens", "kv_tokens")):
            value = info.get(key)
            if isinstance(value, int) and value > 0:
                self._facts[fact] = value
        if "kv_tokens" in self._facts:
            self._facts["num_blocks"] = self._facts.pop("kv_tokens") // max(
                self._facts.get("block_size", 1), 1)

    def _metrics_page(self, text: str) -> str:
        """SGLang's totals only.

        With ``--enable-priority-scheduling`` SGLang 0.5.23 exports each gauge once per priority
        (``priority="0"``, ``"-1"``) beside the total (``priority=""``); summing every series
        would count each request twice, so the per-priority series are dropped first.
        """
        return totals_only(text)

    async def _abort_remote(self, request_id: str) -> None:
        with contextlib.suppress(Exception):
            await self._client.post("/abort_request", json={"rid": request_id, "abort_all": False},
                                    timeout=self.settings.connect_timeout_s)

    async def reset_prefix_cache(self) -> bool:
        """Flush the server's radix cache (between runs that share one started server); False
        when the server refuses (requests still run or wait)."""
        resp = await self._client.post("/flush_cache", timeout=self.settings.connect_timeout_s)
        return resp.status_code == 200

    def _chunk_error(self, error: Any) -> str:
        return str(error.get("message", error))  # ``{"error": {"message": ...}}``

    def _body(self, request: GenerationRequest) -> dict[str, Any]:
        body = {"text": request.prompt, "sampling_params": sampling_params(request.sampling),
                "rid": request.request_id, "stream": True}
        priority = self.settings.priority_of(request.priority == Priority.FILL)
        if priority is not None:
            body["priority"] = priority
        return body

    async def _exchange(self, stream: RemoteStream) -> AsyncIterator[GenerationEvent]:
        request = stream.request
        stream.prompt_tokens = estimate_tokens(request.prompt)  # exact once meta_info arrives
        yield Queued(stream.prompt_tokens, self._snapshot.waiting)
        text, reason = "", None
        meta: dict[str, Any] = {}
        chunks = self._chunks(stream, "/generate", self._body(request))
        async with contextlib.aclosing(chunks):
            async for chunk in chunks:
                meta = chunk.get("meta_info") or meta
                stream.prompt_tokens = int(meta.get("prompt_tokens") or stream.prompt_tokens)
                delta, text = _text_delta(text, chunk.get("text") or "")
                stream.text = text
                tokens = int(meta.get("completion_tokens") or 0) - stream.completion_tokens
                if delta or tokens > 0:
                    if (alloc := self._first_token(stream, int(meta.get("cached_tokens") or 0))):
                        yield alloc
                    stream.completion_tokens += max(tokens, 0)
                    yield TokenDelta(delta, max(tokens, 0))
                reason = finish_reason(meta) or reason
        if stream.aborted:
            yield self._aborted(stream)
            return
        usage = Usage(stream.prompt_tokens, int(meta.get("cached_tokens") or 0),
                      int(meta.get("completion_tokens") or stream.completion_tokens))
        yield Finished(reason or FinishReason.ERROR, text, usage, self._timings(stream),
                       stop_string=matched_stop(meta) if reason is FinishReason.STOP else "")


_PER_PRIORITY = re.compile(r'[{,]priority="[^"]+"')
_TOTAL = re.compile(r'[{,]priority=""')


def totals_only(page: str) -> str:
    """The metrics page without SGLang's per-priority series (``priority="<value>"``) of every
    metric that also has a total series (``priority=""``); counters exported per priority only
    (``sglang:generation_tokens_total``) are kept whole."""
    lines = page.splitlines()
    totalled = {line.split("{", 1)[0] for line in lines
                if not line.startswith("#") and _TOTAL.search(line)}
    return "\n".join(line for line in lines if line.startswith("#")
                     or line.split("{", 1)[0] not in totalled or not _PER_PRIORITY.search(line))


def _text_delta(previous: str, received: str) -> tuple[str, str]:
    """(new text, cumulative text) for a cumulative or an incremental stream."""
    if received.startswith(previous):
        return received[len(previous):], received
    return received, previous + received


def _fields(settings: RemoteSettings) -> dict[str, Any]:
    return {name: getattr(settings, name) for name in settings.__dataclass_fields__}


__all__ = ["SglangBackend", "finish_reason", "matched_stop", "sampling_params", "totals_only"]
