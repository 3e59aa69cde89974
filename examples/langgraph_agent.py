"""A LangGraph ReAct agent served through dynbranch: only the base URL, key and (optional)
workflow headers differ from an agent pointed at OpenAI.

The agent is LangGraph's ReAct loop as a graph (a model node that may call tools, a ``ToolNode``
and ``tools_condition`` between them), the graph that ``langchain.agents.create_agent``, the
successor of the deprecated ``langgraph.prebuilt.create_react_agent``, builds; written out here
so the example needs LangGraph alone.

    dynbranch up --engines 2 --time-scale 0.01      # in one shell; it prints the API's URL
    DYNBRANCH_BASE_URL=http://127.0.0.1:PORT/v1 python examples/langgraph_agent.py

Run it twice: the second run's model calls are answered from the library (exact reuse of the
deterministic, temperature-0 calls), as ``x-dynbranch-source`` shows. On the default simulated
engines the model is a model of an engine: it calls the offered tool, then answers in
pseudo-text.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Sequence
from typing import Any

import httpx
from langchain_core.language_models import BaseChatModel
from langchain_core.tools import BaseTool, tool
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition


@tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"{city}: 18 C, light rain"


def react_agent(model: BaseChatModel, tools: Sequence[BaseTool]) -> Any:
    """The model answers or calls tools; tool results go back to it until it answers."""
    bound = model.bind_tools(tools)

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await bound.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)  # tool calls → "tools", else the end
    graph.add_edge("tools", "agent")
    return graph.compile()


async def main() -> int:
    base_url = os.environ.get("DYNBRANCH_BASE_URL")
    if not base_url:
        print("set DYNBRANCH_BASE_URL to the URL `dynbranch up` prints (http://HOST:PORT/v1)",
              file=sys.stderr)
        return 2
    async with httpx.AsyncClient(timeout=60) as http:  # closed when the run ends
        model = ChatOpenAI(
            model=os.environ.get("DYNBRANCH_MODEL", "qwen3-32b"),
            base_url=base_url,                                   # 1. the gateway
            api_key=os.environ.get("DYNBRANCH_API_KEY", "unused"),  # 2. its key
            temperature=0,                                       # 3. deterministic: reusable
            default_headers={"x-dynbranch-workflow-id": "weather-agent-1"},  # 4. optional tags
            include_response_headers=True,                       # 5. to print answers' sources
            http_async_client=http,
        )
        agent = react_agent(model, [get_weather])
        result = await agent.ainvoke({"messages": [("user", "What is the weather in Oslo?")]})
    for message in result["messages"]:
        source = message.response_metadata.get("headers", {}).get("x-dynbranch-source", "")
        calls = [c["name"] for c in getattr(message, "tool_calls", [])]
        print(f"{message.type:>6} {source:<8} {calls or str(message.content)[:70]!s}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
