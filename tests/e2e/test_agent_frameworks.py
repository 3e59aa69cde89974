"""Agent frameworks, unchanged but for base URL, key and optional headers, end to end against
``dynbranch up``'s OpenAI-compatible front on simulated engines: the official ``openai`` SDK
(tool calls, streamed tool calls, ``n=2``), LangChain's ``ChatOpenAI.bind_tools``, a LangGraph
prebuilt ReAct agent whose repeated run is served from the library, a tagged LangGraph run that
promotes an early fill, the same promotion with the tags set by the tagging interceptor (from a
context with the ``openai`` SDK; from the thread id and node names for a LangGraph agent with a
conditional edge), the OpenAI Agents SDK with a function tool, and every script of
``examples/`` as a user runs it (the examples block of docs/api.md), with warnings as errors (a
deprecated API fails it).

One ``dynbranch up`` process (every service its own process) serves the whole module."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import httpx
import jsonschema
import openai
import pytest
from langgraph.graph.message import add_messages

from tests.test_cli import up_url

pytestmark = pytest.mark.slow
MODEL = "qwen3-32b"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
ASK = [{"role": "user", "content": "What is the weather in Oslo?"}]
EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.py"))


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``dynbranch up`` with two sim engines; its OpenAI base URL (``http://host:port/v1``)."""
    with up_url(["--engines", "2", "--time-scale", "0.01", "--log-level", "WARNING"],
                tmp_path_factory.mktemp("up"), r"openai-compatible API: (\S+/v1)") as url:
        yield url


def client(base_url: str, **headers: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0,
                              default_headers=headers)


# -- the official openai SDK ----------------------------------------------------------------


async def test_openai_sdk_tool_calls_streamed_calls_and_two_choices(base_url: str) -> None:
    async with client(base_url) as sdk:
        whole = await sdk.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER],
                                                  temperature=0)
        stream = await sdk.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER],
                                                   temperature=0, stream=True)
        chunks = [c async for c in stream]
        two = await sdk.chat.completions.create(model=MODEL, messages=ASK, n=2, max_tokens=8,
                                                temperature=0.9, seed=5)
    call = whole.choices[0].message.tool_calls[0]
    assert whole.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])
    deltas = [d for c in chunks for d in c.choices[0].delta.tool_calls or ()]
    assert (deltas[0].id, deltas[0].function.name) == (call.id, "get_weather")
    assert "".join(d.function.arguments or "" for d in deltas) == call.function.arguments
    assert [c.index for c in two.choices] == [0, 1]
    assert two.choices[0].message.content != two.choices[1].message.content


# -- LangChain and LangGraph ----------------------------------------------------------------


def chat_model(base_url: str, **kw: Any) -> Any:
    """LangChain's ChatOpenAI on the gateway; its own HTTP client, since LangChain's shared
    default one would outlive this test's event loop."""
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=MODEL, base_url=base_url, api_key="unused", temperature=0,
                      max_retries=0, include_response_headers=True,
                      http_async_client=httpx.AsyncClient(timeout=60), **kw)


def weather_tool() -> Any:
    from langchain_core.tools import tool

    @tool
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        return f"{city}: 18 C, light rain"

    return get_weather


async def test_langchain_bind_tools_gets_a_tool_call(base_url: str) -> None:
    model = chat_model(base_url).bind_tools([weather_tool()])
    reply = await model.ainvoke("What is the weather in Oslo?")
    (call,) = reply.tool_calls
    assert call["name"] == "get_weather" and isinstance(call["args"]["city"], str)
    assert reply.response_metadata["finish_reason"] == "tool_calls"


async def test_langgraph_react_agent_repeated_run_is_served_from_the_library(base_url: str
                                                                             ) -> None:
    from langgraph.prebuilt import create_react_agent

    # LangGraph's prebuilt ReAct agent (LangGraph 1.x points to langchain.agents instead)
    with pytest.warns(DeprecationWarning):
        agent = create_react_agent(chat_model(base_url), [weather_tool()])
    question = {"messages": [("user", f"Weather in Oslo? ({uuid.uuid4().hex[:6]})")]}
    runs = [await agent.ainvoke(question) for _ in range(2)]
    for messages in (r["messages"] for r in runs):
        kinds = [m.type for m in messages]
        assert kinds == ["human", "ai", "tool", "ai"]  # call the tool, read it, answer
        assert messages[1].tool_calls[0]["name"] == "get_weather" and messages[3].content
    sources = [[m.response_metadata["headers"]["x-dynbranch-source"] for m in r["messages"]
                if m.type == "ai"] for r in runs]
    assert sources == [["engine", "engine"], ["library", "library"]]
    assert [m.content for m in runs[0]["messages"][1:]] == \
        [m.content for m in runs[1]["messages"][1:]]


class RouteState(TypedDict):
    """State of the tagged routing graph (messages accumulate, as in LangGraph's MessagesState)."""

    messages: Annotated[list[Any], add_messages]
    handled: str
    source: str


async def test_tagged_langgraph_run_promotes_the_early_fill(base_url: str) -> None:
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool
    from langchain_openai import OpenAI
    from langgraph.graph import END, START, StateGraph
    from langgraph.prebuilt import ToolNode

    from services.gateway.templates import load_builtin
    from services.gateway.templates.render import render_candidate_stage

    @tool
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        return f"{city}: 18 C"

    @tool
    def book_flight(to: str) -> str:
        """Book a flight."""
        return f"booked to {to}"

    query = "What is the weather in Oslo?"
    inputs = {"functions": json.dumps([{"name": "get_weather"}, {"name": "book_flight"}]),
              "query": query}
    tags = {"x-dynbranch-workflow-id": f"wf-{uuid.uuid4().hex[:8]}"}
    router = chat_model(base_url, max_tokens=320, extra_body={"dynbranch": {"inputs": inputs}},
                        default_headers={**tags, "x-dynbranch-stage": "routing/router"}
                        ).bind_tools([get_weather, book_flight], tool_choice="required")
    handler = OpenAI(model=MODEL, base_url=base_url, api_key="unused", temperature=0,
                     max_tokens=256, max_retries=0, http_async_client=httpx.AsyncClient(),
                     default_headers={**tags, "x-dynbranch-stage": "routing/handler"})
    routing = load_builtin("routing")

    async def route(state: RouteState) -> dict[str, Any]:
        return {"messages": [await router.ainvoke(state["messages"])]}

    async def handle(state: RouteState) -> dict[str, Any]:
        chosen = next(m for m in state["messages"] if m.type == "ai").tool_calls[0]["name"]
        prompt = render_candidate_stage(routing, "routing/router", chosen, "handler",
                                        inputs=inputs, outputs={}).text
        raw = await handler.async_client.with_raw_response.create(
            model=MODEL, prompt=prompt, temperature=0, max_tokens=256)
        return {"handled": chosen, "source": raw.headers["x-dynbranch-source"]}

    graph = StateGraph(RouteState)
    graph.add_node("route", route)
    graph.add_node("tools", ToolNode([get_weather, book_flight]))
    graph.add_node("handle", handle)
    graph.add_edge(START, "route")
    graph.add_edge("route", "tools")
    graph.add_edge("tools", "handle")
    graph.add_edge("handle", END)
    out = await graph.compile().ainvoke({"messages": [HumanMessage(query)], "handled": "",
                                         "source": ""})
    assert out["handled"] in ("get_weather", "book_flight")
    assert out["source"] == "promoted_fill"


# -- the tagging interceptor: tags from a context, not from headers set by hand -----------------


def routing_inputs() -> dict[str, str]:
    """The routing template's inputs for a query no other test asks (so its router runs)."""
    return {"functions": json.dumps([{"name": "get_weather"}, {"name": "book_flight"}]),
            "query": f"What is the weather in Oslo? ({uuid.uuid4().hex[:6]})"}


def handler_prompt(inputs: dict[str, str], chosen: str) -> str:
    """The routing template's handler prompt for the chosen function (what its fill ran)."""
    from services.gateway.templates import load_builtin
    from services.gateway.templates.render import render_candidate_stage

    return render_candidate_stage(load_builtin("routing"), "routing/router", chosen, "handler",
                                  inputs=inputs, outputs={}).text


async def test_openai_sdk_tagged_by_context_promotes_the_early_fill(base_url: str) -> None:
    from services.gateway.tagging import async_tagging_client, tagged

    inputs = routing_inputs()
    sdk = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0,
                             http_client=async_tagging_client(openai.DefaultAsyncHttpxClient))
    tools = [WEATHER, {"type": "function", "function": {
        "name": "book_flight", "description": "Book a flight.",
        "parameters": {"type": "object", "properties": {"to": {"type": "string"}}}}}]
    async with sdk:
        with tagged(workflow_type="routing", workflow_id=f"wf-{uuid.uuid4().hex[:8]}"):
            with tagged(stage="routing/router"):
                routed = await sdk.chat.completions.with_raw_response.create(
                    model=MODEL, messages=[{"role": "user", "content": inputs["query"]}],
                    tools=tools, tool_choice="required", temperature=0, max_tokens=320,
                    extra_body={"dynbranch": {"inputs": inputs}})
            chosen = routed.parse().choices[0].message.tool_calls[0].function.name

            async def handle() -> Any:  # a task of its own: it inherits the tags
                with tagged(stage="routing/handler"):
                    return await sdk.completions.with_raw_response.create(
                        model=MODEL, prompt=handler_prompt(inputs, chosen), temperature=0,
                        max_tokens=256)

            handled = await asyncio.create_task(handle())
    assert chosen in ("get_weather", "book_flight")
    assert routed.headers["x-dynbranch-source"] == "engine"
    assert handled.headers["x-dynbranch-source"] == "promoted_fill"


class TaggedRouteState(TypedDict):
    messages: Annotated[list[Any], add_messages]
    handled: str
    source: str


async def test_langgraph_agent_tagged_by_the_interceptor_promotes_the_early_fill(
        base_url: str) -> None:
    """A router node and a handler node behind a conditional edge; the nodes and the models
    carry no tags: LangGraphTagger derives them from the thread id and the node names."""
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, StateGraph

    from services.gateway.tagging import async_tagging_client
    from services.gateway.tagging.langgraph import LangGraphTagger

    @tool
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        return f"{city}: 18 C"

    @tool
    def book_flight(to: str) -> str:
        """Book a flight."""
        return f"booked to {to}"

    inputs = routing_inputs()
    router_model = ChatOpenAI(model=MODEL, base_url=base_url, api_key="unused", temperature=0,
                              max_tokens=320, max_retries=0, include_response_headers=True,
                              http_async_client=async_tagging_client(timeout=60),
                              extra_body={"dynbranch": {"inputs": inputs}}
                              ).bind_tools([get_weather, book_flight], tool_choice="required")
    sdk = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0,
                             http_client=async_tagging_client(openai.DefaultAsyncHttpxClient))

    async def router(state: TaggedRouteState) -> dict[str, Any]:
        return {"messages": [await router_model.ainvoke(state["messages"])]}

    def decided(state: TaggedRouteState) -> str:
        return "handler" if state["messages"][-1].tool_calls else END

    async def handler(state: TaggedRouteState) -> dict[str, Any]:
        chosen = state["messages"][-1].tool_calls[0]["name"]
        raw = await sdk.completions.with_raw_response.create(
            model=MODEL, prompt=handler_prompt(inputs, chosen), temperature=0, max_tokens=256)
        return {"handled": chosen, "source": raw.headers["x-dynbranch-source"]}

    graph = StateGraph(TaggedRouteState)
    graph.add_node("router", router)
    graph.add_node("handler", handler)
    graph.add_edge(START, "router")
    graph.add_conditional_edges("router", decided, ["handler", END])
    graph.add_edge("handler", END)
    config: Any = {"callbacks": [LangGraphTagger("routing")],  # stage: routing/<node>
                   "configurable": {"thread_id": f"thread-{uuid.uuid4().hex[:8]}"}}
    async with sdk:
        out = await graph.compile().ainvoke(
            {"messages": [HumanMessage(inputs["query"])], "handled": "", "source": ""}, config)
    assert out["messages"][-1].response_metadata["headers"]["x-dynbranch-source"] == "engine"
    assert out["handled"] in ("get_weather", "book_flight")
    assert out["source"] == "promoted_fill"


# -- the OpenAI Agents SDK ------------------------------------------------------------------


async def test_openai_agents_sdk_runs_a_function_tool(base_url: str) -> None:
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)
    called: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        called.append(city)
        return f"{city}: 18 C"

    agent = Agent(name="weather", instructions="Answer with the tool's help.",
                  tools=[get_weather],
                  model=OpenAIChatCompletionsModel(model=MODEL, openai_client=client(base_url)))
    result = await Runner.run(agent, "What is the weather in Oslo?")
    assert len(called) == 1 and isinstance(called[0], str)
    assert isinstance(result.final_output, str) and result.final_output


def test_examples_point_at_the_gateway() -> None:
    root = Path(__file__).resolve().parents[2] / "examples"
    for name in ("langgraph_agent.py", "openai_agents_sdk.py"):
        text = (root / name).read_text()
        assert "DYNBRANCH_BASE_URL" in text and "x-dynbranch-workflow-id" in text
    text = (root / "langgraph_tagged.py").read_text()
    assert "DYNBRANCH_BASE_URL" in text and "LangGraphTagger" in text


# -- the examples ---------------------------------------------------------------------------
# Last in the module: the tagged example asks what the promotion tests ask, and its answers in
# the library would serve them before their fills could be promoted.


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs_without_a_warning(base_url: str, example: Path) -> None:
    run = subprocess.run([sys.executable, "-W", "error", str(example)], capture_output=True,
                         text=True, timeout=120, env={**os.environ, "DYNBRANCH_BASE_URL": base_url})
    assert run.returncode == 0 and run.stdout and not run.stderr, run.stderr[-3000:]
