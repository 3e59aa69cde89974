"""The OpenAI-compatible HTTP front, driven by the official ``openai`` SDK (and httpx for raw
bodies): chat and completions, streaming, models, exact reuse, error shapes, disconnects."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from services.engine_agent.client import EngineAgentClient
from services.gateway.http.observe import PROTOCOLS
from services.gateway.http.schema import render_chat
from tests.factories import MODEL, csl_service, engine_agent, gateway

CHAT = [{"role": "system", "content": "You route tickets."},
        {"role": "user", "content": [{"type": "text", "text": "my card was charged twice"}]}]


@asynccontextmanager
async def front(engines: list[str], **settings: Any) -> AsyncIterator[tuple[Any, str]]:
    """A gateway with its HTTP front on a free port, and the front's base URL."""
    async with gateway(engines, http_port=0, **settings) as gw:
        yield gw, f"http://127.0.0.1:{gw.http_port}"


def sdk(base: str, api_key: str = "unused", **headers: str) -> openai.AsyncOpenAI:
    """The official client, unchanged but for base URL, key and headers; no retries."""
    return openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=api_key, max_retries=0,
                              default_headers=headers)


async def sse(base: str, path: str, body: dict[str, Any]) -> tuple[httpx.Headers, list[str]]:
    """POST a streaming request; the response headers and every ``data:`` payload."""
    async with httpx.AsyncClient(timeout=30) as client, \
            client.stream("POST", f"{base}{path}", json=body) as reply:
        assert reply.status_code == 200, await reply.aread()
        assert reply.headers["content-type"].startswith("text/event-stream")
        data = [line[6:] async for line in reply.aiter_lines() if line.startswith("data: ")]
    return reply.headers, data


async def test_chat_streams_the_same_text_as_the_whole_answer() -> None:
    async with engine_agent() as eng, front([eng.address]) as (_, base), sdk(base) as client:
        whole = await client.chat.completions.create(model=MODEL, messages=CHAT, temperature=0,
                                                     max_tokens=12)
        stream = await client.chat.completions.create(model=MODEL, messages=CHAT, temperature=0,
                                                      max_tokens=12, stream=True)
        chunks = [c async for c in stream]
    assert whole.object == "chat.completion" and whole.model == MODEL
    assert whole.choices[0].message.role == "assistant"
    assert whole.choices[0].finish_reason == "length"
    assert whole.usage.completion_tokens == 12
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + 12
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == \
        whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "length"
    assert [c.choices[0].finish_reason for c in chunks[:-1]] == [None] * (len(chunks) - 1)


async def test_completion_streams_deltas_then_finish_usage_and_done() -> None:
    body = {"model": MODEL, "prompt": ["route: refund please"], "temperature": 0,
            "max_tokens": 10, "stop": ["zzz"]}
    async with engine_agent() as eng, front([eng.address]) as (_, base), sdk(base) as client:
        whole = await client.completions.create(**body)
        _, data = await sse(base, "/v1/completions",
                            {**body, "stream": True, "stream_options": {"include_usage": True}})
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert all(c["object"] == "text_completion" for c in chunks)
    *texts, finish, usage = chunks
    assert "".join(c["choices"][0]["text"] for c in texts) == whole.choices[0].text
    assert finish["choices"][0]["finish_reason"] == whole.choices[0].finish_reason
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 10
    assert set(usage["usage"]["prompt_tokens_details"]) == {"cached_tokens"}
    assert whole.object == "text_completion" and whole.usage.completion_tokens == 10


async def test_models_lists_every_served_model() -> None:
    async with engine_agent(engine_id="e0") as e0, engine_agent(engine_id="e1", model="other") \
            as e1, front([e0.address, e1.address]) as (_, base), sdk(base) as client:
        listed = [m.id async for m in client.models.list()]
        one = await client.models.retrieve("other")
        with pytest.raises(openai.NotFoundError):
            await client.models.retrieve("nope")
    assert listed == sorted(["other", MODEL]) and one.id == "other"


async def test_untagged_greedy_request_is_served_from_the_library_the_second_time(
        tmp_path: Path) -> None:
    async with csl_service(tmp_path / "csl") as csl, engine_agent() as eng, \
            front([eng.address], csl=csl.address) as (gw, base), sdk(base) as client:
        replies = [await client.chat.completions.with_raw_response.create(
            model=MODEL, messages=CHAT, temperature=0, max_tokens=8) for _ in range(2)]
        headers, data = await sse(base, "/v1/chat/completions", {
            "model": MODEL, "messages": CHAT, "temperature": 0, "max_tokens": 8, "stream": True})
        counted = {source: gw.registry.get_sample_value("dynbranch_gateway_http_requests_total", {
            "route": "/v1/chat/completions", "protocol": "openai_chat", "status": "200",
            "source": source}) for source in ("engine", "library")}
        timed = gw.registry.get_sample_value("dynbranch_gateway_http_request_seconds_count", {
            "route": "/v1/chat/completions", "protocol": "openai_chat", "status": "200",
            "source": "library"})
    assert counted == {"engine": 1.0, "library": 2.0} and timed == 2.0  # the stream's too
    sources = [r.headers["x-dynbranch-source"] for r in replies]
    assert sources == ["engine", "library"]
    names = {r.headers["x-dynbranch-reuse-name"] for r in replies}
    assert len(names) == 1 and names == {headers["x-dynbranch-reuse-name"]}
    first, second = (r.parse().choices[0].message.content for r in replies)
    assert first == second
    # A library hit streams as one content chunk between the role and the finish.
    assert headers["x-dynbranch-source"] == "library" and data[-1] == "[DONE]"
    role, content, finish = (json.loads(d)["choices"][0] for d in data[:-1])
    assert role["delta"] == {"role": "assistant", "content": ""}
    assert content["delta"] == {"content": first}
    assert finish["finish_reason"] == "length"


async def test_sampled_request_is_reused_only_with_a_seed(tmp_path: Path) -> None:
    async with csl_service(tmp_path / "csl") as csl, engine_agent() as eng, \
            front([eng.address], csl=csl.address) as (_, base), sdk(base) as client:
        async def sources(**kw: Any) -> list[str]:
            out = []
            for _ in range(2):
                reply = await client.completions.with_raw_response.create(
                    model=MODEL, prompt="tell me a story", max_tokens=6, **kw)
                out.append(reply.headers["x-dynbranch-source"])
                assert ("x-dynbranch-reuse-name" in reply.headers) == ("seed" in kw)
            return out
        assert await sources() == ["engine", "engine"]  # OpenAI's default temperature is 1.0
        assert await sources(temperature=0.7) == ["engine", "engine"]
        assert await sources(temperature=0.7, seed=7) == ["engine", "library"]


async def test_stage_header_tags_the_demand_and_unknown_stages_are_404() -> None:
    async with engine_agent(model="qwen3-32b") as eng, front([eng.address]) as (_, base):
        tagged = sdk(base, **{"x-dynbranch-stage": "routing/router",
                              "x-dynbranch-workflow-id": "wf-1"})
        async with tagged as client:
            reply = await client.completions.create(model="qwen3-32b", prompt="route this",
                                                    temperature=0, max_tokens=4)
        assert reply.choices[0].text
        async with httpx.AsyncClient(base_url=base) as raw:
            body = {"model": "qwen3-32b", "prompt": "x", "temperature": 0}
            for stage, status, needle in [("nope/router", 404, "'nope'"),
                                          ("routing/nope", 404, "'nope'"),
                                          ("routing", 400, "x-dynbranch-stage")]:
                bad = await raw.post("/v1/completions", json=body,
                                     headers={"x-dynbranch-stage": stage})
                assert bad.status_code == status and needle in bad.json()["error"]["message"]


BIG = 1 << 30
BAD: list[tuple[str, Any, int, str | None]] = [
    ("malformed json", b"{not json", 400, "body"),
    ("not an object", [1, 2], 400, "body"),
    ("missing model", {"prompt": "x"}, 400, "model"),
    ("missing prompt", {"model": MODEL}, 400, "prompt"),
    ("empty prompt", {"model": MODEL, "prompt": ""}, 400, "prompt"),
    ("two prompts", {"model": MODEL, "prompt": ["a", "b"]}, 400, "prompt"),
    ("negative max_tokens", {"model": MODEL, "prompt": "x", "max_tokens": -1}, 400, "max_tokens"),
    ("huge max_tokens", {"model": MODEL, "prompt": "x", "max_tokens": BIG}, 400, "max_tokens"),
    ("n=17", {"model": MODEL, "prompt": "x", "n": 17}, 400, "n"),
    ("tools on completions", {"model": MODEL, "prompt": "x", "tools": []}, 400, "tools"),
    ("string temperature", {"model": MODEL, "prompt": "x", "temperature": "hot"}, 400,
     "temperature"),
    ("temperature over 2", {"model": MODEL, "prompt": "x", "temperature": 3}, 400, "temperature"),
    ("boolean max_tokens", {"model": MODEL, "prompt": "x", "max_tokens": True}, 400,
     "max_tokens"),
    ("stop of numbers", {"model": MODEL, "prompt": "x", "stop": [1]}, 400, "stop"),
    ("string stream", {"model": MODEL, "prompt": "x", "stream": "yes"}, 400, "stream"),
    ("negative seed", {"model": MODEL, "prompt": "x", "seed": -1}, 400, "seed"),
    ("logprobs", {"model": MODEL, "prompt": "x", "logprobs": 2}, 400, "logprobs"),
    ("oversize prompt", {"model": MODEL, "prompt": "y" * 1_500_000}, 400, "prompt"),
    ("oversize body", b"x" * 5_000_000, 413, "body"),
]


@pytest.mark.parametrize("body, status, param", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
async def test_bad_completion_gets_openai_error_naming_the_field(body: Any, status: int,
                                                                 param: str | None) -> None:
    async with engine_agent() as eng, front([eng.address]) as (_, base):
        async with httpx.AsyncClient(base_url=base, timeout=30) as raw:
            content = body if isinstance(body, bytes) else json.dumps(body).encode()
            reply = await raw.post("/v1/completions", content=content,
                                   headers={"content-type": "application/json"})
            assert reply.status_code == status, reply.text
            error = reply.json()["error"]
            assert error["param"] == param and error["type"] == "invalid_request_error"
            assert error["message"].startswith(f"{param}: ") and set(error) == {
                "message", "type", "param", "code"}
            ok = await raw.post("/v1/completions", json={"model": MODEL, "prompt": "still up?"})
            assert ok.status_code == 200


BAD_CHAT = [
    ("messages not a list", {"messages": "hi"}, "messages"),
    ("empty messages", {"messages": []}, "messages"),
    ("unknown role", {"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ("image part", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
     "messages[0].content[0]"),
    ("content number", {"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
    ("max_completion_tokens zero", {"messages": CHAT, "max_completion_tokens": 0},
     "max_completion_tokens"),
    ("tool without function", {"messages": CHAT, "tools": [{"type": "function"}]},
     "tools[0].function"),
]


@pytest.mark.parametrize("body, param", [b[1:] for b in BAD_CHAT], ids=[b[0] for b in BAD_CHAT])
async def test_bad_chat_gets_400_naming_the_field(body: dict[str, Any], param: str) -> None:
    async with engine_agent() as eng, front([eng.address]) as (_, base):
        async with httpx.AsyncClient(base_url=base) as raw:
            reply = await raw.post("/v1/chat/completions", json={"model": MODEL, **body})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == param


async def test_every_error_is_counted_and_logged_once_rate_limited_without_the_body(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = {"model": MODEL, "messages": [{"role": "user", "content": "SECRET-PROMPT"}],
           "temperature": "hot"}
    async with (engine_agent() as eng, front([eng.address]) as (gw, base),
                httpx.AsyncClient(base_url=base, timeout=10) as raw):
        with caplog.at_level(logging.INFO, logger="services.gateway.http.observe"):
            for _ in range(5):  # the same fault: one line, the next says how many were held
                assert (await raw.post("/v1/chat/completions", json=bad)).status_code == 400
            assert (await raw.post("/v1/messages", json={"model": MODEL, "messages": [
                {"role": "user", "content": "SECRET-PROMPT"}]})).status_code == 400
            for path in ("/v1/nope/1", "/v1/nope/2"):  # any unknown path: one route label
                assert (await raw.get(path)).status_code == 404
            assert (await raw.get("/v1/chat/completions")).status_code == 405

            async def broken(*args: Any) -> None:
                raise ZeroDivisionError("the detail stays in the log")
            monkeypatch.setattr(gw.core, "call", broken)
            failed = await raw.post("/v1/responses", json={"model": MODEL, "input": "hi"})
            gw.http.app.errors.clock = lambda: 1e12  # past the interval: the held back counted
            assert (await raw.post("/v1/chat/completions", json=bad)).status_code == 400
        assert {route.path for route in gw.http.starlette.routes} == set(PROTOCOLS)
        count = functools.partial(gw.registry.get_sample_value,
                                  "dynbranch_gateway_http_requests_total")
        counts = [count({"route": route, "protocol": protocol, "status": status,
                         "source": "none"}) for route, protocol, status in (
            ("/v1/chat/completions", "openai_chat", "400"),
            ("/v1/messages", "anthropic_messages", "400"), ("unmatched", "none", "404"),
            ("/v1/chat/completions", "openai_chat", "405"),
            ("/v1/responses", "openai_responses", "500"))]
    assert counts == [6.0, 1.0, 2.0, 1.0, 1.0]
    assert failed.status_code == 500 and "detail" not in failed.text
    records = [r for r in caplog.records if r.name == "services.gateway.http.observe"]
    lines = [(r.levelname, r.getMessage()) for r in records]
    assert lines == [
        ("WARNING", "http: POST /v1/chat/completions -> 400: temperature: must be a number, "
                    "got string"),
        ("WARNING", "http: POST /v1/messages -> 400: max_tokens: required"),
        ("WARNING", "http: GET unmatched -> 404: GET /v1/nope/1: Not Found"),
        ("WARNING", "http: GET /v1/chat/completions -> 405: GET /v1/chat/completions: Method "
                    "Not Allowed"),
        ("ERROR", "http: POST /v1/responses -> 500: internal error"),
        ("WARNING", "http: POST /v1/chat/completions -> 400: temperature: must be a number, "
                    "got string (4 more like it in the last 10 s)")]
    assert records[4].exc_info[1].args == ("the detail stays in the log",)
    assert records[0].route == "/v1/chat/completions" and records[0].status == 400
    assert "SECRET-PROMPT" not in caplog.text


async def test_unknown_model_is_404_model_not_found() -> None:
    async with engine_agent() as eng, front([eng.address]) as (_, base):
        async with httpx.AsyncClient(base_url=base) as raw:
            reply = await raw.post("/v1/chat/completions",
                                   json={"model": "nope", "messages": CHAT})
            route = await raw.get("/v1/nothing-here")
            health = await raw.get("/healthz")
    assert reply.status_code == 404
    assert reply.json()["error"] | {"message": ""} == {
        "message": "", "type": "invalid_request_error", "param": "model",
        "code": "model_not_found"}
    assert route.status_code == 404 and "error" in route.json()
    assert health.status_code == 200 and health.json() == {"status": "ok"}


async def test_sdk_raises_the_matching_exception_classes() -> None:
    keys = {"key-a": "tenant-a"}
    async with engine_agent() as eng, front([eng.address], auth=True, api_keys=keys) as (_, base):
        async with sdk(base, api_key="key-a") as client:
            with pytest.raises(openai.BadRequestError) as bad:
                await client.completions.create(model=MODEL, prompt="x", max_tokens=-5)
            assert bad.value.param == "max_tokens"
            with pytest.raises(openai.NotFoundError) as missing:
                await client.chat.completions.create(model="nope", messages=CHAT)
            assert missing.value.code == "model_not_found"
            with pytest.raises(openai.BadRequestError):
                await client.chat.completions.create(model=MODEL, messages=CHAT, n=0,
                                                     stream=True)
        async with sdk(base, api_key="wrong") as client:
            with pytest.raises(openai.AuthenticationError):
                await client.chat.completions.create(model=MODEL, messages=CHAT)
            with pytest.raises(openai.AuthenticationError):
                await client.models.list()


async def test_lost_engine_is_503_and_a_missed_deadline_is_504() -> None:
    slow = {"preset": "qwen3-32b-h200", "time_scale": 1.0}
    body = {"model": MODEL, "prompt": "x", "max_tokens": 3000, "ignore_eos": True}
    async with engine_agent(**slow) as eng, front([eng.address], call_deadline_s=0.3) as (_, base):
        async with httpx.AsyncClient(base_url=base, timeout=30) as raw:
            late = await raw.post("/v1/completions", json=body)
            await eng.shutdown()
            lost = await raw.post("/v1/completions", json={**body, "max_tokens": 4})
    assert late.status_code == 504 and late.json()["error"]["code"] == "deadline_exceeded"
    assert lost.status_code == 503 and lost.json()["error"]["type"] == "server_error"


async def _wait_idle(engine_address: str) -> None:
    direct = EngineAgentClient(engine_address)
    try:
        async for view in direct.watch_load(interval_s=0.02, timeout_s=5):
            if view.running == 0 and view.waiting == 0:
                return
    finally:
        await direct.close()


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
async def test_client_that_goes_away_aborts_the_engine_work(stream: bool) -> None:
    body = {"model": MODEL, "prompt": "a very long story", "max_tokens": 3000,
            "ignore_eos": True, "temperature": 0, "stream": stream}
    async with engine_agent(preset="qwen3-32b-h200", time_scale=1.0) as eng, \
            front([eng.address]) as (_, base):
        async with httpx.AsyncClient(base_url=base, timeout=0.5) as raw:
            if stream:
                async with raw.stream("POST", "/v1/completions", json=body) as reply:
                    async for line in reply.aiter_lines():
                        if line.startswith("data: ") and json.loads(line[6:])["choices"][0]["text"]:
                            break  # generating: now hang up
            else:
                with pytest.raises(httpx.ReadTimeout):
                    await raw.post("/v1/completions", json=body)
        await _wait_idle(eng.address)  # 3000 tokens would take the engine about a minute


async def test_http_port_is_announced_and_off_by_default(capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    async with engine_agent() as eng, front([eng.address]) as (gw, _):
        gw.announce()
        line = json.loads(capsys.readouterr().out)
        assert line["http_port"] == gw.http_port and line["http_address"].endswith(
            f":{gw.http_port}")
    async with engine_agent() as eng, gateway([eng.address]) as gw:
        gw.announce()
        assert "http_port" not in json.loads(capsys.readouterr().out)
        assert gw.http is None


def test_chat_rendering_is_chatml_and_deterministic() -> None:
    assert render_chat(CHAT) == ("<|im_start|>system\nYou route tickets.<|im_end|>\n"
                                 "<|im_start|>user\nmy card was charged twice<|im_end|>\n"
                                 "<|im_start|>assistant\n")


async def test_shutdown_drains_then_ends_open_streams_with_an_error_event() -> None:
    body = {"model": MODEL, "prompt": "x", "max_tokens": 3000, "ignore_eos": True,
            "stream": True}
    async with engine_agent(preset="qwen3-32b-h200", time_scale=1.0) as eng, \
            front([eng.address], drain_delay_s=0.3) as (gw, base):
        async with httpx.AsyncClient(base_url=base, timeout=30) as raw:
            async with raw.stream("POST", "/v1/completions", json=body) as reply:
                lines = aiter(reply.aiter_lines())
                assert (await anext(lines)).startswith("data: ")
                stopping = asyncio.create_task(gw.shutdown())
                await asyncio.sleep(0.05)
                async with httpx.AsyncClient(base_url=base) as probe:  # during the drain delay
                    assert (await probe.get("/healthz")).status_code == 503
                rest = [line async for line in lines if line]
            await stopping
        await _wait_idle(eng.address)
    assert json.loads(rest[-1][6:])["error"]["code"] == "unavailable"
    assert "data: [DONE]" not in rest


async def test_dynbranch_extension_lets_http_callers_fill_and_promote(tmp_path: Path) -> None:
    from services.gateway.templates import load_builtin
    from services.gateway.templates.render import render_candidate_stage, render_stage

    routing = load_builtin("routing")
    functions = ["get_weather", "book_flight", "convert_currency"]
    inputs = {"functions": json.dumps([{"name": f} for f in functions]),
              "query": "Book me a flight to Rome."}
    router = render_stage(routing, "router", inputs)
    handler = render_candidate_stage(routing, "routing/router", "book_flight", "handler",
                                     inputs=inputs, outputs={})
    async with csl_service(tmp_path / "csl") as csl, \
            engine_agent(model="qwen3-32b", preset="qwen3-32b-h200", time_scale=0.02) as eng, \
            front([eng.address], csl=csl.address, fill_wait_s=2.0) as (_, base):
        tags = {"x-dynbranch-workflow-id": "wf-http"}
        async with sdk(base, **tags, **{"x-dynbranch-stage": "routing/router"}) as client:
            await client.completions.create(
                model="qwen3-32b", prompt=router.text, temperature=0, max_tokens=64,
                extra_body={"dynbranch": {"inputs": inputs, "offered": functions}})
        async with sdk(base, **tags, **{"x-dynbranch-stage": "routing/handler"}) as client:
            raw = await client.completions.with_raw_response.create(
                model="qwen3-32b", prompt=handler.text, temperature=0, max_tokens=256)
    assert raw.headers["x-dynbranch-source"] == "promoted_fill"


async def test_dynbranch_extension_fields_are_validated() -> None:
    async with engine_agent() as eng, front([eng.address]) as (_, base):
        async with httpx.AsyncClient(timeout=10) as client:
            reply = await client.post(f"{base}/v1/completions", json={
                "model": MODEL, "prompt": "x", "dynbranch": {"inputs": {"a": 1}}})
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "dynbranch.inputs"
