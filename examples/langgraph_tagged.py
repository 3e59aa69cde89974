"""A LangGraph agent whose model calls are tagged for dynbranch by the tagging interceptor: no
header is set by hand and the node functions know nothing of dynbranch. The graph's thread id
names the workflow and each node's name its stage of the built-in ``routing`` template, so the
gateway fills the handler for each function the router may pick while the router still decodes,
and the handler node's call is answered from that fill.

    dynbranch up                                    # in one shell; it prints the API's URL
    DYNBRANCH_BASE_URL=http://127.0.0.1:PORT/v1 python examples/langgraph_tagged.py

It prints where each answer came from (``x-dynbranch-source``): the router's from an engine,
the handler's ``promoted_fill`` (in real time, the default time scale 1, the router's short tool
call ends while the handler's fill still decodes: the handler adopts it). What makes it so,
besides base URL and key, is marked 1-3; the handler's prompt is the template's rendering.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from typing import Annotated, Any, TypedDict

import openai
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from services.gateway.tagging import async_tagging_client
from services.gateway.tagging.langgraph import LangGraphTagger
from services.gateway.templates import load_builtin
from services.gateway.templates.render import render_candidate_stage


@tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"{city}: 18 C, light rain"


@tool
def book_flight(to: str) -> str:
    """Book a flight."""
    return f"booked to {to}"


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]
    handled: str
    source: str


def build(base_url: str, api_key: str, model: str, inputs: dict[str, str],
          http: Any) -> Any:
    router_model = ChatOpenAI(
        model=model, base_url=base_url, api_key=api_key, temperature=0, max_tokens=320,
        include_response_headers=True,
        http_async_client=http,  # 1. a tagging client: requests carry the tags
        extra_body={"dynbranch": {"inputs": inputs}},  # 2. the template's inputs, for the fills
    ).bind_tools([get_weather, book_flight], tool_choice="required")
    sdk = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, http_client=http)
    routing = load_builtin("routing")

    async def router(state: State) -> dict[str, Any]:
        return {"messages": [await router_model.ainvoke(state["messages"])]}

    def decided(state: State) -> str:
        return "handler" if state["messages"][-1].tool_calls else END

    async def handler(state: State) -> dict[str, Any]:
        chosen = state["messages"][-1].tool_calls[0]["name"]
        # the template's handler prompt for the chosen function: what the gateway's fill ran
        prompt = render_candidate_stage(routing, "routing/router", chosen, "handler",
                                        inputs=inputs, outputs={}).text
        raw = await sdk.completions.with_raw_response.create(
            model=model, prompt=prompt, temperature=0, max_tokens=256)
        return {"handled": chosen, "source": raw.headers.get("x-dynbranch-source", "")}

    graph = StateGraph(State)
    graph.add_node("router", router)  # node names are the template's stage ids
    graph.add_node("handler", handler)
    graph.add_edge(START, "router")
    graph.add_conditional_edges("router", decided, ["handler", END])
    graph.add_edge("handler", END)
    return graph.compile()


async def main() -> int:
    base_url = os.environ.get("DYNBRANCH_BASE_URL")
    if not base_url:
        print("set DYNBRANCH_BASE_URL to the URL `dynbranch up` prints (http://HOST:PORT/v1)",
              file=sys.stderr)
        return 2
    query = "What is the weather in Oslo?"
    inputs = {"functions": json.dumps([{"name": "get_weather"}, {"name": "book_flight"}]),
              "query": query}
    config: Any = {"callbacks": [LangGraphTagger("routing")],  # 3. tags from thread and node
                   "configurable": {"thread_id": f"weather-{uuid.uuid4().hex[:8]}"}}
    async with async_tagging_client(openai.DefaultAsyncHttpxClient, timeout=60) as http:
        graph = build(base_url, os.environ.get("DYNBRANCH_API_KEY", "unused"),
                      os.environ.get("DYNBRANCH_MODEL", "qwen3-32b"), inputs, http)
        out = await graph.ainvoke({"messages": [HumanMessage(query)], "handled": "",
                                   "source": ""}, config)
    routed = out["messages"][-1]
    print(f"router  {routed.response_metadata.get('headers', {}).get('x-dynbranch-source', '')}"
          f"  picked {[c['name'] for c in routed.tool_calls]}")
    print(f"handler {out['source']}  for {out['handled']}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
