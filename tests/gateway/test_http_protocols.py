"""The OpenAI Responses API and Anthropic's Messages API on the HTTP front, driven by the
official ``openai`` and ``anthropic`` clients against sim engines: plain, streamed, tool-call
round trips, structured output, the same conversation reused across protocols, tagged
settlement, count_tokens, auth and errors in each protocol's own shape."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anthropic
import httpx
import jsonschema
import openai
import pytest

from tests.factories import MODEL, csl_service, engine_agent
from tests.gateway.test_http_front import front, sdk

PARAMS = {"type": "object", "properties": {"city": {"type": "string", "minLength": 2}},
          "required": ["city"], "additionalProperties": False}
CHAT_TOOL = {"type": "function", "function": {"name": "get_weather",
                                              "description": "Weather in a city.",
                                              "parameters": PARAMS}}
RESP_TOOL = {"type": "function", "name": "get_weather", "description": "Weather in a city.",
             "parameters": PARAMS}
MSG_TOOL = {"name": "get_weather", "description": "Weather in a city.", "input_schema": PARAMS}
FLIGHT = {"name": "book_flight", "input_schema": {"type": "object", "properties": {
    "to": {"type": "string"}}, "required": ["to"]}}
SYSTEM = "You answer briefly."
ASK = "What is the weather in Oslo?"
GREEDY = {"temperature": 0}  # newer Anthropic clients send no sampling fields: extra_body


def claude(base: str, api_key: str = "unused") -> anthropic.AsyncAnthropic:
    """The official Anthropic client, unchanged but for base URL and key; no retries."""
    return anthropic.AsyncAnthropic(base_url=base, api_key=api_key, max_retries=0)


@asynccontextmanager
async def served(tmp_path: Path | None = None, **settings: Any
                 ) -> AsyncIterator[tuple[Any, str]]:
    """A sim engine and a gateway front (with a csl when ``tmp_path`` is given)."""
    async with engine_agent() as eng:
        if tmp_path is None:
            async with front([eng.address], **settings) as served_front:
                yield served_front
            return
        async with csl_service(tmp_path / "csl") as csl, \
                front([eng.address], csl=csl.address, **settings) as served_front:
            yield served_front


# -- the Responses API --------------------------------------------------------------------------


async def test_responses_whole_and_streamed_answers_agree_in_the_documented_events() -> None:
    async with served() as (_, base), sdk(base) as client:
        whole = await client.responses.create(model=MODEL, input=ASK, instructions=SYSTEM,
                                              temperature=0, max_output_tokens=12,
                                              metadata={"run": "1"})
        stream = await client.responses.create(model=MODEL, input=ASK, instructions=SYSTEM,
                                               temperature=0, max_output_tokens=12,
                                               stream=True)
        events = [e async for e in stream]
    assert whole.object == "response" and whole.id.startswith("resp_")
    assert whole.status == "incomplete"
    assert whole.incomplete_details.reason == "max_output_tokens"
    assert whole.output_text and whole.usage.output_tokens == 12
    assert whole.metadata == {"run": "1"} and whole.instructions == SYSTEM
    kinds = [e.type for e in events]
    deltas = kinds.count("response.output_text.delta")
    assert deltas >= 1 and kinds == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added", *["response.output_text.delta"] * deltas,
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.incomplete"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == whole.output_text == events[-1].response.output_text


async def test_responses_function_call_round_trip_and_streamed_arguments() -> None:
    async with served() as (_, base), sdk(base) as client:
        first = await client.responses.create(model=MODEL, input=ASK, tools=[RESP_TOOL],
                                              temperature=0)
        (call,) = first.output
        stream = await client.responses.create(model=MODEL, input=ASK, tools=[RESP_TOOL],
                                               temperature=0, stream=True)
        events = [e async for e in stream]
        history = [{"role": "user", "content": ASK}, *[o.model_dump() for o in first.output],
                   {"type": "function_call_output", "call_id": call.call_id,
                    "output": "18 C, light rain"}]
        second = await client.responses.create(model=MODEL, input=history, tools=[RESP_TOOL],
                                               temperature=0, max_output_tokens=10)
    assert call.type == "function_call" and call.name == "get_weather" and call.call_id
    jsonschema.validate(json.loads(call.arguments), PARAMS)
    assert first.status == "completed"
    kinds = [e.type for e in events]
    assert kinds[:3] == ["response.created", "response.in_progress",
                         "response.output_item.added"]
    assert "response.function_call_arguments.done" in kinds and kinds[-1] == "response.completed"
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert args == call.arguments
    # The tool's result in the input: the model answers in text.
    assert [o.type for o in second.output] == ["message"] and second.output_text


async def test_responses_json_schema_output_is_schema_valid() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"},
                                               "celsius": {"type": "integer"}},
              "required": ["city", "celsius"], "additionalProperties": False}
    async with served() as (_, base), sdk(base) as client:
        reply = await client.responses.create(
            model=MODEL, input=ASK, temperature=0, max_output_tokens=200,
            text={"format": {"type": "json_schema", "name": "weather", "schema": schema}})
    jsonschema.validate(json.loads(reply.output_text), schema)
    assert reply.text.format.type == "json_schema"


# -- the Messages API ---------------------------------------------------------------------------


async def test_messages_whole_and_streamed_answers_agree() -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": ASK,
                                              "cache_control": {"type": "ephemeral"}}]}]
    async with served() as (_, base), claude(base) as client:
        whole = await client.messages.create(model=MODEL, max_tokens=12, system=SYSTEM,
                                             messages=messages, extra_body=GREEDY)
        async with client.messages.stream(model=MODEL, max_tokens=12, system=SYSTEM,
                                          messages=messages, extra_body=GREEDY) as stream:
            kinds = [event.type async for event in stream]
            final = await stream.get_final_message()
    assert whole.type == "message" and whole.role == "assistant" and whole.id.startswith("msg_")
    assert whole.stop_reason == "max_tokens" and whole.usage.output_tokens == 12
    assert whole.usage.input_tokens + whole.usage.cache_read_input_tokens > 0
    assert [b.type for b in whole.content] == ["text"] and whole.content[0].text
    assert final.content[0].text == whole.content[0].text
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 12
    raw = [k for k in kinds if k not in ("text",)]  # the SDK adds its own "text" events
    assert raw[0] == "message_start" and raw[1] == "content_block_start"
    assert raw[-3:] == ["content_block_stop", "message_delta", "message_stop"]


async def test_a_stop_sequence_that_ends_the_answer_is_named_also_when_served_again(
        tmp_path: Path) -> None:
    """The engine says which stop string ended the text; a library hit keeps it."""
    messages = [{"role": "user", "content": ASK}]
    async with served(tmp_path) as (_, base), claude(base) as client:
        free = await client.messages.create(model=MODEL, max_tokens=24, messages=messages,
                                            extra_body=GREEDY)
        words = free.content[0].text.split()
        stop = words[len(words) // 2]
        cut = await client.messages.create(model=MODEL, max_tokens=24, messages=messages,
                                           stop_sequences=[stop], extra_body=GREEDY)
        async with client.messages.stream(model=MODEL, max_tokens=24, messages=messages,
                                          stop_sequences=[stop], extra_body=GREEDY) as stream:
            streamed = await stream.get_final_message()
        again = await client.messages.with_raw_response.create(
            model=MODEL, max_tokens=24, messages=messages, stop_sequences=[stop],
            extra_body=GREEDY)
        hit = await again.parse()
    assert again.headers["x-dynbranch-source"] == "library"
    assert hit.stop_reason == "stop_sequence" and hit.stop_sequence == stop
    assert free.stop_reason == "max_tokens" and free.stop_sequence is None
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == stop
    assert stop not in cut.content[0].text and free.content[0].text.startswith(
        cut.content[0].text)
    assert streamed.stop_reason == "stop_sequence" and streamed.stop_sequence == stop


async def test_messages_tool_use_round_trip_and_tool_choices() -> None:
    tools = [MSG_TOOL, FLIGHT]
    ask = [{"role": "user", "content": ASK}]
    async with served() as (_, base), claude(base) as client:
        first = await client.messages.create(model=MODEL, max_tokens=128, tools=tools,
                                             messages=ask, extra_body=GREEDY)
        (use,) = first.content
        history = [*ask, {"role": "assistant", "content": [b.model_dump() for b in first.content]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                                 "content": "18 C, light rain"}]}]
        second = await client.messages.create(model=MODEL, max_tokens=10, tools=tools,
                                              messages=history, extra_body=GREEDY)
        anyone = await client.messages.create(model=MODEL, max_tokens=128, tools=tools,
                                              messages=ask, tool_choice={"type": "any"},
                                              extra_body=GREEDY)
        named = await client.messages.create(
            model=MODEL, max_tokens=128, tools=tools, messages=ask, extra_body=GREEDY,
            tool_choice={"type": "tool", "name": "book_flight"})
        none = await client.messages.create(model=MODEL, max_tokens=8, tools=tools,
                                            messages=ask, tool_choice={"type": "none"},
                                            extra_body=GREEDY)
        async with client.messages.stream(model=MODEL, max_tokens=128, tools=tools,
                                          messages=ask, tool_choice={"type": "tool",
                                                                     "name": "book_flight"},
                                          extra_body=GREEDY) as stream:
            streamed = await stream.get_final_message()
    assert first.stop_reason == "tool_use" and use.type == "tool_use"
    jsonschema.validate(use.input, next(t["input_schema"] for t in tools
                                        if t["name"] == use.name))
    assert second.stop_reason == "max_tokens" and [b.type for b in second.content] == ["text"]
    assert anyone.stop_reason == "tool_use" and anyone.content[0].type == "tool_use"
    assert named.content[0].name == "book_flight" and isinstance(named.content[0].input["to"],
                                                                  str)
    assert [b.type for b in none.content] == ["text"]
    assert streamed.content[0].type == "tool_use" and streamed.stop_reason == "tool_use"
    assert streamed.content[0].input == named.content[0].input


async def test_count_tokens_is_the_prompt_the_engine_reads() -> None:
    messages = [{"role": "user", "content": ASK}]
    async with served() as (_, base), claude(base) as client:
        count = await client.messages.count_tokens(model=MODEL, system=SYSTEM, tools=[MSG_TOOL],
                                                   messages=messages)
        plain = await client.messages.count_tokens(model=MODEL, messages=messages)
        reply = await client.messages.create(model=MODEL, max_tokens=4, system=SYSTEM,
                                             tools=[MSG_TOOL], messages=messages,
                                             tool_choice={"type": "none"}, extra_body=GREEDY)
    used = reply.usage.input_tokens + reply.usage.cache_read_input_tokens
    assert count.input_tokens == used and plain.input_tokens < count.input_tokens


async def test_count_tokens_refuses_fields_it_does_not_take_by_name() -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": ASK}]}
    async with served() as (_, base), httpx.AsyncClient(base_url=base) as raw:
        extra = await raw.post("/v1/messages/count_tokens",
                               json={**body, "max_tokens": 10_000_000, "temperature": 0})
        every = await raw.post("/v1/messages/count_tokens", json={
            **body, "system": SYSTEM, "tools": [MSG_TOOL], "tool_choice": {"type": "auto"},
            "thinking": {"type": "disabled"}, "mcp_servers": [], "context_management": None,
            "output_config": {}})
    assert extra.status_code == 400 and extra.json()["error"]["type"] == "invalid_request_error"
    assert extra.json()["error"]["message"].startswith(
        "max_tokens: Extra inputs are not permitted")
    assert every.status_code == 200 and every.json()["input_tokens"] > 0


# -- one arrival, every protocol ----------------------------------------------------------------


async def test_the_same_conversation_has_one_reuse_name_on_every_protocol(tmp_path: Path) -> None:
    call_id, args = "call_7", '{"city":"Oslo"}'
    chat = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ASK},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": "get_weather", "arguments": args}}]},
            {"role": "tool", "tool_call_id": call_id, "content": "18 C"}]
    items = [{"role": "user", "content": ASK},
             {"type": "function_call", "call_id": call_id, "name": "get_weather",
              "arguments": args},
             {"type": "function_call_output", "call_id": call_id, "output": "18 C"}]
    turns = [{"role": "user", "content": ASK},
             {"role": "assistant", "content": [{"type": "tool_use", "id": call_id,
                                                "name": "get_weather",
                                                "input": {"city": "Oslo"}}]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id,
                                           "content": "18 C"}]}]
    async with served(tmp_path) as (_, base), sdk(base) as oai, claude(base) as ant:
        replies = [
            await oai.chat.completions.with_raw_response.create(
                model=MODEL, messages=chat, tools=[CHAT_TOOL], temperature=0, max_tokens=9),
            await oai.responses.with_raw_response.create(
                model=MODEL, instructions=SYSTEM, input=items, tools=[RESP_TOOL],
                temperature=0, max_output_tokens=9),
            await ant.messages.with_raw_response.create(
                model=MODEL, system=SYSTEM, messages=turns, tools=[MSG_TOOL], max_tokens=9,
                extra_body=GREEDY)]
        texts = [replies[0].parse().choices[0].message.content,
                 replies[1].parse().output_text, (await replies[2].parse()).content[0].text]
    names = {r.headers["x-dynbranch-reuse-name"] for r in replies}
    assert len(names) == 1 and names != {""}
    assert [r.headers["x-dynbranch-source"] for r in replies] == ["engine", "library", "library"]
    assert len(set(texts)) == 1 and texts[0]


async def test_a_tool_result_on_messages_settles_the_tagged_branch(tmp_path: Path) -> None:
    tags = {"x-dynbranch-workflow-id": "wf-msg", "x-dynbranch-stage": "routing/router"}
    ask = [{"role": "user", "content": ASK}]
    context = {"dynbranch": {"inputs": {"functions": "[]", "query": ASK}}, **GREEDY}
    async with served(tmp_path) as (gw, base), claude(base) as client:
        first = await client.messages.create(model=MODEL, max_tokens=320,
                                             tools=[MSG_TOOL, FLIGHT], messages=ask,
                                             extra_headers=tags, extra_body=context)
        (branch,) = gw.core.branches.branches.values()
        assert not branch.resolved
        (use,) = first.content
        history = [*ask, {"role": "assistant", "content": [use.model_dump()]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                                 "content": "done"}]}]
        await client.messages.create(model=MODEL, max_tokens=320, tools=[MSG_TOOL, FLIGHT],
                                     messages=history, extra_headers=tags, extra_body=GREEDY)
    assert branch.resolved and branch.winner == use.name
    assert set(branch.fills) <= {"get_weather", "book_flight"}


# -- auth and errors ----------------------------------------------------------------------------


async def test_keys_from_x_api_key_or_bearer_and_anthropic_shaped_auth_errors() -> None:
    keys = {"k-acme": "acme"}
    async with served(auth=True, api_keys=keys) as (_, base):
        async with claude(base, api_key="k-acme") as good:
            ok = await good.messages.create(model=MODEL, max_tokens=4, extra_body=GREEDY,
                                            messages=[{"role": "user", "content": "hi"}])
        async with httpx.AsyncClient(base_url=base) as raw:
            bearer = await raw.post("/v1/messages", headers={"authorization": "Bearer k-acme"},
                                    json={"model": MODEL, "max_tokens": 4,
                                          "messages": [{"role": "user", "content": "hi"}]})
        async with claude(base, api_key="wrong") as bad:
            with pytest.raises(anthropic.AuthenticationError) as refused:
                await bad.messages.create(model=MODEL, max_tokens=4,
                                          messages=[{"role": "user", "content": "hi"}])
        async with sdk(base, api_key="wrong") as oai:
            with pytest.raises(openai.AuthenticationError):
                await oai.responses.create(model=MODEL, input="hi")
    assert ok.content[0].text and bearer.status_code == 200
    assert refused.value.body == {"type": "error", "error": {
        "type": "authentication_error", "message": "unknown API key"}}


MSG = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
BAD_MESSAGES: list[tuple[dict[str, Any], int, str, str]] = [
    ({"max_tokens": None}, 400, "invalid_request_error", "max_tokens: required"),
    ({"max_tokens": 0}, 400, "invalid_request_error", "max_tokens: must be >= 1"),
    ({"model": "nope"}, 404, "not_found_error", "The model 'nope' does not exist"),
    ({"messages": []}, 400, "invalid_request_error", "messages: must be a non-empty array"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, 400,
     "invalid_request_error", "messages[0].content[0].type: "),
    ({"messages": [{"role": "system", "content": "x"}]}, 400, "invalid_request_error",
     "messages[0].role: "),
    ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, 400, "invalid_request_error",
     "thinking: is not supported"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, 400,
     "invalid_request_error", "tools[0].type: "),
    ({"tools": [MSG_TOOL], "tool_choice": {"type": "tool", "name": "nope"}}, 400,
     "invalid_request_error", "tool_choice.name: "),
    ({"tool_choice": {"type": "any"}}, 400, "invalid_request_error", "tool_choice: 'any' needs"),
    ({"temperature": 1.5}, 400, "invalid_request_error", "temperature: must be in [0, 1]"),
    ({"stop_sequences": "x"}, 400, "invalid_request_error", "stop_sequences: "),
    ({"output_config": {"effort": "high"}}, 400, "invalid_request_error",
     "output_config.effort: "),
]
RESP = {"model": MODEL, "input": "hi"}
BAD_RESPONSES: list[tuple[dict[str, Any], int, str]] = [
    ({"store": True}, 400, "store"),
    ({"previous_response_id": "resp_1"}, 400, "previous_response_id"),
    ({"reasoning": {"effort": "high"}}, 400, "reasoning"),
    ({"background": True}, 400, "background"),
    ({"include": ["reasoning.encrypted_content"]}, 400, "include"),
    ({"tools": [{"type": "web_search"}]}, 400, "tools[0].type"),
    ({"input": [{"type": "reasoning", "summary": []}]}, 400, "input[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}, 400,
     "input[0].content[0].type"),
    ({"input": []}, 400, "input"),
    ({"text": {"format": {"type": "json_schema"}}}, 400, "text.format.name"),
    ({"tool_choice": {"type": "function", "name": "nope"}}, 400, "tool_choice"),
    ({"max_output_tokens": 0}, 400, "max_output_tokens"),
    ({"model": "nope"}, 404, "model"),
]


async def test_malformed_bodies_get_each_protocols_error_shape() -> None:
    async with served() as (_, base), httpx.AsyncClient(base_url=base) as raw:
        messages = [(await raw.post("/v1/messages", json={**MSG, **b}), b) for b, *_ in
                    BAD_MESSAGES]
        responses = [(await raw.post("/v1/responses", json={**RESP, **b}), b) for b, *_ in
                     BAD_RESPONSES]
        not_json = await raw.post("/v1/messages", content=b"{", headers={
            "content-type": "application/json"})
        count = await raw.post("/v1/messages/count_tokens", json={"model": MODEL})
    for (reply, body), (_, status, kind, message) in zip(messages, BAD_MESSAGES, strict=True):
        assert reply.status_code == status, (body, reply.text)
        assert reply.json()["type"] == "error", body
        assert reply.json()["error"]["type"] == kind, (body, reply.text)
        assert reply.json()["error"]["message"].startswith(message), (body, reply.text)
    for (reply, body), (_, status, param) in zip(responses, BAD_RESPONSES, strict=True):
        assert reply.status_code == status, (body, reply.text)
        assert reply.json()["error"]["param"] == param, (body, reply.text)
    assert not_json.status_code == 400 and not_json.json()["error"]["message"] == \
        "body: not valid JSON"
    assert count.status_code == 400 and count.json()["error"]["message"].startswith("messages:")
