"""Protocol tests: the ``sglang`` backend against SGLang's native HTTP schema, not a live SGLang.

SGLang cannot run on this project's CPU machines, so these tests pin the client to the request
and response shapes SGLang's source defines (sgl-project/sglang):

* request ``GenerateReqInput``: ``text``, ``sampling_params``, ``rid``, ``stream`` —
  ``python/sglang/srt/managers/io_struct.py``;
* ``sampling_params``: ``max_new_tokens``, ``temperature``, ``top_p``, ``top_k`` (-1 disables,
  0 rejected), ``stop``, ``ignore_eos``, ``sampling_seed`` —
  ``python/sglang/srt/sampling/sampling_params.py``;
* streaming reply ``data: {"text", "output_ids", "meta_info"}`` per chunk with cumulative
  ``text``, errors as ``data: {"error": {"message"}}``, closed by ``data: [DONE]`` —
  ``python/sglang/srt/entrypoints/http_server.py`` (``generate_request``) and
  ``python/sglang/srt/managers/tokenizer_manager.py`` (``meta_info``: ``id``, ``finish_reason``,
  ``prompt_tokens``, ``completion_tokens``, ``cached_tokens``);
* ``finish_reason`` JSON ``{"type": "length", "length": n}``, ``{"type": "stop", "matched":
  ...}``, ``{"type": "abort", "message": ...}`` —
  ``python/sglang/srt/managers/schedule_batch.py``;
* ``POST /abort_request {"rid", "abort_all"}`` (``AbortReq``) and the ``sglang:*`` metrics.

The backend stays unverified against a live SGLang until these run against one.
"""

from __future__ import annotations

import httpx
import pytest

from services.common.values.errors import (
    InvalidArgument,
    PayloadTooLarge,
    Unavailable,
    Unimplemented,
)
from services.common.values.generation import FinishReason, GenerationRequest, Sampling
from services.engine_agent.backend import Allocated, Finished, Queued, TokenDelta
from services.engine_agent.backends.openai import RemoteSettings
from services.engine_agent.backends.sglang import (
    SglangBackend,
    finish_reason,
    matched_stop,
    sampling_params,
)
from tests.engine_agent.fake_engines import (
    DONE,
    FakeEngine,
    event_stream,
    generate_and_abort,
    sse,
)

SGLANG_METRICS = """\
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="tiny"} 3.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="tiny"} 4.0
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="tiny"} 0.5
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="tiny"} 0.75
"""


def meta(rid: str, completion: int, finish=None, cached: int = 4) -> dict:
    return {"id": rid, "finish_reason": finish, "prompt_tokens": 9,
            "completion_tokens": completion, "cached_tokens": cached, "e2e_latency": 0.1}


class FakeSglang(FakeEngine):
    """SGLang's /generate, /abort_request, /get_server_info, /health and /metrics."""

    metrics = SGLANG_METRICS
    facts = {"/get_server_info": {"context_length": 4096, "max_running_requests": 48,
                                  "page_size": 1, "max_total_num_tokens": 20000}}

    def __init__(self, pieces: list[str], finish: dict | None = None, delay: float = 0.0,
                 error: str | None = None) -> None:
        super().__init__(pieces, delay)
        self.error = error
        self.finish = finish or {"type": "length", "length": len(pieces)}
        self.generate_bodies: list[dict] = []
        self.aborts: list[dict] = []
        self.flushes = 0
        #: As SGLang answers a flush while requests run or wait.
        self.busy = False

    def post(self, path: str, body: dict, request: httpx.Request) -> httpx.Response:
        if path == "/abort_request":
            self.aborts.append(body)
            return httpx.Response(200)
        if path == "/flush_cache":
            self.flushes += 1
            return httpx.Response(400 if self.busy else 200, text="Cache flushed.\n")
        assert path == "/generate"
        self.generate_bodies.append(body)
        return event_stream(self.stream(body["rid"]))

    async def stream(self, rid: str):
        text = ""
        if self.error:
            yield sse({"error": {"message": self.error}})
        async for i, piece, last in self.paced():
            text += piece  # cumulative, as tokenizer_manager sends it
            yield sse({"text": text, "output_ids": [i],
                       "meta_info": meta(rid, i + 1, self.finish if last else None)})
        yield DONE


def backend_for(server: FakeSglang) -> SglangBackend:
    return SglangBackend(RemoteSettings(base_url="http://sglang", model="tiny",
                                        poll_interval_s=60), client=server.client("http://sglang"))


def request(rid: str = "s1", **sampling) -> GenerationRequest:
    return GenerationRequest(rid, "tiny", "hello there", Sampling(**{"max_tokens": 8, **sampling}))


def test_sampling_params_follow_sglang_schema() -> None:
    assert sampling_params(Sampling(max_tokens=8)) == {
        "max_new_tokens": 8, "temperature": 0.0, "top_p": 1.0, "ignore_eos": False}
    full = sampling_params(Sampling(max_tokens=4, temperature=0.7, top_k=20, seed=3,
                                    stop=("\n",), ignore_eos=True))
    assert full["top_k"] == 20 and full["sampling_seed"] == 3 and full["stop"] == ["\n"]
    assert full["ignore_eos"] is True


@pytest.mark.parametrize("raw, expected", [
    (None, None),
    ({"type": "length", "length": 8}, FinishReason.LENGTH),
    ({"type": "stop", "matched": 2}, FinishReason.STOP),
    ({"type": "stop", "matched": "\n"}, FinishReason.STOP),
    ({"type": "abort", "message": "client disconnected"}, FinishReason.ABORT),
    ("length", FinishReason.LENGTH),
    ({"type": "mystery"}, FinishReason.ERROR),
])
def test_finish_reason_json(raw, expected) -> None:
    assert finish_reason({"finish_reason": raw}) == expected


def test_the_matched_stop_string_is_kept_and_a_matched_token_id_is_not() -> None:
    assert matched_stop({"finish_reason": {"type": "stop", "matched": "\n\n"}}) == "\n\n"
    assert matched_stop({"finish_reason": {"type": "stop", "matched": 2}}) == ""
    assert matched_stop({"finish_reason": "stop"}) == "" and matched_stop({}) == ""


async def test_generate_request_and_cumulative_stream() -> None:
    server = FakeSglang(["Hel", "lo", " world"], finish={"type": "stop", "matched": 2})
    backend = backend_for(server)
    await backend.start()
    events = [ev async for ev in backend.generate(request(seed=5))]
    body = server.generate_bodies[0]
    assert body == {"text": "hello there", "rid": "s1", "stream": True,
                    "sampling_params": {"max_new_tokens": 8, "temperature": 0.0, "top_p": 1.0,
                                        "ignore_eos": False, "sampling_seed": 5}}
    assert isinstance(events[0], Queued)
    assert events[1] == Allocated(4, events[1].queue_s)  # cached_tokens from meta_info
    assert [e.text for e in events if isinstance(e, TokenDelta)] == ["Hel", "lo", " world"]
    assert all(e.tokens == 1 for e in events if isinstance(e, TokenDelta))
    fin = events[-1]
    assert isinstance(fin, Finished) and fin.reason == FinishReason.STOP
    assert fin.text == "Hello world"
    assert (fin.usage.prompt_tokens, fin.usage.cached_prompt_tokens,
            fin.usage.completion_tokens) == (9, 4, 3)
    await backend.close()


async def test_abort_posts_abort_request_and_closes() -> None:
    server = FakeSglang(["x"] * 40, delay=0.02)
    backend = backend_for(server)
    await backend.start()
    events = await generate_and_abort(backend, request("s2", max_tokens=40), after=3)
    assert server.aborts == [{"rid": "s2", "abort_all": False}]
    assert isinstance(events[-1], Finished) and events[-1].reason == FinishReason.ABORT
    await backend.close()


async def test_a_prefix_cache_reset_flushes_the_radix_cache_or_reports_the_refusal() -> None:
    server = FakeSglang([])
    backend = backend_for(server)
    await backend.start()
    assert await backend.reset_prefix_cache() is True
    server.busy = True  # SGLang refuses while requests run or wait
    assert await backend.reset_prefix_cache() is False
    assert server.flushes == 2
    await backend.close()


async def test_inline_error_maps_to_our_errors() -> None:
    backend = backend_for(FakeSglang([], error="The input (5000 tokens) is longer than the "
                                                "model's context length (4096 tokens)."))
    await backend.start()
    with pytest.raises(PayloadTooLarge):
        _ = [ev async for ev in backend.generate(request())]
    await backend.close()
    backend = backend_for(FakeSglang([], error="top_k must be -1 (disable), or at least 1"))
    await backend.start()
    with pytest.raises(InvalidArgument):
        _ = [ev async for ev in backend.generate(request())]
    await backend.close()


async def test_load_and_facts_from_sglang_metrics_and_server_info() -> None:
    backend = backend_for(FakeSglang(["x"]))
    await backend.start()
    load = backend.load()
    assert (load.running, load.waiting, load.max_running) == (3, 4, 48)
    assert load.kv_blocks_total == 20000 and load.kv_blocks_used == 10000
    assert backend.snapshot.hit_rate == 0.75 and backend.info.max_model_len == 4096
    assert backend.info.backend == "sglang" and not backend.info.leases_supported
    with pytest.raises(Unimplemented):
        await backend.lease_prefix("x", "L", 1.0)
    await backend.close()


class DroppingSglang(FakeSglang):
    """Drops the first ``drops`` scrapes of /metrics as a server closing a reused keep-alive
    connection does (the request went out; no response came)."""

    def __init__(self, drops: int) -> None:
        super().__init__(["x"])
        self.drops = drops

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics" and self.drops > 0:
            self.drops -= 1
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.",
                                            request=request)
        return await super().handle(request)


async def test_a_scrape_over_a_connection_the_server_dropped_is_sent_once_more() -> None:
    dropping = DroppingSglang(drops=1)
    backend = backend_for(dropping)
    await backend.start()  # its first scrape met the dropped connection
    assert dropping.drops == 0 and backend.load().running == 3
    server = DroppingSglang(drops=2)  # dropped twice running: the engine is unreachable
    again = backend_for(server)
    server.drops = 0
    await again.start()
    server.drops = 2
    with pytest.raises(Unavailable, match="unreachable"):
        await again.refresh_load()
    await backend.close()
    await again.close()


PRIORITY_PAGE = """\
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",priority=""} 3.0
sglang:num_running_reqs{model_name="m",priority="0"} 2.0
sglang:num_running_reqs{model_name="m",priority="-1"} 1.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m",priority=""} 1.0
sglang:num_queue_reqs{model_name="m",priority="-1"} 1.0
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="m",priority="0"} 40.0
sglang:generation_tokens_total{model_name="m",priority="-1"} 2.0
"""


def test_per_priority_series_are_not_counted_twice_beside_their_totals() -> None:
    from services.engine_agent.backends.remote.engine_metrics import SGLANG, parse_metrics
    from services.engine_agent.backends.sglang import totals_only

    snap = parse_metrics(totals_only(PRIORITY_PAGE), SGLANG)
    assert (snap.running, snap.waiting) == (3, 1)  # SGLang 0.5.23 with priority scheduling
    kept = totals_only(PRIORITY_PAGE)
    assert kept.count("generation_tokens_total{") == 2  # no total series: every one is kept
