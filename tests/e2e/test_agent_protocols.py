"""The OpenAI Responses API and Anthropic's Messages API end to end against ``dynbranch up``'s
HTTP front on simulated engines, through the official ``openai`` and ``anthropic`` clients
(unchanged but for base URL and key): ``responses.create`` plain, streamed, a function-call
round trip with ``function_call_output`` and json_schema output; ``messages.create`` plain,
streamed with ``messages.stream``, a ``tool_use`` → ``tool_result`` round trip, tool_choice
``any`` and a named tool; malformed bodies answered in each protocol's error shape.

One ``dynbranch up`` process (every service its own process) serves the whole module."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import anthropic
import httpx
import jsonschema
import openai
import pytest

from tests.test_cli import up_url

pytestmark = pytest.mark.slow
MODEL = "qwen3-32b"
PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
RESP_TOOL = {"type": "function", "name": "get_weather", "description": "Current weather.",
             "parameters": PARAMS}
MSG_TOOL = {"name": "get_weather", "description": "Current weather.", "input_schema": PARAMS}
FLIGHT = {"name": "book_flight", "input_schema": {"type": "object", "properties": {
    "to": {"type": "string"}}, "required": ["to"]}}
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``dynbranch up`` with two sim engines; its HTTP root (``http://host:port``)."""
    with up_url(["--engines", "2", "--time-scale", "0.01", "--log-level", "WARNING"],
                tmp_path_factory.mktemp("up"), r"anthropic messages API: (http://\S+)") as root:
        yield root


def oai(root: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)


def claude(root: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=root, api_key="unused", max_retries=0)


def fresh(text: str) -> str:
    return f"{text} ({uuid.uuid4().hex[:6]})"  # a module run never hits an earlier entry


async def test_responses_plain_streamed_function_round_trip_and_json_schema(root: str) -> None:
    ask = fresh("What is the weather in Oslo?")
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    async with oai(root) as client:
        plain = await client.responses.with_raw_response.create(
            model=MODEL, input=ask, temperature=0, max_output_tokens=16)
        again = await client.responses.with_raw_response.create(
            model=MODEL, input=ask, temperature=0, max_output_tokens=16)
        stream = await client.responses.create(model=MODEL, input=ask, temperature=0,
                                               max_output_tokens=16, stream=True)
        events = [e async for e in stream]
        first = await client.responses.create(model=MODEL, input=ask, tools=[RESP_TOOL],
                                              temperature=0)
        (call,) = first.output
        # The SDK's stream helper assembles a completed response (a cut one ends incomplete).
        async with client.responses.stream(model=MODEL, input=ask, tools=[RESP_TOOL],
                                           temperature=0) as helper:
            assembled = await helper.get_final_response()
        second = await client.responses.create(
            model=MODEL, tools=[RESP_TOOL], temperature=0, max_output_tokens=12,
            input=[{"role": "user", "content": ask}, *[o.model_dump() for o in first.output],
                   {"type": "function_call_output", "call_id": call.call_id, "output": "18 C"}])
        shaped = await client.responses.create(
            model=MODEL, input=ask, temperature=0, max_output_tokens=100,
            text={"format": {"type": "json_schema", "name": "answer", "schema": schema}})
    assert [r.headers["x-dynbranch-source"] for r in (plain, again)] == ["engine", "library"]
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.incomplete"
    assert plain.parse().output_text == again.parse().output_text == \
        "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert assembled.output[0].arguments == call.arguments
    assert call.type == "function_call" and call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), PARAMS)
    assert second.output[0].type == "message" and second.output_text
    jsonschema.validate(json.loads(shaped.output_text), schema)


async def test_messages_plain_streamed_tool_round_trip_and_tool_choices(root: str) -> None:
    ask = [{"role": "user", "content": fresh("What is the weather in Oslo?")}]
    tools = [MSG_TOOL, FLIGHT]
    async with claude(root) as client:
        plain = await client.messages.create(model=MODEL, max_tokens=16, messages=ask,
                                             system="Be brief.", extra_body=GREEDY)
        async with client.messages.stream(model=MODEL, max_tokens=16, messages=ask,
                                          system="Be brief.", extra_body=GREEDY) as stream:
            streamed = await stream.get_final_message()
        first = await client.messages.create(model=MODEL, max_tokens=128, messages=ask,
                                             tools=tools, extra_body=GREEDY)
        (use,) = first.content
        second = await client.messages.create(
            model=MODEL, max_tokens=12, tools=tools, extra_body=GREEDY, messages=[
                *ask, {"role": "assistant", "content": [use.model_dump()]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                              "content": "18 C"}]}])
        anyone = await client.messages.create(model=MODEL, max_tokens=128, messages=ask,
                                              tools=tools, tool_choice={"type": "any"},
                                              extra_body=GREEDY)
        named = await client.messages.create(model=MODEL, max_tokens=128, messages=ask,
                                             tools=tools, extra_body=GREEDY,
                                             tool_choice={"type": "tool", "name": "book_flight"})
    assert plain.stop_reason == "max_tokens" and plain.content[0].text
    assert streamed.content[0].text == plain.content[0].text
    assert first.stop_reason == "tool_use" and use.type == "tool_use"
    assert second.stop_reason == "max_tokens" and second.content[0].type == "text"
    assert anyone.stop_reason == "tool_use" and anyone.content[0].name in ("get_weather",
                                                                           "book_flight")
    assert named.content[0].name == "book_flight"
    jsonschema.validate(named.content[0].input, FLIGHT["input_schema"])


async def test_malformed_bodies_get_each_protocols_error_shape(root: str) -> None:
    async with claude(root) as ant, oai(root) as client:
        with pytest.raises(anthropic.BadRequestError) as no_max:
            await ant.messages.create(model=MODEL, max_tokens=0,
                                      messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(anthropic.NotFoundError) as no_model:
            await ant.messages.create(model="nope", max_tokens=4,
                                      messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.BadRequestError) as stored:
            await client.responses.create(model=MODEL, input="hi", store=True)
    async with httpx.AsyncClient(base_url=root) as raw:
        broken = await raw.post("/v1/messages", content=b"[", headers={
            "content-type": "application/json", "anthropic-version": "2023-06-01"})
    assert no_max.value.body["error"] == {"type": "invalid_request_error",
                                          "message": "max_tokens: must be >= 1, got 0"}
    assert no_model.value.body["error"]["type"] == "not_found_error"
    assert stored.value.param == "store"
    assert broken.status_code == 400 and broken.json() == {
        "type": "error", "error": {"type": "invalid_request_error",
                                   "message": "body: not valid JSON"}}


async def test_anthropic_client_tagged_by_the_interceptor_opens_a_branch_that_promotes(
        root: str) -> None:
    """The tagging interceptor with the ``anthropic`` client: a router request sent through
    Messages, tagged only by ``tagged()`` blocks, opens the branch; the handler is promoted."""
    from services.gateway.tagging import async_tagging_client, tagged
    from tests.e2e.test_agent_frameworks import handler_prompt, routing_inputs

    inputs = routing_inputs()
    ant = anthropic.AsyncAnthropic(
        base_url=root, api_key="unused", max_retries=0,
        http_client=async_tagging_client(anthropic.DefaultAsyncHttpxClient))
    sdk = openai.AsyncOpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0,
                             http_client=async_tagging_client(openai.DefaultAsyncHttpxClient))
    async with ant, sdk:
        with tagged(workflow_type="routing", workflow_id=f"wf-{uuid.uuid4().hex[:8]}"):
            with tagged(stage="routing/router"):
                routed = await ant.messages.with_raw_response.create(
                    model=MODEL, max_tokens=320, tools=[MSG_TOOL, FLIGHT],
                    tool_choice={"type": "any"},
                    messages=[{"role": "user", "content": inputs["query"]}],
                    extra_body={**GREEDY, "dynbranch": {"inputs": inputs}})
            message = await routed.parse()
            chosen = next(b.name for b in message.content if b.type == "tool_use")
            with tagged(stage="routing/handler"):
                handled = await sdk.completions.with_raw_response.create(
                    model=MODEL, prompt=handler_prompt(inputs, chosen), temperature=0,
                    max_tokens=256)
    assert chosen in ("get_weather", "book_flight")
    assert routed.headers["x-dynbranch-source"] == "engine"
    assert handled.headers["x-dynbranch-source"] == "promoted_fill"
