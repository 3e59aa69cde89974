"""The ``openai`` backend against an in-memory OpenAI-compatible server (httpx.MockTransport).

The server speaks vLLM's dialect (``/v1/models`` with ``max_model_len``, ``/tokenize``,
``/v1/completions`` streaming with ``token_ids`` and a final usage chunk, ``/metrics``); the live
counterpart is tests/real_engine/test_openai_server.py.
"""

from __future__ import annotations

import httpx
import pytest

from services.common.values.errors import (
    AlreadyExists,
    InvalidArgument,
    PayloadTooLarge,
    Unavailable,
    Unimplemented,
)
from services.common.values.generation import FinishReason, GenerationRequest, Priority, Sampling
from services.engine_agent.backend import Allocated, Finished, Queued, TokenDelta
from services.engine_agent.backends.openai import (
    LEASES_UNAVAILABLE,
    OpenAIBackend,
    RemoteSettings,
    http_error,
)
from tests.engine_agent.fake_engines import (
    DONE,
    FakeEngine,
    event_stream,
    generate_and_abort,
    sse,
)

METRICS = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} 1.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.25
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 3000.0
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 1408.0
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",num_gpu_blocks="400",enable_prefix_caching="True"} 1.0
"""


class FakeVllm(FakeEngine):
    """vLLM's OpenAI-compatible server, scripted; records what it was sent."""

    metrics = METRICS
    facts = {"/v1/models": {"data": [{"id": "tiny", "max_model_len": 64}]}}

    def __init__(self, pieces: list[str] | None = None, delay: float = 0.0,
                 finish: tuple[str, object] = ("length", None)) -> None:
        super().__init__(pieces if pieces is not None else ["Hel", "lo", "!"], delay)
        #: The last choice's finish_reason and vLLM's stop_reason (the stop string matched).
        self.finish = finish
        self.bodies: list[dict] = []
        self.headers: list[httpx.Headers] = []

    def post(self, path: str, body: dict, request: httpx.Request) -> httpx.Response:
        if path == "/tokenize":
            return httpx.Response(200, json={"tokens": list(range(len(body["prompt"].split())))})
        self.bodies.append(body)
        self.headers.append(request.headers)
        if body["max_tokens"] == 999:
            return httpx.Response(400, json={"error": {"message": "bad top_p"}})
        return event_stream(self.stream())

    async def stream(self):
        async for i, piece, last in self.paced():
            choice = {"index": 0, "text": piece, "token_ids": [i],
                      "finish_reason": self.finish[0] if last else None,
                      "stop_reason": self.finish[1] if last else None}
            yield sse({"choices": [choice]})
        usage = {"prompt_tokens": 5, "completion_tokens": len(self.pieces),
                 "prompt_tokens_details": {"cached_tokens": 2}}
        yield sse({"choices": [], "usage": usage})
        yield DONE


def make_backend(server: FakeVllm) -> OpenAIBackend:
    return OpenAIBackend(RemoteSettings(base_url="http://engine", model="tiny",
                                        poll_interval_s=60), client=server.client("http://engine"))


def req(rid: str = "r1", prompt: str = "a b c d e", **sampling) -> GenerationRequest:
    return GenerationRequest(rid, "tiny", prompt, Sampling(**{"max_tokens": 3, **sampling}))


async def collect(backend: OpenAIBackend, request: GenerationRequest) -> list:
    return [ev async for ev in backend.generate(request)]


async def test_streams_queued_allocated_deltas_and_usage() -> None:
    server = FakeVllm()
    backend = make_backend(server)
    await backend.start()
    events = await collect(backend, req(seed=7, stop=("\n",), ignore_eos=True))
    assert isinstance(events[0], Queued) and events[0].prompt_tokens == 5
    assert isinstance(events[1], Allocated)
    assert [e.text for e in events if isinstance(e, TokenDelta)] == ["Hel", "lo", "!"]
    fin = events[-1]
    assert isinstance(fin, Finished) and fin.reason == FinishReason.LENGTH
    assert fin.text == "Hello!" and fin.usage.cached_prompt_tokens == 2
    assert fin.usage.prompt_tokens == 5 and fin.usage.completion_tokens == 3
    body = server.bodies[0]
    assert body["stream"] and body["stream_options"] == {"include_usage": True}
    assert body["seed"] == 7 and body["stop"] == ["\n"] and body["ignore_eos"] is True
    assert body["temperature"] == 0.0 and body["top_k"] == -1 and body["request_id"] == "r1"
    assert server.headers[0]["x-request-id"] == "r1"
    await backend.close()


async def test_load_comes_from_metrics_by_name() -> None:
    backend = make_backend(FakeVllm())
    await backend.start()
    load = backend.load()
    assert (load.running, load.waiting) == (2, 1)
    assert load.kv_blocks_total == 400 and load.kv_blocks_used == 100 and load.block_size == 128
    assert (load.prefix_query_tokens, load.prefix_hit_tokens) == (3000, 1408)
    assert backend.info.max_model_len == 64 and backend.info.block_size == 128
    await backend.close()


async def test_abort_closes_the_stream() -> None:
    server = FakeVllm(pieces=["x"] * 50, delay=0.02)
    backend = make_backend(server)
    await backend.start()
    events = await generate_and_abort(backend, req("slow", max_tokens=50), after=4)
    assert isinstance(events[-1], Finished) and events[-1].reason == FinishReason.ABORT
    await server.assert_stopped()
    assert await backend.abort("slow") is False  # finished: unknown now
    await backend.close()


async def test_closing_the_generator_closes_the_stream() -> None:
    server = FakeVllm(pieces=["x"] * 50, delay=0.02)
    backend = make_backend(server)
    await backend.start()
    gen = backend.generate(req("c1", max_tokens=50))
    async for ev in gen:
        if isinstance(ev, TokenDelta):
            break
    await gen.aclose()
    await server.assert_stopped()
    assert backend.load().fill_running == 0
    await backend.close()


async def test_errors_map_onto_the_tree() -> None:
    backend = make_backend(FakeVllm())
    await backend.start()
    with pytest.raises(InvalidArgument):
        await collect(backend, req(max_tokens=999, prompt="a"))
    with pytest.raises(PayloadTooLarge):
        await collect(backend, req(prompt=" ".join(["w"] * 70)))
    with pytest.raises(InvalidArgument):
        backend.generate(req(top_p=0.0))
    assert isinstance(http_error(400, "This model's maximum context length is 2048"),
                      PayloadTooLarge)
    assert isinstance(http_error(503, "overloaded"), Unavailable)
    await backend.close()


async def test_duplicate_request_id_is_refused() -> None:
    server = FakeVllm(pieces=["x"] * 5, delay=0.05)
    backend = make_backend(server)
    await backend.start()
    gen = backend.generate(req("dup"))
    await gen.__anext__()
    with pytest.raises(AlreadyExists):
        backend.generate(req("dup"))
    await gen.aclose()
    await backend.close()


async def test_leases_are_unavailable_remotely() -> None:
    backend = make_backend(FakeVllm())
    await backend.start()
    assert backend.info.leases_supported is False
    assert backend.info.extra["leases"] == LEASES_UNAVAILABLE
    with pytest.raises(Unimplemented, match="Cache-first"):
        await backend.lease_prefix("abc", "L1", 1.0)
    lookup = await backend.lookup_prefix("a b c")
    assert lookup.resident_tokens == 0 and lookup.prompt_tokens == 3  # no KV events configured
    await backend.close()


async def test_down_server_is_unavailable() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    client = httpx.AsyncClient(transport=httpx.MockTransport(refuse), base_url="http://engine")
    backend = OpenAIBackend(RemoteSettings(base_url="http://engine", model="tiny"), client=client)
    with pytest.raises(Unavailable):
        await backend.start()
    await backend.close()


async def test_fill_occupancy_counts_allocated_fills() -> None:
    server = FakeVllm(pieces=["x"] * 10, delay=0.02)
    backend = make_backend(server)
    await backend.start()
    fill = GenerationRequest("f1", "tiny", "a b c", Sampling(max_tokens=10), Priority.FILL)
    gen = backend.generate(fill)
    async for ev in gen:
        if isinstance(ev, TokenDelta):
            break
    assert backend.load().fill_running == 1 and backend.load().fill_kv_blocks == 1
    await gen.aclose()
    assert backend.load().fill_running == 0
    await backend.close()


async def test_the_stop_string_vllm_names_is_kept_and_a_stop_token_id_is_not() -> None:
    for stop_reason, expected in (("\n", "\n"), (2, ""), (None, "")):
        backend = make_backend(FakeVllm(finish=("stop", stop_reason)))
        await backend.start()
        fin = (await collect(backend, req(stop=("\n",))))[-1]
        assert fin.reason is FinishReason.STOP and fin.stop_string == expected
        await backend.close()
