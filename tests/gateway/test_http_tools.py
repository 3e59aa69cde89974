"""Tool calling, ``n > 1`` and JSON output through the OpenAI-compatible front, driven by the
official ``openai`` SDK against sim engines: calls and their stream deltas, reuse of
deterministic tool-calling requests, branches opened from the request's tools, and errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from services.common.values.chat import ChatSpec, ToolChoice, canonical_json
from services.engine_agent.sim.tools import SchemaSampler, parse_tool_calls, scripted_output
from services.gateway.http.chat import parse_chat, render_chat
from tests.factories import MODEL, csl_service, engine_agent
from tests.gateway.test_http_front import front, sdk

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "minLength": 2},
        "unit": {"type": "string", "enum": ["c", "f"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "unit", "days"], "additionalProperties": False}}}
FLIGHT = {"type": "function", "function": {
    "name": "book_flight", "parameters": {"type": "object", "properties": {
        "to": {"type": "string"}, "when": {"type": "string", "format": "date"},
        "seats": {"type": "array", "items": {"$ref": "#/$defs/seat"}, "minItems": 1}},
        "required": ["to", "when", "seats"],
        "$defs": {"seat": {"type": "object", "properties": {"row": {"type": "integer"}},
                           "required": ["row"]}}}}}
TOOLS = [WEATHER, FLIGHT]
ASK = [{"role": "user", "content": "Weather in Rome for 3 days, or book me a flight there."}]


def schema_of(name: str) -> dict[str, Any]:
    return next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == name)


def assert_valid_call(call: Any) -> None:
    assert call.type == "function" and call.id
    jsonschema.validate(json.loads(call.function.arguments), schema_of(call.function.name))


async def test_tool_call_answer_carries_schema_valid_tool_calls() -> None:
    async with engine_agent() as eng, front([eng.address]) as (_, base), sdk(base) as client:
        reply = await client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS,
                                                     temperature=0)
        forced = await client.chat.completions.create(
            model=MODEL, messages=ASK, tools=TOOLS, temperature=0,
            tool_choice={"type": "function", "function": {"name": "book_flight"}})
        none = await client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS,
                                                    tool_choice="none", temperature=0,
                                                    max_tokens=8)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert len(choice.message.tool_calls) == 1
    assert_valid_call(choice.message.tool_calls[0])
    assert forced.choices[0].message.tool_calls[0].function.name == "book_flight"
    assert_valid_call(forced.choices[0].message.tool_calls[0])
    assert none.choices[0].message.tool_calls is None and none.choices[0].message.content
    assert none.choices[0].finish_reason == "length"


async def test_tool_result_in_the_history_is_answered_in_text() -> None:
    async with engine_agent() as eng, front([eng.address]) as (_, base), sdk(base) as client:
        first = await client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS,
                                                     temperature=0)
        call = first.choices[0].message.tool_calls[0]
        history = [*ASK, first.choices[0].message.model_dump(exclude_none=True),
                   {"role": "tool", "tool_call_id": call.id, "content": "sunny, 24 C"}]
        second = await client.chat.completions.create(model=MODEL, messages=history,
                                                      tools=TOOLS, temperature=0, max_tokens=12)
    assert second.choices[0].message.tool_calls is None
    assert second.choices[0].message.content and second.choices[0].finish_reason == "length"


async def test_streamed_tool_call_assembles_like_the_whole_answer() -> None:
    async with engine_agent() as eng, front([eng.address]) as (_, base), sdk(base) as client:
        whole = await client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS,
                                                     temperature=0, seed=3)
        stream = await client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS,
                                                      temperature=0, seed=3, stream=True)
        chunks = [c async for c in stream]
    deltas = [d for c in chunks for d in (c.choices[0].delta.tool_calls or ())]
    assert deltas[0].id and deltas[0].function.name and deltas[0].function.arguments == ""
    assert all(d.id is None and d.function.name is None for d in deltas[1:])
    assert len(deltas) > 2  # the arguments arrive in fragments
    expected = whole.choices[0].message.tool_calls[0]
    assert deltas[0].id == expected.id and deltas[0].function.name == expected.function.name
    assert "".join(d.function.arguments for d in deltas) == expected.function.arguments
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


async def test_deterministic_tool_calling_request_is_reused_exactly(tmp_path: Path) -> None:
    async with csl_service(tmp_path / "csl") as csl, engine_agent() as eng, \
            front([eng.address], csl=csl.address) as (_, base), sdk(base) as client:
        replies = [await client.chat.completions.with_raw_response.create(
            model=MODEL, messages=ASK, tools=TOOLS, temperature=0) for _ in range(2)]
        other = await client.chat.completions.with_raw_response.create(
            model=MODEL, messages=ASK, tools=TOOLS, temperature=0, tool_choice="required")
    assert [r.headers["x-dynbranch-source"] for r in replies] == ["engine", "library"]
    first, second = (r.parse().choices[0].message for r in replies)
    assert first.tool_calls == second.tool_calls  # ids too: the stored answer, exactly
    assert other.headers["x-dynbranch-source"] == "engine"  # another tool_choice: another name


async def test_n_choices_are_served_and_only_greedy_or_seeded_ones_reused(tmp_path: Path
                                                                          ) -> None:
    chat = [{"role": "user", "content": "name three rivers"}]
    async with csl_service(tmp_path / "csl") as csl, engine_agent() as eng, \
            front([eng.address], csl=csl.address) as (_, base), sdk(base) as client:
        async def two(**kw: Any) -> tuple[list[str], str]:
            reply = await client.chat.completions.with_raw_response.create(
                model=MODEL, messages=chat, n=2, max_tokens=6, **kw)
            body = reply.parse()
            assert [c.index for c in body.choices] == [0, 1]
            assert body.usage.completion_tokens == 12
            return [c.message.content for c in body.choices], reply.headers["x-dynbranch-source"]
        greedy, source = await two(temperature=0)
        assert greedy[0] == greedy[1] and source == "engine"
        assert (await two(temperature=0))[1] == "library"
        seeded, source = await two(temperature=0.8, seed=11)
        assert seeded[0] != seeded[1] and source == "engine"
        assert await two(temperature=0.8, seed=11) == (seeded, "library")
        sampled, _ = await two(temperature=0.8)
        assert (await two(temperature=0.8))[1] == "engine"
        stream = await client.chat.completions.create(model=MODEL, messages=chat, n=2,
                                                      max_tokens=6, temperature=0.8, seed=11,
                                                      stream=True)
        texts = ["", ""]
        async for chunk in stream:
            for c in chunk.choices:
                texts[c.index] += c.delta.content or ""
    assert texts == seeded


async def test_json_schema_response_format_is_honoured() -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"},
                                               "score": {"type": "number", "minimum": 0,
                                                         "maximum": 1}},
              "required": ["answer", "score"], "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "graded", "schema": schema,
                                                  "strict": True}}
    async with engine_agent() as eng, front([eng.address]) as (_, base), sdk(base) as client:
        reply = await client.chat.completions.create(model=MODEL, messages=ASK, temperature=0,
                                                     response_format=fmt)
        obj = await client.chat.completions.create(model=MODEL, messages=ASK, temperature=0,
                                                   response_format={"type": "json_object"})
    jsonschema.validate(json.loads(reply.choices[0].message.content), schema)
    assert isinstance(json.loads(obj.choices[0].message.content), dict)


async def test_tagged_decision_offers_the_request_tools_and_a_tool_result_settles_it(
        tmp_path: Path) -> None:
    async with csl_service(tmp_path / "csl") as csl, engine_agent(model="qwen3-32b") as eng, \
            front([eng.address], csl=csl.address) as (gw, base):
        tags = {"x-dynbranch-workflow-id": "wf-tools", "x-dynbranch-stage": "routing/router"}
        async with sdk(base, **tags) as client:
            first = await client.chat.completions.create(
                model="qwen3-32b", messages=ASK, tools=TOOLS, temperature=0, max_tokens=320,
                extra_body={"dynbranch": {"inputs": {"functions": "[]", "query": "q"}}})
            branches = gw.core.branches
            (branch,) = branches.branches.values()
            call = first.choices[0].message.tool_calls[0]
            assert not branch.resolved
            history = [*ASK, first.choices[0].message.model_dump(exclude_none=True),
                       {"role": "tool", "tool_call_id": call.id, "content": "done"}]
            await client.chat.completions.create(model="qwen3-32b", messages=history,
                                                 tools=TOOLS, temperature=0, max_tokens=320)
    assert branch.resolved and branch.winner == call.function.name
    assert set(branch.fills) <= {"get_weather", "book_flight"}


BAD_TOOLS: list[tuple[str, dict[str, Any], int, str]] = [
    ("tool not a function", {"tools": [{"type": "web"}]}, 400, "tools[0].type"),
    ("bad function name", {"tools": [{"type": "function", "function": {"name": "a b"}}]}, 400,
     "tools[0].function.name"),
    ("duplicate function", {"tools": [WEATHER, WEATHER]}, 400, "tools[1].function.name"),
    ("named choice not offered", {"tools": TOOLS, "tool_choice": {
        "type": "function", "function": {"name": "nope"}}}, 400, "tool_choice"),
    ("unknown choice", {"tools": TOOLS, "tool_choice": "always"}, 400, "tool_choice"),
    ("required without tools", {"tool_choice": "required"}, 400, "tool_choice"),
    ("string parallel", {"tools": TOOLS, "parallel_tool_calls": "yes"}, 400,
     "parallel_tool_calls"),
    ("tool message without id", {"messages": [*ASK, {"role": "tool", "content": "x"}]}, 400,
     "messages[1].tool_call_id"),
    ("call without arguments", {"messages": [*ASK, {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f"}}]}]}, 400,
     "messages[1].tool_calls[0].function.arguments"),
    ("function role", {"messages": [{"role": "function", "content": "x"}]}, 400,
     "messages[0].role"),
    ("functions", {"functions": [{"name": "f"}]}, 400, "functions"),
    ("function_call", {"function_call": "auto"}, 400, "function_call"),
    ("bad response format", {"response_format": {"type": "xml"}}, 400, "response_format"),
    ("schema not an object", {"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": []}}}, 400, "response_format.json_schema.schema"),
    ("audio", {"audio": {"voice": "alloy"}}, 400, "audio"),
    ("image modality", {"modalities": ["text", "audio"]}, 400, "modalities"),
    ("prediction", {"prediction": {"type": "content", "content": "x"}}, 400, "prediction"),
    ("reasoning effort", {"reasoning_effort": "high"}, 400, "reasoning_effort"),
    ("n too large", {"n": 99}, 400, "n"),
]


@pytest.mark.parametrize("body, status, param", [b[1:] for b in BAD_TOOLS],
                         ids=[b[0] for b in BAD_TOOLS])
async def test_bad_tool_fields_get_openai_errors_naming_them(body: dict[str, Any], status: int,
                                                             param: str) -> None:
    async with engine_agent() as eng, front([eng.address]) as (_, base), \
            httpx.AsyncClient(base_url=base) as raw:
        reply = await raw.post("/v1/chat/completions",
                               json={"model": MODEL, "messages": ASK, **body})
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert error["message"].startswith(f"{param}: ")


async def test_sdk_maps_tool_errors_to_bad_request() -> None:
    async with engine_agent() as eng, front([eng.address]) as (_, base), sdk(base) as client:
        with pytest.raises(openai.BadRequestError) as bad:
            await client.chat.completions.create(
                model=MODEL, messages=ASK, tools=TOOLS,
                tool_choice={"type": "function", "function": {"name": "missing"}})
    assert bad.value.param == "tool_choice"


# -- core pieces ----------------------------------------------------------------------------


def test_rendering_with_tools_follows_the_hermes_layout_and_plain_chat_is_unchanged() -> None:
    plain = [{"role": "user", "content": "hi"}]
    assert render_chat(plain) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    history = [{"role": "system", "content": "Be brief."}, *ASK,
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "c1", "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    text = render_chat(history, TOOLS)
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    assert json.dumps(WEATHER, sort_keys=True) in text and text.count("<|im_start|>system") == 1
    assert ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n'
            '</tool_call><|im_end|>') in text
    assert text.endswith("<|im_start|>user\n<tool_response>\nsunny\n</tool_response>"
                         "<|im_end|>\n<|im_start|>assistant\n")
    parsed = parse_chat({"messages": history, "tools": TOOLS})
    assert parsed.last_called == ("get_weather",) and parsed.last_tool_result == "sunny"
    assert parsed.spec is not None and parsed.spec.tool_names() == ("get_weather", "book_flight")
    assert parse_chat({"messages": plain}).spec is None


@pytest.mark.parametrize("key", range(20))
def test_simulated_calls_are_schema_valid_and_parse_back(key: int) -> None:
    spec = ChatSpec(canonical_json(ASK), canonical_json(TOOLS), ToolChoice.REQUIRED)
    text = scripted_output(spec, key)
    assert text is not None and text == scripted_output(spec, key)
    content, calls = parse_tool_calls(text, spec, "salt")
    assert content == "" and len(calls) == 1
    jsonschema.validate(json.loads(calls[0].arguments), schema_of(calls[0].name))
    sampled = SchemaSampler({}, __import__("random").Random(key)).sample(
        {"type": ["number", "null"], "exclusiveMinimum": 5, "exclusiveMaximum": 6})
    assert 5 < sampled < 6


def test_truncated_or_unoffered_calls_stay_text() -> None:
    spec = ChatSpec(canonical_json(ASK), canonical_json(TOOLS))
    cut = '<tool_call>\n{"name": "get_weather", "argu'
    assert parse_tool_calls(cut, spec, "s") == (cut, ())
    foreign = '<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>'
    assert parse_tool_calls(foreign, spec, "s") == (foreign, ())
